"""Trainer callbacks: the metrics file, completion samples, progress display, clean interruption."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo_cli.process.allocator import peak_rss
from grpo_cli.reward_guard import GuardedReward
from grpo_cli.runs.layout import METRICS_FILE, SAMPLES_FILE


def peak_memory_gb() -> tuple[float, str]:
    """Peak memory so far: CUDA tensors when on a GPU, else the process's peak resident set."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**30, "cuda_max_allocated"
    return peak_rss() / 2**30, "cpu_peak_rss"


# grpo's own figures that also go to the trackers (`training.report_to`), under transformers' `train/` prefix.
TRACKED_FIGURES = ("step_time_s", "completion_tokens_per_s", "generation_s", "peak_memory_gb")


class MetricsCallback(TrainerCallback):
    """One JSON line per logging step, plus a few completion samples; also feeds the progress display. It runs
    before the trackers' callbacks (run.py puts it first) and adds TRACKED_FIGURES to the log they receive."""

    def __init__(
        self,
        run_dir: Path,
        completions_per_step: int,
        generation_batch: int,
        recorder: GuardedReward | None,
        on_metrics: Callable[[dict], None],
        generation_seconds: Callable[[], float] | None = None,
        health: Callable[[], list[str]] | None = None,
    ):
        self.metrics_path = run_dir / METRICS_FILE
        self.samples_path = run_dir / SAMPLES_FILE
        self.completions_per_step = completions_per_step
        self.generation_batch = generation_batch
        self.recorder = recorder
        self.on_metrics = on_metrics
        self._last_time = time.perf_counter()
        self._last_step = 0
        self.generation_seconds = generation_seconds  # StepPhases.take_generation_seconds: None leaves it out
        self.health = health  # HealthCallback.in_force, which runs before this callback

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_time = time.perf_counter()
        self._last_step = state.global_step

    def exclude_seconds(self, seconds: float) -> None:
        """Time spent outside training since the last logging step (a validation): not part of step_time_s."""
        self._last_time += seconds

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "loss" not in logs:
            return
        now = time.perf_counter()
        steps = max(1, state.global_step - self._last_step)
        step_time = (now - self._last_time) / steps
        self._last_time, self._last_step = now, state.global_step
        peak, kind = peak_memory_gb()
        mean_length = logs.get("completions/mean_length") or 0.0
        record = {
            "step": state.global_step,
            "epoch": logs.get("epoch"),
            **{k: _finite(v) for k, v in logs.items() if k != "epoch"},
            "step_time_s": round(step_time, 4),
            "completion_tokens_per_s": round(mean_length * self.generation_batch / step_time, 2) if step_time else None,
            # the generate-and-score phase's share of the step (sampling, rewards, reference log-probs); the rest
            # is training
            "generation_s": round(self.generation_seconds() / steps, 3) if self.generation_seconds else None,
            "mixed_precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "no",
            "peak_memory_gb": round(peak, 4),
            "peak_memory_kind": kind,  # rank 0's
            "allocator": os.environ.get("GRPO_ALLOCATOR", "system"),  # mimalloc on a CPU (process/allocator.py)
            "world_size": args.world_size,
            **({"health": self.health()} if self.health else {}),
        }
        with self.metrics_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        logs.update((key, record[key]) for key in TRACKED_FIGURES if record[key] is not None)
        if self.recorder is not None and self.completions_per_step:
            with self.samples_path.open("a", encoding="utf-8") as fh:
                for sample in self.recorder.latest[: self.completions_per_step]:
                    fh.write(json.dumps({"step": state.global_step, **sample}) + "\n")
        self.on_metrics(record)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class InterruptCallback(TrainerCallback):
    """Ctrl-C or SIGTERM: finish the current step, save a checkpoint, stop cleanly (then `--resume`).

    A second Ctrl-C aborts at once, except while a checkpoint is being written: then it waits for the save (a third
    one aborts anyway: a half-written checkpoint lacks trainer_state.json, which the Trainer writes last, and
    `--resume` passes it by)."""

    def __init__(self):
        self.requested = False
        self.saving = False
        self.presses = 0
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame) -> None:
        self.presses += 1
        if self.requested and self.saving and self.presses == 2:
            print("\nwriting the checkpoint; it takes a moment (Ctrl-C again to abort without it)...", file=sys.stderr)
            return
        if self.requested:  # a second Ctrl-C means "now"
            raise KeyboardInterrupt
        self.requested = True
        print("\nstopping after this step and saving a checkpoint (Ctrl-C again to abort)...", file=sys.stderr)

    def on_step_end(self, args, state, control, **kwargs):
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
        self.saving = bool(control.should_save)

    def on_save(self, args, state, control, **kwargs):
        self.saving = False
