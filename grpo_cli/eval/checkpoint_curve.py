"""`grpo eval curve RUN`: the base model (step 0), every checkpoint the run kept and its final model, each
evaluated as `grpo eval run` would (resumable folders side by side), then one accuracy curve: curve.jsonl (a row a
step, each filter or verifier with its 95% interval) and curve.png. The same figures validation logs while
training, for runs that did not validate, or on more problems than they validated on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.eval import evaluate as ev
from grpo_cli.eval.store import refuse_foreign
from grpo_cli.eval.targets import Target, run_target
from grpo_cli.files import read_jsonl
from grpo_cli.recipe.eval_section import EvalSection
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.layout import CHECKPOINT, FINAL_DIR, METRICS_FILE, SUMMARY_FILE, checkpoint_step, checkpoints
from grpo_cli.runs.weight_files import unloadable_weights

CURVE_FILE = "curve.jsonl"
CURVE_PLOT = "curve.png"


def checkpoint_targets(run_dir: Path, base_model: str, warn=print) -> list[tuple[int, str, Target]]:
    """(step, folder name, model) from the base at step 0 (`base_model`: the recipe's model.name) to the final model;
    a checkpoint whose weights cannot load (a save that was interrupted: weights cut short, an adapter's config
    without its weights) is skipped with a warning, and the final model is left out when a checkpoint holds its
    step."""
    points = [(0, "base", Target("base", base_model))]
    for folder in checkpoints(run_dir):
        unloadable = unloadable_weights(folder)
        if unloadable is not None:
            file, why = unloadable
            warn(f"warning: {folder} skipped (an interrupted save): {file.name} {why}")
            continue
        points.append((checkpoint_step(folder), folder.name, run_target(folder, base_model)))
    final_step = _last_step(run_dir)
    if (run_dir / FINAL_DIR).is_dir() and final_step is not None and final_step > points[-1][0]:
        points.append((final_step, FINAL_DIR, run_target(run_dir, base_model)))
    if len(points) == 1:
        raise UserError(f"{run_dir} has no checkpoint and no final model yet: nothing to draw a curve of")
    return points


def _last_step(run_dir: Path) -> int | None:
    """The last optimizer step the run logged: the final model's step."""
    rows = read_jsonl(run_dir / METRICS_FILE, ("step",)).rows
    steps = [row["step"] for row in rows if isinstance(row["step"], int)]
    return max(steps, default=None)


def evaluate_checkpoints(
    recipe: Recipe, run_dir: Path, output: Path, display=None, engine: str = "auto", base_dir: Path | None = None
) -> tuple[list[ev.EvalResult], list[dict[str, Any]]]:
    """Every point of the run evaluated into output/<folder> (the base into `base_dir` when given), then the curve.
    Checkpoints evaluated here before and deleted since (`save_total_limit`) keep their point."""
    refuse_foreign(output, {"base", FINAL_DIR, CURVE_FILE, CURVE_PLOT}, "grpo eval curve", CHECKPOINT)
    warn = display.note if display is not None else print
    results, curve = [], {}
    for step, name, target in checkpoint_targets(run_dir, recipe.model.name, warn):
        folder = base_dir if name == "base" and base_dir is not None else output / name
        result = ev.evaluate(recipe, target, folder, display, engine)
        results.append(result)
        curve[step] = curve_row(step, name, result.summary)
    for folder in checkpoints(output):  # RUN/checkpoint-K is gone; its evaluation here is not
        summary = folder / SUMMARY_FILE
        if checkpoint_step(folder) not in curve and summary.is_file():
            row = curve_row(checkpoint_step(folder), folder.name, json.loads(summary.read_text(encoding="utf-8")))
            if row["problems"] == curve[0]["problems"]:  # a finished evaluation of the same problems
                curve[row["step"]] = row
    points = [curve[step] for step in sorted(curve)]
    (output / CURVE_FILE).write_text("".join(json.dumps(row) + "\n" for row in points), encoding="utf-8")
    plot_curve(points, output / CURVE_PLOT, f"{run_dir.name}: {recipe.eval.protocol} on {_data_label(recipe.eval)}")
    return results, points


def _data_label(section: EvalSection) -> str:
    """What was evaluated, for the plot's title: `generated:parity (test), first 400`."""
    return f"{section.source} ({section.split})" + (f", first {section.limit}" if section.limit else "")


def curve_row(step: int, name: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One point: each filter's (or verifier's) accuracy and interval, as summary.json has them, and the shortcut
    flag's kinds where the summary has one."""
    row: dict[str, Any] = {"step": step, "model": name, "problems": summary["problems"]}
    for filter_name, figures in summary["filters"].items():
        row[filter_name] = {"accuracy": figures["accuracy"], "ci95": figures.get("ci95")}
    if "shortcut" in summary:  # the task protocol: the kinds of flag raised (eval/shortcuts.py), [] for none
        row["shortcut"] = summary["shortcut"]["kinds"]
    return row


def plot_curve(curve: list[dict[str, Any]], path: Path, title: str) -> None:
    """Accuracy against step, one line per filter, its 95% interval shaded."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [row["step"] for row in curve]
    for name in [k for k, v in curve[0].items() if isinstance(v, dict)]:
        ax.plot(steps, [row[name]["accuracy"] for row in curve], marker="o", label=name)
        intervals = [row[name]["ci95"] for row in curve]
        if all(intervals):
            ax.fill_between(steps, [lo for lo, _ in intervals], [hi for _, hi in intervals], alpha=0.2)
    ax.set(xlabel="optimizer step (0: base)", ylabel="accuracy", title=f"{title}, {curve[0]['problems']} problems")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
