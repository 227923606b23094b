"""The one progress bar look shared by training and evaluation, and phase lines for work without steps."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def progress_bar(console: Console, label: str) -> Progress:
    """`label  n/N  bar  elapsed  eta remaining  <stats>`; callers fill the `stats` field of their task."""
    return Progress(
        TextColumn(f"[bold]{label}"),
        MofNCompleteColumn(),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[stats]}"),
        console=console,
    )


class PhaseLines:
    """Where long work is (sampling batch 2/3, timing step 1/2: generating token 96/320): a status line in a
    terminal; in a log, a line for each new phase and at most one every `every` seconds within a phase."""

    def __init__(self, console: Console, first: str, every: float = 30.0):
        self.console, self.first, self.every = console, first, every
        self.status = None
        self.phase = ""
        self.last_line = time.monotonic()

    def __enter__(self) -> PhaseLines:
        if self.console.is_terminal:
            self.status = self.console.status(self.first)
            self.status.__enter__()
        else:
            self.console.print(f"  {self.first}", highlight=False)
        return self

    def __exit__(self, *exc) -> None:
        if self.status is not None:
            self.status.__exit__(*exc)

    def __call__(self, text: str, new_phase: bool = False) -> None:
        if new_phase:
            self.phase = text
        shown = text if new_phase or not self.phase else f"{self.phase}: {text}"
        if self.status is not None:
            self.status.update(shown)
        elif new_phase or time.monotonic() - self.last_line >= self.every:
            self.last_line = time.monotonic()
            self.console.print(f"  {shown}", highlight=False)
