"""Does `grpo train` make a model better at GSM8K? The whole proof, rerun from a clean directory.

1. `grpo train` on the GSM8K train split (the recipe's first 7000 problems; the last 300 are the validation slice
   settings were chosen on) with `--proof qwen2.5-coder-0.5b` (the default: recipes/gsm8k/qwen2.5_coder_0.5b_cpu.yaml,
   the model assembled from its six PyPI parts by benchmarks/models/qwen2.5_coder_0.5b.sh) or `smollm2-135m`;
2. `grpo eval compare RUN` on the test split with the recipe's chat prompt and answer marker (greedy), base and
   trained on the same problems, with a paired 95% interval of the change;
3. the table: training reward over the first and last 20% of steps, test strict-match and flexible-extract with
   Wilson intervals, format rate, mean completion length, completions cut at the budget.

    python benchmarks/gsm8k_learning.py [--workdir DIR] [--limit N] [--base DIR] [overrides...]
    python benchmarks/gsm8k_learning.py --table RUN COMPARE_DIR [--base DIR]   # the table of finished work only

`--base DIR` reuses a base evaluation with the same settings (the float32 one of the Qwen recipe is in the history:
benchmarks/gsm8k_learning/ATTEMPTS.md, `base`); `--limit N` evaluates the first N test problems only. Training
resumes: rerunning with the same `--workdir` continues the run (`--resume`) and the evaluation where they stopped.
On 2 CPU cores, Qwen: about 8 minutes a training step, 2-2.5 hours per full evaluation; SmolLM2: about an hour of
training, 30-60 minutes each evaluation.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from grpo_cli.eval.stats import paired_difference, wilson_interval

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "gsm8k"  # ../shared/data/gsm8k from the repository root
PROOFS = {  # name: (recipe, command printing the model path or None for the recipe's own model)
    "qwen2.5-coder-0.5b": (
        ROOT / "recipes" / "gsm8k" / "qwen2.5_coder_0.5b_cpu.yaml",
        ["bash", str(ROOT / "benchmarks" / "models" / "qwen2.5_coder_0.5b.sh")],
    ),
    "smollm2-135m": (ROOT / "recipes" / "gsm8k" / "smollm2_135m_cpu.yaml", None),
}


def run(command: list[str]) -> float:
    print("$ " + " ".join(command), flush=True)
    started = time.perf_counter()
    if subprocess.run(command, cwd=ROOT).returncode != 0:  # from the root: the committed base's relative paths hold
        sys.exit(f"failed: {' '.join(command)}")
    return time.perf_counter() - started


def first_last(run_dir: Path, key: str) -> tuple[float, float, int]:
    """Mean of a metric over the first and the last 20% of steps, and the number of steps."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get(key) is not None]
    fifth = max(1, round(len(rows) * 0.2))
    mean = lambda part: sum(r[key] for r in part) / len(part)  # noqa: E731
    return mean(rows[:fifth]), mean(rows[-fifth:]), len(rows)


def predictions(eval_dir: Path) -> dict[int, dict]:
    rows = (json.loads(line) for line in (eval_dir / "predictions.jsonl").read_text().splitlines() if line.strip())
    return {r["index"]: r for r in rows}


def model_row(label: str, rows: list[dict], budget: int) -> str:
    """One model on the problems both evaluations scored: accuracy with a Wilson 95% interval per filter, how
    often it wrote the marker, mean completion length and completions cut at the budget."""
    n = len(rows)
    cells = []
    for name in ("strict-match", "flexible-extract"):
        right = sum(bool(r["correct"][name]) for r in rows)
        low, high = wilson_interval(right, n)
        cells.append(f"{100 * right / n:.1f}% ({100 * low:.1f}-{100 * high:.1f}), {right}")
    formatted = sum(bool(r["formatted"]) for r in rows)
    mean_tokens = sum(r["new_tokens"] for r in rows) / n
    cut = sum(r["new_tokens"] >= budget for r in rows)
    return (
        f"| {label} | {n} | {cells[0]} | {cells[1]} | {100 * formatted / n:.1f}% | {mean_tokens:.0f} | "
        f"{cut} ({100 * cut / n:.1f}%) |"
    )


def table(run_dir: Path, root: Path, base_dir: Path, budget: int) -> str:
    """Training first vs last 20% of steps, then base and trained on the problems both scored, and the paired
    change (an evaluation still running is compared on what it has so far)."""
    first, last, steps = first_last(run_dir, "reward")
    right_first, right_last, _ = first_last(run_dir, "rewards/correctness/mean")
    base, trained = predictions(base_dir), predictions(root / "trained")
    common = sorted(set(base) & set(trained))
    lines = [
        f"training: {steps} steps, mean reward first 20% of steps {first:.3f} -> last 20% {last:.3f}; "
        f"correctness {right_first:.3f} -> {right_last:.3f}",
        "",
        "| model | problems | strict-match (95%) | flexible-extract (95%) | format rate | mean tokens "
        "| cut at budget |",
        "|---|---|---|---|---|---|---|",
        model_row("base", [base[i] for i in common], budget),
        model_row("trained", [trained[i] for i in common], budget),
        "",
    ]
    for name in ("strict-match", "flexible-extract"):
        f = paired_difference(
            [bool(base[i]["correct"][name]) for i in common], [bool(trained[i]["correct"][name]) for i in common]
        )
        lines.append(
            f"{name}: {100 * f['difference']:+.1f} pts, paired 95% {100 * f['low']:+.1f} to "
            f"{100 * f['high']:+.1f} ({f['fixed']} fixed, {f['broken']} broken)"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--proof", choices=sorted(PROOFS), default="qwen2.5-coder-0.5b")
    parser.add_argument("--workdir", type=Path, default=Path("gsm8k_learning_run"))
    parser.add_argument("--limit", type=int, help="Evaluate the first N test problems only (default: all 1319).")
    parser.add_argument("--base", type=Path, help="Reuse this base evaluation (same settings).")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument(
        "--table",
        nargs=2,
        type=Path,
        metavar=("RUN", "COMPARE_DIR"),
        help="Only print the table of an existing run and comparison (needs --base when the comparison reused one).",
    )
    parser.add_argument("overrides", nargs="*", help="key=value overrides for the training recipe")
    args = parser.parse_args()
    if args.table:
        run_dir, root = args.table
        print(table(run_dir, root, args.base or root / "base", args.max_new_tokens))
        return
    args.workdir = args.workdir.resolve()
    args.base = args.base.resolve() if args.base else None
    grpo = shutil.which("grpo") or sys.exit("install the package first (README)")
    recipe, assemble = PROOFS[args.proof]
    model = []
    if assemble:
        path = subprocess.run(assemble, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        model = [f"model.name={path}"]
    run_dir = args.workdir / "run"
    resume = ["--resume"] if (run_dir / "recipe.yaml").exists() else []  # a rerun continues where it stopped
    train_s = run(
        [
            grpo,
            "train",
            str(recipe),
            *model,
            f"data.source={DATA / 'train.jsonl'}",
            f"training.output_dir={run_dir}",
            *args.overrides,
            *resume,
        ]
    )
    root = args.workdir / "compare"
    # float32 generation, as every committed evaluation of these proofs was made (the default follows the training
    # precision, bfloat16 on CPUs that have it, and a base evaluation reused with --base must match).
    command = [
        grpo,
        "eval",
        "compare",
        str(run_dir),
        "model.mixed_precision=no",
        "--data",
        str(DATA / "test.jsonl"),
        "--output",
        str(root),
        f"eval.max_new_tokens={args.max_new_tokens}",
    ]
    command += ["--limit", str(args.limit)] if args.limit else []
    command += ["--base", str(args.base)] if args.base else []
    eval_s = run(command)
    run([grpo, "report", str(run_dir)])
    print(f"\ntraining {train_s / 60:.1f} min, evaluation {eval_s / 60:.1f} min\n")
    print(table(run_dir, root, args.base or root / "base", args.max_new_tokens))


if __name__ == "__main__":
    main()
