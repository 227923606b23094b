"""Validation while training (`validation:`): a callable injected by the command that starts the run (training
imports nothing from evaluation) is called before the first step, every `every_steps` optimizer steps and after the
last, on the model being trained; each result is one row of metrics.jsonl."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol

from transformers import TrainerCallback

from grpo_cli.runs.layout import METRICS_FILE
from grpo_cli.runs.validation_curve import SECONDS_KEY


class Validation(Protocol):
    """What training holds of the held-out validation the command injects (eval/training_validation.py)."""

    @property
    def questions(self) -> list[Any]:
        """The slice's questions as written (an SFT example that asks one is warned about)."""
        ...

    @property
    def batch_size(self) -> int: ...

    def first(self, n: int) -> Validation:
        """The same validation over its first `n` problems, as a new object (preflight times one batch)."""
        ...

    def __call__(self, model: Any, tokenizer: Any) -> dict[str, Any]:
        """{"val/<name>/accuracy": ..., ...} of one greedy pass of `model` (numbers, and the task's shortcut flags)."""
        ...


class ValidationCallback(TrainerCallback):
    """Runs the validation at the steps it is due, writes its row, shows it, and tells the metrics callback the
    seconds it took (so they are not counted as training time)."""

    def __init__(
        self,
        validate: Validation,
        every_steps: int,
        run_dir: Path,
        show: Callable[[str], None],
        on_row: Callable[[dict], None],
        exclude_seconds: Callable[[float], None],
        stopping: Callable[[], bool] = lambda: False,
        context: Callable[[], AbstractContextManager] = nullcontext,
    ):
        # `context`: the trainer's generation context. Under bf16 autocast the frozen Linears are bf16 while the
        # adapters stay float32, so the model only runs inside autocast (frozen_weights.py), as its rollouts do.
        self.validate, self.every_steps, self.context = validate, every_steps, context
        self.metrics_path = run_dir / METRICS_FILE
        self.show, self.on_row, self.exclude_seconds, self.stopping = show, on_row, exclude_seconds, stopping
        self._first_step_seen = False

    def on_step_begin(self, args, state, control, **kwargs):
        """Before the first step of a run that starts at step 0: the accuracy training starts from."""
        if not self._first_step_seen:
            self._first_step_seen = True
            if state.global_step == 0:  # a resumed run has its earlier validations already
                self._run(state, kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        due = state.global_step % self.every_steps == 0 or state.global_step >= state.max_steps
        if due and not self.stopping():  # Ctrl-C asked to stop: save and go, do not make the user wait
            self._run(state, kwargs)

    def _run(self, state, kwargs) -> None:
        if not state.is_world_process_zero:
            return
        self.show("validating on the held-out slice...")
        started = time.perf_counter()
        with self.context():
            figures = self.validate(kwargs["model"], kwargs["processing_class"])
        seconds = time.perf_counter() - started
        row = {"step": state.global_step, **figures, SECONDS_KEY: round(seconds, 3)}
        with self.metrics_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        self.exclude_seconds(seconds)
        self.on_row(row)
