"""Recipe -> GRPOConfig + GRPOTrainer, and the run around it (run directory, progress, interruption, final save)."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from grpo_cli.errors import UserError
from grpo_cli.recipe import Recipe


@dataclass
class TrainResult:
    run_dir: Path
    global_step: int
    interrupted: bool
    final_dir: Path | None
    metrics: list[dict]


def check_runtime(recipe: Recipe) -> None:
    """Settings that need hardware or packages this machine may lack: one clear line instead of a crash in TRL."""
    import torch

    cuda = torch.cuda.is_available()
    if recipe.grpo.use_liger_kernel and not cuda:
        raise UserError("Liger kernels need a CUDA GPU; set grpo.use_liger_kernel=false here", path="grpo.use_liger_kernel")
    if recipe.grpo.use_liger_kernel and importlib.util.find_spec("liger_kernel") is None:
        raise UserError("liger-kernel is not installed: pip install 'grpo-cli[liger]'", path="grpo.use_liger_kernel")
    if recipe.grpo.use_vllm and (not cuda or importlib.util.find_spec("vllm") is None):
        raise UserError(
            "vLLM generation needs a CUDA GPU and `pip install vllm`; set grpo.use_vllm=false to generate with transformers",
            path="grpo.use_vllm",
        )
    if recipe.model.dtype == "bfloat16" and cuda and not torch.cuda.is_bf16_supported():
        raise UserError("this GPU has no bfloat16; set model.dtype=float16 (or float32)", path="model.dtype")


def build_trainer(recipe: Recipe, run_dir: Path, callbacks: list | None = None, reward_funcs: list | None = None):
    """The single, explicit mapping of a validated recipe onto TRL's GRPOTrainer."""
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_cli import data, models
    from grpo_cli.grpo_args import grpo_config_kwargs
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


def quiet_libraries() -> None:
    """Library progress bars and deprecation chatter drown the run's own output; errors still show."""
    import logging
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
    # bitsandbytes warns on import on AVX512-BF16 CPUs that its optional hub kernel is absent; it falls back itself.
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)


def train(recipe: Recipe, resume: bool = False, console: Console | None = None) -> TrainResult:
    """Run a recipe to the end (or to Ctrl-C), writing everything a run keeps into its run directory."""
    from grpo_cli.callbacks import CompletionRecorder, InterruptCallback, MetricsCallback
    from grpo_cli.distributed import is_launched_rank, process_rank
    from grpo_cli.progress import TrainingDisplay
    from grpo_cli.run_dir import FINAL_DIR, checkpoints, prepare_run_dir
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
    total_steps = trainer.args.max_steps if trainer.args.max_steps > 0 else _steps_for_epochs(recipe, len(prepared.dataset))

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
    console.print(display.summary())
    if final_dir:
        console.print(f"saved {'adapter' if recipe.lora else 'model'} to {final_dir}; plot with: grpo report {run_dir}")
    return TrainResult(run_dir, trainer.state.global_step, interrupt.requested, final_dir, display.history)


def _steps_for_epochs(recipe: Recipe, rows: int) -> int:
    prompts_per_step = recipe.generation_batch_size // recipe.grpo.num_generations
    steps_per_generation = recipe.steps_per_generation
    generations = math.ceil(rows / prompts_per_step)
    return math.ceil(generations * steps_per_generation * recipe.grpo.num_iterations / recipe.training.gradient_accumulation_steps * recipe.training.num_train_epochs)
