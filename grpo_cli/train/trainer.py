"""Recipe -> GRPOConfig + GRPOTrainer, and the run around it (run directory, progress, interruption, final save)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from grpo_cli.quiet import quiet_libraries
from grpo_cli.recipe.schema import Recipe
from grpo_cli.train.runtime import check_runtime


@dataclass
class TrainResult:
    run_dir: Path
    global_step: int
    interrupted: bool
    final_dir: Path | None
    metrics: list[dict]


def build_trainer(recipe: Recipe, run_dir: Path, callbacks: list | None = None, reward_funcs: list | None = None):
    """The single, explicit mapping of a validated recipe onto TRL's GRPOTrainer."""
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_cli import data, models
    from grpo_cli.train.config import grpo_config_kwargs
    from rewards import resolve_reward

    quiet_libraries()
    tokenizer = models.load_tokenizer(recipe)
    prepared = data.prepare(recipe.data, tokenizer, seed=recipe.training.seed)
    model = models.load_model(recipe)
    if reward_funcs is None:
        reward_funcs = [resolve_reward(spec.name, spec.kwargs) for spec in recipe.rewards]
    import torch

    config = GRPOConfig(**grpo_config_kwargs(recipe, run_dir, on_cpu=not torch.cuda.is_available()))
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=config,
        train_dataset=prepared.dataset,
        processing_class=tokenizer,
        peft_config=models.lora_config(recipe) if recipe.lora is not None else None,
        callbacks=callbacks,
    )
    # Our progress display and metrics file replace the Trainer's raw dict printing.
    trainer.remove_callback(PrinterCallback)
    return trainer, prepared


def train(recipe: Recipe, resume: bool = False, console: Console | None = None) -> TrainResult:
    """Run a recipe to the end (or to Ctrl-C), writing everything a run keeps into its run directory."""
    from grpo_cli.train.callbacks import CompletionRecorder, InterruptCallback, MetricsCallback
    from grpo_cli.train.distributed import is_launched_rank, process_rank
    from grpo_cli.train.display import TrainingDisplay
    from grpo_cli.train.model_card import write_model_card
    from grpo_cli.train.run_dir import FINAL_DIR, checkpoints, prepare_run_dir
    from rewards import resolve_reward

    # Under `accelerate launch` every rank runs this; only rank 0 talks, and the launcher made the run directory.
    console = console or Console(stderr=True, quiet=process_rank() != 0)
    check_runtime(recipe)
    run_dir = recipe.output_dir
    if is_launched_rank():
        checkpoint = checkpoints(run_dir)[-1] if resume else None
    else:
        checkpoint = prepare_run_dir(recipe, resume)

    reward_funcs = [resolve_reward(spec.name, spec.kwargs) for spec in recipe.rewards]
    recorder = CompletionRecorder(reward_funcs[0])
    reward_funcs[0] = recorder
    interrupt = InterruptCallback()
    display_holder: list[TrainingDisplay] = []
    metrics_cb = MetricsCallback(
        run_dir, recipe.training.log_completions, recipe.generation_batch_size, recorder,
        on_metrics=lambda record: display_holder[0].update(record) if display_holder else None,
    )
    console.print(f"[bold]grpo train[/] {recipe.run_name}: {recipe.method} on {recipe.model.name} -> {run_dir}")
    trainer, prepared = build_trainer(recipe, run_dir, [metrics_cb, interrupt], reward_funcs)
    if prepared.dropped_too_long:
        console.print(
            f"dropped {prepared.dropped_too_long} of {prepared.total} prompts longer than "
            f"{recipe.data.max_prompt_length} tokens (data.max_prompt_length)"
        )
    total_steps = trainer.args.max_steps if trainer.args.max_steps > 0 else recipe.optimizer_steps(len(prepared.dataset))

    display = TrainingDisplay(console, total_steps)
    display_holder.append(display)
    interrupt.install()
    try:
        with display:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        interrupt.uninstall()

    final_dir = None
    if interrupt.requested:
        console.print(f"interrupted at step {trainer.state.global_step}; continue with: grpo train <recipe> --resume")
    else:
        final_dir = run_dir / FINAL_DIR
        trainer.save_model(str(final_dir))  # collective under FSDP/ZeRO-3: every rank takes part
        if trainer.is_world_process_zero():
            trainer.processing_class.save_pretrained(str(final_dir))
    if trainer.is_world_process_zero():
        write_model_card(run_dir, recipe)  # after the last save: TRL and PEFT each write their stock card there
    console.print(display.summary())
    if final_dir:
        console.print(f"saved {'adapter' if recipe.lora else 'model'} to {final_dir}; plot with: grpo report {run_dir}")
    return TrainResult(run_dir, trainer.state.global_step, interrupt.requested, final_dir, display.history)

