"""One training stage under the console, the warm-up's SFTTrainer and GRPO's trainer alike: the progress display,
Ctrl-C (stop after the step that is running, a checkpoint saved), resuming from a checkpoint, and the closing hint."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from grpo_cli.runs.layout import checkpoint_step


def stage_display(console: Console, total_steps: int, checkpoint: Path | None):
    """The progress display of a stage; a resumed one counts on from its checkpoint's step."""
    from grpo_cli.train.display import TrainingDisplay

    return TrainingDisplay(console, total_steps, checkpoint_step(checkpoint) if checkpoint else 0)


def train_stage(trainer, display, interrupt, checkpoint: Path | None) -> None:
    """Train from `checkpoint` (None: step 0) under `display`; `interrupt` (callbacks.InterruptCallback, among the
    trainer's callbacks) turns Ctrl-C into a stop at the end of the step, with a checkpoint saved."""
    interrupt.install()
    try:
        with display:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        interrupt.uninstall()


def interrupted_line(stage: str, step: int) -> str:
    """What the console says when Ctrl-C stopped a stage: where, and the command that continues it."""
    where = f" in the {stage}" if stage else ""
    return f"interrupted{where} at step {step}; continue with: grpo train <recipe> --resume"
