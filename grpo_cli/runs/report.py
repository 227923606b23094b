"""`grpo report`: reward (with the held-out validation accuracy beside it, a cross where validation flagged a
shortcut, and a dotted line where a health signature started), KL and completion-length curves of a run as one PNG.
It reads a grpo run directory, or a plain TRL run's trainer_state.json."""

from __future__ import annotations

from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.files import check_writable_file, read_jsonl
from grpo_cli.runs.health import Alarm
from grpo_cli.runs.layout import METRICS_FILE, REPORT_FILE, reward_keys, sft_dir
from grpo_cli.runs.run_health import is_trl_run, run_alarms, trainer_state_rows
from grpo_cli.runs.validation_curve import PREFIX, accuracy_keys, shortcut_points

TOOL_KEYS = ("tools/call_frequency", "tools/failure_frequency", "tools/malformed_frequency")


def read_metrics(run_dir: Path, warn=None) -> list[dict]:
    """The logged steps; lines a killed run leaves (cut short, stray, without `step`) are skipped and `warn`ed. A
    folder TRL wrote (trainer_state.json, no metrics.jsonl): its log_history."""
    if is_trl_run(run_dir):
        return trainer_state_rows(run_dir)
    path = run_dir / METRICS_FILE
    if not path.exists():
        raise UserError(f"{path} not found: is {run_dir} a run directory written by `grpo train`?")
    read = read_jsonl(path, required=("step",))
    if read.skipped and warn:
        lines = ", ".join(map(str, read.skipped[:5])) + (" ..." if len(read.skipped) > 5 else "")
        warn(f"skipped {len(read.skipped)} line(s) of {path} that are not logged steps (line {lines})")
    rows = [row for row in read.rows if _is_step(row["step"])]
    if len(rows) < len(read.rows) and warn:
        warn(f"skipped {len(read.rows) - len(rows)} line(s) of {path} whose step is not a whole number")
    if not rows:
        raise UserError(f"{path} holds no logged step yet")
    return rows


def _is_step(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def panels_for(rows: list[dict]) -> list[tuple[str, list[str]]]:
    """(title, metric keys) of each panel the report draws for these logged steps."""
    validation = accuracy_keys(rows)  # on the reward's panel: a reward that climbs while accuracy does not shows
    title = "reward; held-out accuracy (dashed)" if validation else "reward"
    panels = [(title, ["reward", *reward_keys({k for r in rows for k in r}), *validation])]
    if any(r.get("kl") is not None for r in rows):
        panels.append(("KL to reference", ["kl"]))
    panels.append(("completion length (tokens)", ["completions/mean_length"]))
    tool_keys = [k for k in TOOL_KEYS if any(r.get(k) is not None for r in rows)]
    if tool_keys:  # a run with tools: how often the model calls, fails, and tries in a form the parser misses
        panels.append(("tool calls per completion; failed share of calls", tool_keys))
    return panels


def plot_run(run_dir: Path, output: Path | None = None, warn=None) -> Path:
    """Write the run's PNG and return its path (report_run without the alarms)."""
    return report_run(run_dir, output, warn)[0]


def report_run(run_dir: Path, output: Path | None = None, warn=None) -> tuple[Path, list[Alarm] | None]:
    """Write the PNG (the SFT stage's loss when the run had one; reward total and per reward; KL when beta > 0;
    completion length; tool calls when the run has tools) and return its path with the run's health alarms (None
    when it logged no GRPO step yet). A value that is not a number is left out of its curve, with a warning."""
    sft = _sft_losses(run_dir)
    if sft and not is_trl_run(run_dir) and not read_jsonl(run_dir / METRICS_FILE, required=("step",)).rows:
        rows, alarms = [], None  # stopped in its SFT, before GRPO logged a step: the SFT stage's loss is all
        if warn:
            warn(f"{run_dir} has logged no GRPO step yet: drawing its SFT's loss")
    else:
        rows = read_metrics(run_dir, warn)
        alarms = run_alarms(run_dir, rows)
    output = output or run_dir / REPORT_FILE
    check_writable_file(output, force=True)  # the report is ours to redraw; a missing folder is the user's to fix
    _draw(run_dir, rows, sft, alarms or [], output, warn)
    return output, alarms


def _draw(run_dir: Path, rows: list[dict], sft: list, alarms: list[Alarm], output: Path, warn) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    panels = panels_for(rows) if rows else []
    extra = 1 if sft else 0
    not_numbers: set[str] = set()

    fig, axes = plt.subplots(len(panels) + extra, 1, figsize=(8, 3 * (len(panels) + extra)), squeeze=False)
    if sft:  # the supervised stage GRPO started from: its own steps, so its own axis
        axes[0, 0].plot(*zip(*sft), linewidth=2.0)
        axes[0, 0].set_title("SFT (supervised) loss")
        axes[0, 0].set_xlabel("SFT step")
        axes[0, 0].grid(alpha=0.3)
    for ax, (title, keys) in zip(axes[extra:, 0], panels):
        for key in keys:
            values = [r.get(key) for r in rows]
            points = [(s, v) for s, v in zip(steps, values) if _is_number(v)]
            if any(v is not None and not _is_number(v) for v in values):
                not_numbers.add(key)
            if points:
                ax.plot(*zip(*points), **_line_style(key))
        if any(key.startswith(PREFIX) for key in keys):  # the reward's panel, with validation's accuracy
            _mark_shortcuts(ax, rows)
        if ax is axes[extra, 0]:  # the reward's panel
            _mark_alarms(ax, alarms)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize="small")
    if panels:
        axes[-1, 0].set_xlabel("GRPO step" if sft else "step")
    if not_numbers and warn:
        warn(f"left out values that are not numbers in {run_dir / METRICS_FILE} ({', '.join(sorted(not_numbers))})")
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)


def _mark_shortcuts(ax, rows: list[dict]) -> None:
    """A red cross on the validation curve where the shortcut flag was raised (eval/shortcuts.py), the first one
    named: an accuracy that rises while the model gives one answer to everything is not the task learned."""
    points = shortcut_points(rows)
    if not points:
        return
    ax.plot(*zip(*points), linestyle="none", marker="x", markersize=10, color="red", label="shortcut flagged")
    step, accuracy = points[0]
    ax.annotate(f"shortcut (step {step})", (step, accuracy), textcoords="offset points", xytext=(6, 6), color="red")


def _mark_alarms(ax, alarms: list[Alarm]) -> None:
    """A dotted line where each health signature started (runs/health.py), named at the top of the panel."""
    for alarm in alarms:
        ax.axvline(alarm.step, color="darkorange", linestyle=":", linewidth=1.5)
        ax.annotate(
            alarm.signature, (alarm.step, 1), xycoords=("data", "axes fraction"), rotation=90, va="top",
            ha="right", fontsize="small", color="darkorange",
        )  # fmt: skip


def _line_style(key: str) -> dict:
    """A metric's label and line: the total reward bold, validation accuracies dashed with a marker per validation."""
    if key.startswith(PREFIX):
        name = key.removeprefix(PREFIX).removesuffix("/accuracy")
        return {"label": f"validation {name}", "linestyle": "--", "marker": "o", "linewidth": 1.5}
    label = key.removeprefix("rewards/").removeprefix("tools/").removesuffix("/mean") if key != "reward" else "total"
    return {"label": label, "linewidth": 2.0 if key == "reward" else 1.2}


def _sft_losses(run_dir: Path) -> list[tuple[int, float]]:
    """(step, loss) of the run's SFT stage, when it had one (RUN/sft/metrics.jsonl); empty otherwise."""
    path = sft_dir(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    rows = read_jsonl(path, required=("step",)).rows
    return [(r["step"], r["loss"]) for r in rows if _is_step(r["step"]) and _is_number(r.get("loss"))]
