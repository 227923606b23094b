"""The validation curve of a run: `grpo eval compare` results of several checkpoints as one table and one plot.

Each STEP=DIR names a checkpoint's step and the `--output` folder of its `grpo eval compare` (which holds
comparison.json: base and trained accuracy on the same problems, the paired 95% interval of the change, problems
fixed and broken). All must share one base evaluation, or the curve compares different things.

    python benchmarks/validation_curve.py OUT.png 4=runs/c3-val/ckpt4 8=runs/c3-val/ckpt8 [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpo_cli.eval.scoring import FILTERS  # noqa: E402
from grpo_cli.runs.layout import COMPARISON_FILE  # noqa: E402


def read_points(specs: list[str]) -> list[tuple[int, dict]]:
    """(step, comparison) for each STEP=DIR, in step order; stops with a message on a bad spec or mixed bases."""
    points = []
    for spec in specs:
        step, sep, folder = spec.partition("=")
        if not sep or not step.isdigit():
            sys.exit(f"{spec}: write STEP=DIR, e.g. 8=runs/c3-val/ckpt8")
        path = Path(folder) / COMPARISON_FILE
        if not path.exists():
            sys.exit(f"{path} not found: is {folder} the --output of `grpo eval compare`?")
        points.append((int(step), json.loads(path.read_text())))
    bases = {(c["base"], c["problems"]) for _, c in points}
    if len(bases) > 1:
        sys.exit(f"the comparisons use different base evaluations or problem counts: {sorted(bases)}")
    return sorted(points, key=lambda point: point[0])


def table(points: list[tuple[int, dict]]) -> str:
    """A markdown table: step 0 is the base, then each checkpoint with its paired interval in points."""
    first = points[0][1]
    header = "| step | " + " | ".join(FILTERS) + " | mean tokens |\n|---|---|---|---|\n"
    base = [f"{first['filters'][name]['base']:.1%}" for name in FILTERS]
    rows = [f"| 0 (base) | {' | '.join(base)} | {first['base_behaviour']['mean_new_tokens']:.0f} |"]
    for step, comparison in points:
        cells = []
        for name in FILTERS:
            f = comparison["filters"][name]
            cells.append(
                f"{f['trained']:.1%} ({100 * f['low']:+.1f} to {100 * f['high']:+.1f} pts; "
                f"{f['fixed']} fixed, {f['broken']} broken)"
            )
        tokens = comparison["trained_behaviour"]["mean_new_tokens"]
        rows.append(f"| {step} | {' | '.join(cells)} | {tokens:.0f} |")
    return header + "\n".join(rows) + "\n"


def plot(points: list[tuple[int, dict]], output: Path) -> None:
    """Accuracy per filter against the step; bars are the paired 95% interval placed on the base's accuracy."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, colour in zip(FILTERS, ("tab:blue", "tab:orange")):
        base = points[0][1]["filters"][name]["base"]
        steps = [0] + [step for step, _ in points]
        values = [base] + [c["filters"][name]["trained"] for _, c in points]
        low = [0] + [c["filters"][name]["difference"] - c["filters"][name]["low"] for _, c in points]
        high = [0] + [c["filters"][name]["high"] - c["filters"][name]["difference"] for _, c in points]
        ax.errorbar(
            steps,
            [100 * v for v in values],
            yerr=[[100 * v for v in low], [100 * v for v in high]],
            marker="o",
            capsize=3,
            color=colour,
            label=name,
        )
        ax.axhline(100 * base, color=colour, linestyle=":", linewidth=1)
    problems = points[0][1]["problems"]
    ax.set(
        xlabel="training step (0 = base)",
        ylabel="accuracy (%)",
        title=f"validation on {problems} problems; bars: paired 95% interval of the change",
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend()
    fig.tight_layout()
    fig.savefig(output, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="the PNG to write")
    parser.add_argument("points", nargs="+", help="STEP=DIR, one per validated checkpoint")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args()
    points = read_points(args.points)
    text = table(points)
    print(text, end="")
    if args.markdown:
        args.markdown.write_text(text)
    plot(points, args.output)
    print(f"plot: {args.output}")


if __name__ == "__main__":
    main()
