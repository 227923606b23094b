"""`grpo train`: the run around the trainer (run directory, progress, interruption, final save), here or through
`accelerate launch`."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from grpo_cli.audit.run import start_lines
from grpo_cli.errors import UserError
from grpo_cli.files import sole_writer
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.validation_curve import best_line
from grpo_cli.train.runtime import check_runtime, memory_at_start
from grpo_cli.train.trainer import build_trainer, guarded_rewards

if TYPE_CHECKING:
    from grpo_cli.runs.health import Alarm
    from grpo_cli.train.health_callback import HealthCallback
    from grpo_cli.train.validation_callback import Validation


@dataclass
class TrainResult:
    run_dir: Path
    global_step: int
    interrupted: bool
    final_dir: Path | None
    metrics: list[dict]
    validations: list[dict] = field(default_factory=list)  # the `validation:` rows, in step order
    halted: Alarm | None = None  # the health watch's alarm that stopped the run (`training.health.halt_on`)


def run(
    recipe: Recipe, resume: bool = False, echo=print, validate: Validation | None = None, own_process: bool = False
) -> int:
    """`grpo train`: through `accelerate launch` when the recipe asks for several processes, else here. Exit code:
    0 finished, 130 interrupted (a checkpoint was saved when a step had finished), 3 halted by the health watch
    (checkpoint saved). `validate`: the held-out validation a `validation:` section asks for, built by the command
    from evaluation's code."""
    from grpo_cli.process.optional_libraries import skip_unused_bitsandbytes
    from grpo_cli.train import distributed

    skip_unused_bitsandbytes(recipe.quantization, recipe.training.optim, own_process)
    # One run at a time in a run directory; under `accelerate launch` the launcher holds it for its ranks.
    with nullcontext() if distributed.is_launched_rank() else sole_writer(recipe.output_dir, "grpo train"):
        if distributed.wants_launch(recipe.distributed):
            return distributed.launch(recipe, resume, echo=echo)
        try:
            result = train(recipe, resume=resume, validate=validate)
        except KeyboardInterrupt:  # before the first step (loading) or a second Ctrl-C: nothing to save
            echo("interrupted")
            return 130
        if distributed.is_launched_rank():
            distributed.close_process_group()
    if result.halted is not None:
        from grpo_cli.train.health_callback import HALTED_EXIT

        return HALTED_EXIT
    return 130 if result.interrupted else 0


def train(
    recipe: Recipe, resume: bool = False, console: Console | None = None, validate: Validation | None = None
) -> TrainResult:
    """Run a recipe to the end (or to Ctrl-C), writing everything a run keeps into its run directory."""
    from grpo_cli.recipe.precision import precision_here
    from grpo_cli.runs.model_card import write_model_card
    from grpo_cli.train.callbacks import InterruptCallback
    from grpo_cli.train.distributed import process_rank
    from grpo_cli.train.health_callback import halted_line
    from grpo_cli.train.sft import SftOutcome, early_examples, run_sft
    from grpo_cli.train.stage import stage_display
    from grpo_cli.train.start_weights import named_adapter

    # Under `accelerate launch` every rank runs this; only rank 0 talks, and the launcher made the run directory.
    console = console or Console(stderr=True, quiet=process_rank() != 0)
    check_runtime(recipe)
    early = early_examples(recipe, resume)  # a bad SFT source is refused before anything is written
    if early is not None and validate is not None and recipe.validation is not None:
        _warn_sft_asks_validation(early, validate, console)
    checkpoint = _start(recipe, resume, console)
    run_dir = recipe.output_dir
    # soft_wrap: each warning stays one line in a log file (the terminal still wraps it for the eye).
    warn = partial(console.print, style="yellow", highlight=False, soft_wrap=True)
    reward_funcs = guarded_rewards(recipe.rewards, recipe.model, recipe.tools, recipe.environment, warn=warn)
    console.print(
        f"[bold]grpo train[/] {recipe.run_name}: {recipe.method} on {recipe.model.name} "
        f"({precision_here(recipe.model).label(recipe.method)}) -> {run_dir}"
    )
    audit = start_lines(
        recipe.data, recipe.rewards, recipe.model, recipe.training.seed, recipe.grpo.max_completion_length
    )
    for line in [*memory_at_start(recipe), *audit]:
        console.print(line, style="yellow", highlight=False, soft_wrap=True)
    # What GRPO starts from: the SFT stage's weights (trained now unless finished earlier), else the adapter
    # lora.adapter names, else the recipe's model as it is (final_dir None).
    if recipe.sft is not None:
        start = run_sft(recipe, console, resume, early)
    else:
        start = SftOutcome(named_adapter(recipe.model.name, recipe.lora), False)
    if start.interrupted:  # in the SFT stage: its checkpoint holds the finished steps
        return TrainResult(run_dir, 0, True, None, [])
    interrupt = InterruptCallback()
    trainer, prepared = build_trainer(
        recipe, run_dir, [interrupt], reward_funcs, warn=warn, start_weights=start.final_dir
    )
    for line in prepared.report():
        console.print(line, highlight=False)
    display = stage_display(console, recipe.total_steps(len(prepared.dataset)), checkpoint)
    health = _health_watch(trainer, recipe.training.health, recipe.grpo.num_generations, warn)
    metrics = _watch(trainer, display, recipe.training.log_completions, reward_funcs[0], health)
    if validate is not None and recipe.validation is not None:
        _validate_while_training(trainer, recipe.validation.every_steps, validate, display, metrics, interrupt, health)
    _run_steps(trainer, checkpoint, display, interrupt)
    final_dir = None if health.halted else _save_final(trainer, interrupt.requested, console)
    if trainer.is_world_process_zero():  # after the last save: TRL and PEFT each write their stock card there
        write_model_card(run_dir, recipe)
    console.print(display.summary())
    if display.validations:
        console.print(best_line(display.validations), highlight=False, soft_wrap=True)
    if final_dir:
        console.print(f"saved {'adapter' if recipe.lora else 'model'} to {final_dir}; plot with: grpo report {run_dir}")
    step = trainer.state.global_step
    if health.halted is not None:
        console.print(halted_line(health.halted, str(run_dir), step), highlight=False, soft_wrap=True)
    return TrainResult(
        run_dir, step, interrupt.requested, final_dir, display.history, display.validations, health.halted
    )


def _health_watch(trainer, settings, num_generations: int, warn) -> HealthCallback:
    """The health watch, first of the trainer's callbacks (before the one that writes metrics.jsonl)."""
    from grpo_cli.train.health_callback import HealthCallback, reward_weights

    health = HealthCallback(
        settings, warn, trainer.args.generation_batch_size // num_generations, reward_weights(trainer)
    )
    trainer.add_callback(health)
    return health


def _watch(trainer, display, log_completions: int, recorder, health: HealthCallback):
    """The callback that writes metrics.jsonl and feeds `display`, first of the trainer's callbacks, and the step's
    phases on the display; the batch shapes are the ones TRL resolved (trainer.args)."""
    from grpo_cli.train.callbacks import MetricsCallback
    from grpo_cli.train.phases import StepPhases

    args = trainer.args
    per_process = args.generation_batch_size // trainer.accelerator.num_processes
    phases = StepPhases(display.phase, args.max_completion_length, per_process, args.gradient_accumulation_steps)
    metrics = MetricsCallback(
        Path(args.output_dir),
        log_completions,
        args.generation_batch_size,
        recorder,
        on_metrics=display.update,
        generation_seconds=phases.take_generation_seconds,
        health=health.in_force,
    )
    trainer.add_callback(metrics)
    # First of all callbacks but the health watch: the figures it adds to each log then reach the trackers'
    # callbacks too, and the watch has read the step before its record is written.
    callbacks = trainer.callback_handler.callbacks
    callbacks.insert(0, callbacks.pop(callbacks.index(metrics)))
    callbacks.insert(0, callbacks.pop(callbacks.index(health)))
    phases.install(trainer)
    return metrics


def _warn_sft_asks_validation(examples, validate: Validation, console: Console) -> None:
    """Validation while training measures memory on problems the SFT stage taught (GRPO's own overlap is warned of
    where the validation is built)."""
    from grpo_cli.train.sft_example_checks import validation_questions_in

    questions = validate.questions
    asked = validation_questions_in(examples, questions)
    if asked:
        console.print(
            f"warning: {asked} of the {len(examples.rows)} SFT examples ask one of the {len(questions)} "
            "validation problems, so validation while training measures memory there; keep those rows out of "
            "sft.source",
            style="yellow",
            highlight=False,
            soft_wrap=True,
        )


def _validate_while_training(
    trainer, every_steps: int, validate: Validation, display, metrics, interrupt, health: HealthCallback
) -> None:
    """The held-out validation as a callback: its rows go into metrics.jsonl and onto the console, its seconds are
    left out of the training steps' times."""
    from grpo_cli.train.validation_callback import ValidationCallback

    trainer.add_callback(
        ValidationCallback(
            validate,
            every_steps,
            Path(trainer.args.output_dir),
            show=display.phase,
            on_row=lambda row: (display.validated(row), health.validated(row)),
            exclude_seconds=metrics.exclude_seconds,
            stopping=lambda: interrupt.requested,
            context=trainer.inference_context,
        )
    )


def _run_steps(trainer, checkpoint: Path | None, display, interrupt) -> None:
    """GRPO as a stage (stage.py); a failing reward or environment stops it with the finished steps saved."""
    from grpo_cli.reward_guard import RewardFailure
    from grpo_cli.tools.guard import EnvironmentFailure
    from grpo_cli.train.stage import train_stage

    try:
        train_stage(trainer, display, interrupt, checkpoint)
    except RewardFailure as failure:
        raise UserError(f"{failure}; {_save_after_failure(trainer)}", path="rewards") from None
    except EnvironmentFailure as failure:
        raise UserError(f"{failure}; {_save_after_failure(trainer)}", path="environment") from None


def _save_final(trainer, interrupted: bool, console: Console) -> Path | None:
    """The finished model in final/ (None when interrupted)."""
    from grpo_cli.runs.layout import FINAL_DIR
    from grpo_cli.train.stage import interrupted_line, save_final

    if interrupted:
        console.print(interrupted_line("", trainer.state.global_step))
        return None
    return save_final(trainer, Path(trainer.args.output_dir) / FINAL_DIR)


def _start(recipe: Recipe, resume: bool, console: Console) -> Path | None:
    """The checkpoint to resume from (None: step 0). The launcher prepared the directory for launched ranks."""
    from grpo_cli.runs.checkpoints import newest_complete, prepare_run_dir
    from grpo_cli.train.distributed import is_launched_rank

    if is_launched_rank():
        return newest_complete(recipe.output_dir)[0] if resume else None
    start = prepare_run_dir(recipe, resume)
    for note in start.notes:
        console.print(note, highlight=False)
    return start.checkpoint


def _save_after_failure(trainer) -> str:
    """Keep the steps that finished before a reward failed: a checkpoint of the last finished one, then the way on."""
    step = trainer.state.global_step
    if step == 0:
        return "no step had finished; fix the reward and run the same command again"
    folder = Path(trainer.args.output_dir) / f"checkpoint-{step}"
    if not folder.is_dir() and callable(getattr(trainer, "_save_checkpoint", None)):
        trainer._save_checkpoint(trainer.model, trial=None)  # the Trainer's own checkpoint writer: resumable as usual
    return f"{folder.name} holds the {step} finished step(s): fix the reward, then continue with --resume"
