"""What the console shows: the one progress bar look shared by training and evaluation, phase lines for work
without steps, and library chatter (progress bars, deprecation and hub warnings) kept off it."""

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


def silence_import_notes() -> None:
    """Before any library is imported: notes they log at import time, about optional speed-ups that are absent.

    bitsandbytes logs a warning on AVX512-BF16 CPUs when its optional hub kernel is missing (it falls back itself);
    the level must be set before its first import, which trl and peft trigger. TRL warns at each of its vLLM checks
    (seven at import) that vLLM 0.32 is past the range it was released with; grpo runs and tests that pairing
    (tests/test_vllm_cpu.py)."""
    import logging
    import warnings

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions")


def quiet_libraries() -> None:
    """Library progress bars and deprecation chatter drown the run's own output; errors still show."""
    import warnings

    import datasets
    import huggingface_hub
    import transformers

    datasets.disable_progress_bars()
    huggingface_hub.utils.logging.set_verbosity_error()  # offline: a retry warning per request before our one line
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    silence_import_notes()
