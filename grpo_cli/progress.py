"""The one progress bar look shared by training and evaluation."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def progress_bar(console: Console, label: str) -> Progress:
    """`label  n/N  bar  elapsed  eta remaining  <stats>`; callers fill the `stats` field of their task."""
    return Progress(
        TextColumn(f"[bold]{label}"), MofNCompleteColumn(), BarColumn(), TimeElapsedColumn(),
        TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[stats]}"), console=console,
    )
