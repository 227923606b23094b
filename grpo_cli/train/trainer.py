"""Recipe -> GRPOConfig + GRPOTrainer, and the run around it (run directory, progress, interruption, final save)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from grpo_cli.errors import UserError
from grpo_cli.quiet import quiet_libraries
from grpo_cli.recipe.schema import GRPOSection, Recipe
from grpo_cli.train.runtime import check_runtime


@dataclass
class TrainResult:
    run_dir: Path
    global_step: int
    interrupted: bool
    final_dir: Path | None
    metrics: list[dict]


def run(recipe: Recipe, resume: bool = False, echo=print) -> int:
    """`grpo train`: through `accelerate launch` when the recipe asks for several processes, else here. Exit code:
    0 finished, 130 interrupted (a checkpoint was saved when a step had finished)."""
    from grpo_cli.cpu_memory import skip_unused_bitsandbytes
    from grpo_cli.train import distributed

    skip_unused_bitsandbytes(recipe)
    if distributed.wants_launch(recipe):
        return distributed.launch(recipe, resume, echo=echo)
    try:
        result = train(recipe, resume=resume)
    except KeyboardInterrupt:  # before the first step (loading) or a second Ctrl-C: nothing to save
        echo("interrupted")
        return 130
    return 130 if result.interrupted else 0


def build_trainer(recipe: Recipe, run_dir: Path, callbacks: list | None = None, reward_funcs: list | None = None,
                  tokenizer=None):
    """The single, explicit mapping of a validated recipe onto TRL's GRPOTrainer. `tokenizer`: one the caller
    loaded already, since a second copy stays resident beside the first (benchmarks/cpu_memory.txt)."""
    from transformers import PrinterCallback
    from trl import GRPOConfig

    from grpo_cli import data, models
    from grpo_cli.recipe.grpo_config import grpo_config_kwargs

    quiet_libraries()
    tokenizer = tokenizer or models.load_tokenizer(recipe)
    tools, environment_factory = _tools(recipe, tokenizer)
    prepared = data.prepare(recipe.data, tokenizer, seed=recipe.training.seed, tools=tools)
    prepared.check_enough(recipe)  # before the model loads: too few usable rows for one step is refused here
    on_cpu, mixed = _precision_here(recipe)
    trainer_class, trainer_options = _trainer_class(recipe.grpo)
    trainer = trainer_class(
        model=_load_model(recipe, on_cpu, mixed),
        reward_funcs=guarded_rewards(recipe) if reward_funcs is None else reward_funcs,
        args=GRPOConfig(**grpo_config_kwargs(recipe, run_dir, on_cpu=on_cpu, mixed=mixed)),
        train_dataset=prepared.dataset,
        processing_class=tokenizer,
        peft_config=models.lora_config(recipe) if recipe.lora is not None else None,
        callbacks=callbacks,
        tools=tools,
        environment_factory=environment_factory,
        **trainer_options,
    )
    _faster_generation(trainer, mixed)
    # With tqdm off (grpo_config.py) the Trainer prints each raw log dict; our display and metrics file replace it.
    trainer.remove_callback(PrinterCallback)
    return trainer, prepared


def _precision_here(recipe: Recipe) -> tuple[bool, str]:
    """Whether this machine trains on its CPU, and the mixed precision the recipe resolves to here."""
    import torch

    from grpo_cli.recipe.precision import mixed_precision_here

    on_cpu = not torch.cuda.is_available()
    return on_cpu, mixed_precision_here(recipe, on_cpu)


def _load_model(recipe: Recipe, on_cpu: bool, mixed: str):
    """The model, its frozen weights loaded in the dtype they will train in (frozen_weights.py)."""
    from grpo_cli import models
    from grpo_cli.train.frozen_weights import planned_dtype

    if on_cpu:
        from grpo_cli.cpu_memory import narrow_head_tiles

        narrow_head_tiles()  # the plan's CPU head term assumes it (plan/memory.py, CPU_VOCAB_CHUNK_SIZE)
    return models.load_model(recipe, planned_dtype(recipe, mixed))


def _trainer_class(grpo: GRPOSection) -> tuple[type, dict]:
    """TRL's GRPOTrainer, or the subclass that skips or resamples zero-variance groups, with the options it takes."""
    from trl import GRPOTrainer

    from grpo_cli.train import zero_variance

    if grpo.zero_variance_groups == "keep":
        return GRPOTrainer, {}
    zero_variance.check_seams()
    return zero_variance.ZeroVarianceTrainer, {"zero_variance_mode": grpo.zero_variance_groups,
                                               "zero_variance_rounds": grpo.zero_variance_rounds}


def _faster_generation(trainer, mixed: str) -> None:
    """Under autocast: frozen weights in the autocast dtype, generation unmerged; else (float32) generation with the
    LoRA adapter merged. Each leaves the runs it does not apply to unchanged."""
    from grpo_cli.train import frozen_weights, merged_generation

    if frozen_weights.narrow(trainer, mixed) is None:
        merged_generation.install(trainer)


def train(recipe: Recipe, resume: bool = False, console: Console | None = None) -> TrainResult:
    """Run a recipe to the end (or to Ctrl-C), writing everything a run keeps into its run directory."""
    from grpo_cli.recipe.precision import precision_label
    from grpo_cli.train.callbacks import InterruptCallback
    from grpo_cli.train.distributed import process_rank

    # Under `accelerate launch` every rank runs this; only rank 0 talks, and the launcher made the run directory.
    console = console or Console(stderr=True, quiet=process_rank() != 0)
    check_runtime(recipe)
    checkpoint = _start(recipe, resume, console)
    reward_funcs = guarded_rewards(recipe, warn=lambda line: console.print(line, style="yellow", highlight=False))
    console.print(f"[bold]grpo train[/] {recipe.run_name}: {recipe.method} on {recipe.model.name} "
                  f"({precision_label(recipe)}) -> {recipe.output_dir}")
    for line in ram_warning(recipe):
        console.print(line, style="yellow", highlight=False, soft_wrap=True)
    interrupt = InterruptCallback()
    trainer, prepared = build_trainer(recipe, recipe.output_dir, [interrupt], reward_funcs)
    for line in prepared.report(recipe):
        console.print(line, highlight=False)
    display = _watch(trainer, recipe, console, len(prepared.dataset), reward_funcs[0])
    _run_steps(trainer, recipe, checkpoint, display, interrupt)
    final_dir = _save_final(trainer, recipe, interrupt.requested, console)
    console.print(display.summary())
    if final_dir:
        console.print(f"saved {'adapter' if recipe.lora else 'model'} to {final_dir}; plot with: grpo report "
                      f"{recipe.output_dir}")
    return TrainResult(recipe.output_dir, trainer.state.global_step, interrupt.requested, final_dir, display.history)


def _watch(trainer, recipe: Recipe, console: Console, rows: int, recorder):
    """The progress display, fed by the step's phases and by the callback that writes metrics.jsonl (each one added
    to the trainer, the metrics first)."""
    from grpo_cli.train.callbacks import MetricsCallback
    from grpo_cli.train.display import TrainingDisplay
    from grpo_cli.train.phases import StepPhases

    display = TrainingDisplay(console, recipe.total_steps(rows))
    phases = StepPhases(display.phase, recipe.grpo.max_completion_length, recipe.generation_batch_per_process,
                        recipe.training.gradient_accumulation_steps)
    trainer.add_callback(MetricsCallback(recipe.output_dir, recipe.training.log_completions,
                                         recipe.generation_batch_size, recorder, on_metrics=display.update,
                                         generation_seconds=phases.take_generation_seconds))
    phases.install(trainer)
    return display


def _run_steps(trainer, recipe: Recipe, checkpoint: Path | None, display, interrupt) -> None:
    """Train from `checkpoint` (None: step 0) under the display; Ctrl-C stops after a step, a failing reward or
    environment stops with the finished steps saved."""
    from grpo_cli.tools.guard import EnvironmentFailure
    from grpo_cli.train.reward_guard import RewardFailure

    interrupt.install()
    try:
        with display:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except RewardFailure as failure:
        raise UserError(f"{failure}; {_save_after_failure(trainer, recipe)}", path="rewards") from None
    except EnvironmentFailure as failure:
        raise UserError(f"{failure}; {_save_after_failure(trainer, recipe)}", path="environment") from None
    finally:
        interrupt.uninstall()


def _save_final(trainer, recipe: Recipe, interrupted: bool, console: Console) -> Path | None:
    """The finished model in final/ (None when interrupted), then the model card over TRL's and PEFT's stock ones."""
    from grpo_cli.runs.layout import FINAL_DIR
    from grpo_cli.runs.model_card import write_model_card

    final_dir = None
    if interrupted:
        console.print(f"interrupted at step {trainer.state.global_step}; continue with: grpo train <recipe> --resume")
    else:
        final_dir = recipe.output_dir / FINAL_DIR
        trainer.save_model(str(final_dir))  # collective under FSDP/ZeRO-3: every rank takes part
        if trainer.is_world_process_zero():
            trainer.processing_class.save_pretrained(str(final_dir))
    if trainer.is_world_process_zero():
        write_model_card(recipe.output_dir, recipe)  # after the last save: TRL and PEFT each write their stock card there
    return final_dir


def _tools(recipe: Recipe, tokenizer) -> tuple[list | None, object | None]:
    """The recipe's tools and environment factory, behind their guards, once the template is known to carry them."""
    if not recipe.tools and recipe.environment is None:
        return None, None
    from grpo_cli.tools.registry import guarded_environment, guarded_tools
    from grpo_cli.tools.template import check_tool_template

    check_tool_template(tokenizer, recipe.model.name)
    environment = guarded_environment(recipe.environment) if recipe.environment is not None else None
    return guarded_tools(recipe.tools), environment


def ram_warning(recipe: Recipe) -> list[str]:
    """On a CPU, before any weight loads: the plan's peak RSS against the memory the kernel says is available, and
    the cheapest change that fits (the kernel kills a process that runs out, without a word)."""
    import torch

    from grpo_cli.plan import architectures
    from grpo_cli.plan.fit import suggest
    from grpo_cli.plan.gpus import available_ram
    from grpo_cli.plan.memory import GIB, memory_plan
    from grpo_cli.plan.view import override_args

    available = available_ram()
    if torch.cuda.is_available() or available is None:
        return []
    try:
        arch = architectures.resolve(recipe)
    except UserError:  # an architecture the plan cannot read offline: nothing to compare
        return []
    plan = memory_plan(recipe, arch, "cpu", available)
    if plan.fits:
        return []
    lines = [f"warning: the plan expects a peak RSS of {plan.peak_rss / GIB:.1f} GiB and {available / GIB:.1f} GiB is "
             "available: the kernel may stop this run without a message"]
    for label, changes, peak in suggest(recipe, arch, "cpu", available)[:1]:
        lines.append(f"  {label} ({peak / GIB:.1f} GiB): add {' '.join(override_args(changes))}")
    return lines


def guarded_rewards(recipe: Recipe, warn=print) -> list:
    """The recipe's rewards, each behind a guard; the first also keeps the samples written to samples.jsonl."""
    from grpo_cli.train.reward_guard import GuardedReward
    from rewards import resolve_rewards

    names = None
    if recipe.tools or recipe.environment is not None:
        from grpo_cli.tools.registry import tool_names

        names = tool_names(recipe.tools, recipe.environment)
    return [GuardedReward(func, spec.timeout_s, warn, record=index == 0, tool_names=names if index == 0 else None)
            for index, (func, spec) in enumerate(zip(resolve_rewards(recipe.rewards), recipe.rewards))]


def _start(recipe: Recipe, resume: bool, console: Console) -> Path | None:
    """The checkpoint to resume from (None: step 0). The launcher prepared the directory for launched ranks."""
    from grpo_cli.train.distributed import is_launched_rank
    from grpo_cli.runs.checkpoints import newest_complete, prepare_run_dir

    if is_launched_rank():
        return newest_complete(recipe.output_dir)[0] if resume else None
    start = prepare_run_dir(recipe, resume)
    for note in start.notes:
        console.print(note, highlight=False)
    return start.checkpoint


def _save_after_failure(trainer, recipe: Recipe) -> str:
    """Keep the steps that finished before a reward failed: a checkpoint of the last finished one, then the way on."""
    step = trainer.state.global_step
    if step == 0:
        return "no step had finished; fix the reward and run the same command again"
    folder = recipe.output_dir / f"checkpoint-{step}"
    if not folder.is_dir() and callable(getattr(trainer, "_save_checkpoint", None)):
        trainer._save_checkpoint(trainer.model, trial=None)  # the Trainer's own checkpoint writer: resumable as usual
    return f"{folder.name} holds the {step} finished step(s): fix the reward, then continue with --resume"
