"""One training stage under the console, the SFT stage's SFTTrainer and GRPO's trainer alike: the progress display,
Ctrl-C (stop after the step that is running, a checkpoint saved), resuming from a checkpoint, the closing hint, and
the one rule both save their finished model by."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from grpo_cli.runs.layout import FINAL_STAGING, checkpoint_step


def stage_display(console: Console, total_steps: int, checkpoint: Path | None):
    """The progress display of a stage; a resumed one counts on from its checkpoint's step."""
    from grpo_cli.train.display import TrainingDisplay

    return TrainingDisplay(console, total_steps, checkpoint_step(checkpoint) if checkpoint else 0)


def train_stage(trainer, display, interrupt, checkpoint: Path | None) -> None:
    """Train from `checkpoint` (None: step 0) under `display`; `interrupt` (callbacks.InterruptCallback, among the
    trainer's callbacks) turns Ctrl-C into a stop at the end of the step, with a checkpoint saved."""
    if checkpoint:
        restore_trained_adapter(trainer.model, checkpoint)
    interrupt.install()
    try:
        with display:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        interrupt.uninstall()


def restore_trained_adapter(model, checkpoint: Path) -> None:
    """Load the checkpoint's trained adapter into `model` before a resumed stage trains.

    With beta > 0 and a model that already has an adapter (an SFT stage's, a start_weights one), TRL keeps a frozen copy
    named `ref`, saved in a sub-folder of every checkpoint. transformers' Trainer (5.x) then resumes a PEFT model from
    the sub-folders alone and never reads the trained adapter at the checkpoint's root: the policy restarted from its
    first weights while the optimizer and the step count resumed (a run's KL fell to 0 at every resume)."""
    root = checkpoint / "adapter_model.safetensors"
    subfolders = [p for p in checkpoint.iterdir() if (p / "adapter_model.safetensors").is_file()]
    if not (root.is_file() and subfolders and hasattr(model, "active_adapter")):
        return  # no adapter, or the one adapter transformers resumes itself
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    loaded = set_peft_model_state_dict(model, load_file(str(root)), adapter_name=model.active_adapter)
    if loaded.unexpected_keys:
        raise RuntimeError(f"{root} does not fit the model: {loaded.unexpected_keys[:3]}")


def interrupted_line(stage: str, step: int) -> str:
    """What the console says when Ctrl-C stopped a stage: where, and the command that continues it."""
    where = f" in the {stage}" if stage else ""
    return f"interrupted{where} at step {step}; continue with: grpo train <recipe> --resume"


def save_final(trainer, final: Path) -> Path:
    """The finished model (adapter or weights) and its tokenizer, written beside `final` and moved into place whole:
    a final/ folder always holds a whole model, whichever stage wrote it (a crash mid-save leaves final.partial/).
    Under FSDP or ZeRO-3 every rank takes part in the save; the main process writes the tokenizer and moves it."""
    import shutil

    staging = final.with_name(FINAL_STAGING)
    main = trainer.is_world_process_zero()
    if main:
        shutil.rmtree(staging, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(staging))  # collective under FSDP/ZeRO-3
    if main:
        trainer.processing_class.save_pretrained(str(staging))
        shutil.rmtree(final, ignore_errors=True)  # an earlier final of this same run, saved again
        staging.rename(final)
    trainer.accelerator.wait_for_everyone()
    return final
