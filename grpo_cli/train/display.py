"""What a person watches during training: a rich progress bar in a terminal, plain lines elsewhere (CI, logs)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table

from grpo_cli.progress import progress_bar
from grpo_cli.runs.layout import headline_keys
from grpo_cli.runs.validation_curve import PREFIX, SECONDS_KEY, accuracy_keys, new_shortcut

SHOWN = (
    ("reward", "reward"),
    ("kl", "kl"),
    ("completions/mean_length", "len"),
    ("zero_variance/groups_flat", "flat groups"),
    # with tools (TRL's and grpo's counts, per completion): whether the model calls, and how well
    ("tools/call_frequency", "calls"),
    ("tools/malformed_frequency", "malformed"),
    ("tools/failure_frequency", "tool errors"),
    ("tools/turns", "turns"),
    ("loss", "loss"),
)


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


class TrainingDisplay:
    def __init__(self, console: Console, total_steps: int, steps_done: int = 0):
        self.console = console
        self.total = total_steps
        self.steps_done = steps_done  # a resumed run starts counting at its checkpoint's step
        self.history: list[dict] = []
        self.validations: list[dict] = []  # the validation rows (`validation:`), beside the training steps
        self.progress = None
        self.stats = "generating..."
        self._last_phase_line = time.monotonic()
        self._last_phase_kind = ""
        if console.is_terminal:
            self.progress = progress_bar(console, "step")
            self.task = self.progress.add_task("train", total=total_steps, completed=steps_done, stats="generating...")

    def __enter__(self):
        if self.progress:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress:
            self.progress.stop()

    def phase(self, text: str) -> None:
        """Where the current step is (generating token k/N, training micro-batch i/n). In a log, a line when the
        phase changes (its first word) and at most one every 30 s within it: alive, without flooding the file."""
        if self.progress:
            self.progress.update(self.task, stats=f"{self.stats}  | {text}")
            return
        kind = text.split(" ", 1)[0]
        if kind != self._last_phase_kind or time.monotonic() - self._last_phase_line >= 30:
            self._last_phase_line, self._last_phase_kind = time.monotonic(), kind
            self.console.print(f"  step {self.steps_done + 1}/{self.total}: {text}", highlight=False)

    def update(self, record: dict) -> None:
        self.history.append(record)
        self.steps_done = record["step"]
        stats = "  ".join(f"{label} {_fmt(record.get(key))}" for key, label in SHOWN if key in record)
        self.stats = stats
        if self.progress:
            self.progress.update(self.task, completed=record["step"], stats=stats)
        else:
            self.console.print(
                f"step {record['step']}/{self.total}  {stats}  ({record['step_time_s']:.1f}s/step)", highlight=False
            )

    def validated(self, row: dict) -> None:
        """A validation row (validation_callback.py): one line above the progress bar, kept for the summary."""
        self.validations.append(row)
        shown = "  ".join(
            f"{key.removeprefix(PREFIX).removesuffix('/accuracy')} {row[key]:.3f}" for key in accuracy_keys([row])
        )
        rate = row.get(f"{PREFIX}format_rate")
        self.console.print(
            f"validation at step {row['step']}: {shown}"
            + (f"  format {rate:.3f}" if rate is not None else "")
            + f"  ({row[f'{PREFIX}problems']} problems, {row[SECONDS_KEY]:.1f}s)",
            highlight=False,
            soft_wrap=True,
        )
        flagged = new_shortcut(row, self.validations[:-1])  # once per kind of flag (task protocol: eval/shortcuts.py)
        if flagged:
            self.console.print(flagged, style="yellow", highlight=False, soft_wrap=True)

    def summary(self) -> Table:
        """First and last logged values of the headline metrics."""
        table = Table(title="run summary", box=None)
        table.add_column("metric")
        table.add_column("first", justify="right")
        table.add_column("last", justify="right")
        if not self.history:
            return table
        first, last = self.history[0], self.history[-1]
        tools = [key for key, _ in SHOWN if key.startswith("tools/") and key in last]
        keys = headline_keys(last) + tools + ["loss", "step_time_s", "peak_memory_gb"]
        for key in keys:
            if key in last:
                table.add_row(key, _fmt(first.get(key)), _fmt(last.get(key)))
        return table
