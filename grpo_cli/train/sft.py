"""The SFT stage before GRPO: TRL's SFTTrainer on the recipe's model, LoRA/QLoRA settings and precision, the loss on
the completion tokens only. It keeps RUN/sft/ as a run directory of its own (recipe, examples and where they came
from, metrics, checkpoints, final/); an interrupted SFT continues from its checkpoint with --resume, and a
finished one is never redone: GRPO starts from its final/ weights."""

from __future__ import annotations

import gc
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from grpo_cli.errors import UserError
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.precision import Precision, precision_here
from grpo_cli.recipe.schema import Recipe, TrainingSection
from grpo_cli.recipe.sft_section import SELF, SftSection
from grpo_cli.recipe.trainer_args import shared_trainer_args
from grpo_cli.runs.layout import (
    FINAL_DIR,
    METRICS_FILE,
    RECIPE_FILE,
    SFT_EXAMPLES_FILE,
    SFT_SOURCE_FILE,
    sft_dir,
)
from grpo_cli.train.sft_example_checks import checked_examples, read_examples
from grpo_cli.train.sft_examples import SftExamples, training_examples
from grpo_cli.train.start_weights import named_adapter, start_from

# What decides the SFT stage's examples: those of an earlier attempt are reused only while these are unchanged.
EXAMPLE_KEYS = ("source", "config", "split", "count", "samples_per_prompt", "reward", "min_reward")


@dataclass
class SftOutcome:
    final_dir: Path | None  # the weights GRPO starts from; None when interrupted
    interrupted: bool


def early_examples(recipe: Recipe, resume: bool) -> SftExamples | None:
    """The examples of a file, hub dataset or the reference solutions, read before the run directory is written, so
    a bad source is refused with nothing written. None when there is nothing to read now: no SFT, sampled
    examples (`self` needs the model), a finished SFT, or a resumed one that keeps the examples it started with."""
    if recipe.sft is None:
        return None
    folder = sft_dir(recipe.output_dir)
    if (folder / FINAL_DIR).is_dir() or (resume and (folder / SFT_EXAMPLES_FILE).is_file()):
        return None
    return training_examples(recipe.sft, recipe.data, recipe.tools, recipe.training.seed)


def run_sft(recipe: Recipe, console: Console, resume: bool, early: SftExamples | None) -> SftOutcome:
    """The SFT stage of `grpo train`: skipped when finished earlier, else trained (from its newest whole
    checkpoint when there is one) and saved to RUN/sft/final/."""
    from grpo_cli.runs.checkpoints import newest_complete
    from grpo_cli.runs.saved_recipe import write_resolved_recipe

    folder = sft_dir(recipe.output_dir)
    final = folder / FINAL_DIR
    if final.is_dir():
        console.print(
            f"SFT finished earlier ({_recorded(folder)}); GRPO starts from {final}", highlight=False, soft_wrap=True
        )
        return SftOutcome(final, False)
    folder.mkdir(parents=True, exist_ok=True)
    write_resolved_recipe(recipe, folder / RECIPE_FILE)  # RUN/sft reads as a run: grpo eval run, grpo report
    checkpoint, skipped = newest_complete(folder)
    setup = sft_setup(recipe)

    def fresh() -> SftExamples:  # read before anything was written, else now, else sampled from the model
        examples = (
            early
            if early is not None
            else training_examples(recipe.sft, recipe.data, recipe.tools, recipe.training.seed)
        )
        if examples is not None:
            return examples
        from grpo_cli.train.sft_sampling import sampled_examples

        echo = lambda line: console.print(line, highlight=False)  # noqa: E731
        return sampled_examples(recipe, setup.model, setup.tokenizer, setup.precision.mixed, echo=echo)

    settings = _example_settings(recipe.sft, recipe.data, recipe.model.name, recipe.training.seed)
    examples = _examples(folder, settings, checkpoint, fresh)
    console.print(f"sft: {examples.describe()} -> {folder}", highlight=False, soft_wrap=True)
    examples, notes = checked_examples(recipe.sft, examples, setup.tokenizer)
    for note in notes:
        console.print(note, style="yellow", highlight=False, soft_wrap=True)
    for line in skipped + ([f"sft: resuming from {checkpoint.name}"] if checkpoint else []):
        console.print(line, highlight=False)
    trainer = sft_trainer(recipe.sft, recipe.training, folder, setup, examples.rows, [])
    interrupted = _train(trainer, total_steps(recipe.sft, len(trainer.train_dataset)), folder, checkpoint, console)
    trainer = None
    setup = None
    gc.collect()  # the SFT stage's trainer and model go before GRPO loads its own
    return SftOutcome(None if interrupted else final, interrupted)


@dataclass
class SftSetup:
    """What the SFT stage trains: the recipe's model (carrying lora.adapter when one is named), its tokenizer, the
    LoRA config for TRL to apply (None: full fine-tuning, or the adapter is there already), the precision here, and
    the model section and method (full, lora, qlora) its settings read."""

    model: Any
    tokenizer: Any
    lora: Any
    precision: Precision
    model_section: ModelSection
    method: str


def sft_setup(recipe: Recipe) -> SftSetup:
    """The model and tokenizer, loaded as GRPO loads them (precision, frozen weights, LoRA or QLoRA)."""
    from grpo_cli import models
    from grpo_cli.progress import quiet_libraries
    from grpo_cli.train.trainer import load_policy

    quiet_libraries()
    tokenizer = models.load_tokenizer(recipe.model)
    precision = precision_here(recipe.model)
    model = load_policy(recipe, precision)
    adapter = named_adapter(recipe.model.name, recipe.lora)
    if adapter is not None:
        model = start_from(model, adapter, recipe.model.name, recipe.lora)
    lora = models.lora_config(recipe.lora) if recipe.lora is not None and adapter is None else None
    return SftSetup(model, tokenizer, lora, precision, recipe.model, recipe.method)


def sft_trainer(
    section: SftSection, training: TrainingSection, folder: Path, setup: SftSetup, rows: list, callbacks, **config
):
    """TRL's SFTTrainer for the SFT stage; `config`: SFTConfig fields that replace the recipe's (preflight's steps)."""
    import datasets
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    masks = {"assistant_only_loss": True} if _has_tool_turns(rows) and _masks_assistant_turns(setup.tokenizer) else {}
    trainer = SFTTrainer(
        model=setup.model,
        args=SFTConfig(**{**sft_config_kwargs(section, training, folder, setup), **masks, **config}),
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=setup.tokenizer,
        peft_config=setup.lora,
        callbacks=callbacks,
    )
    trainer.remove_callback(PrinterCallback)  # our display and metrics file replace its raw log lines
    return trainer


def _has_tool_turns(rows: list[dict]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "tool" for row in rows for m in row.get("completion") or ())


def _masks_assistant_turns(tokenizer) -> bool:
    """Whether TRL can tell the model's turns from the tools' answers in this template: then only the model's own
    tokens are trained on, as GRPO masks tool results out of its loss (else the tools' short answers are too)."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    if has_generation_markers(tokenizer.chat_template):
        return True
    try:
        get_training_chat_template(tokenizer)
    except ValueError:
        return False
    return True


def _examples(folder: Path, settings: dict, checkpoint, fresh) -> SftExamples:
    """The examples an earlier attempt kept (when `settings`, what decides them, are unchanged), else `fresh()`
    ones, written down."""
    kept = folder / SFT_EXAMPLES_FILE
    recorded = _read_json(folder / SFT_SOURCE_FILE)
    if kept.is_file() and recorded.get("settings") == settings:
        rows = read_examples(kept)
        return SftExamples(rows, {k: v for k, v in recorded.items() if k != "settings"})
    if checkpoint is not None:
        raise UserError(
            f"{folder} holds an SFT checkpoint trained on other examples (sft.source, count or data changed); "
            "set them back to resume, or train into another directory",
            path="sft",
        )
    examples = fresh()
    kept.write_text("".join(json.dumps(row) + "\n" for row in examples.rows), encoding="utf-8")
    record = {**examples.source, "examples": len(examples.rows), "settings": settings}
    (folder / SFT_SOURCE_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")
    return examples


def _example_settings(section: SftSection, data: DataSection, model_name: str, seed: int) -> dict[str, Any]:
    fields = section.model_dump(mode="json")
    return {
        "sft": {k: fields[k] for k in EXAMPLE_KEYS},
        "data": data.model_dump(mode="json"),
        "model": model_name if section.source == SELF else None,  # only sampled examples depend on the model
        "seed": seed,
    }


def _train(trainer, steps: int, folder: Path, checkpoint, console: Console) -> bool:
    """The SFTTrainer over the examples as a stage (stage.py); True when Ctrl-C stopped it (a checkpoint saved)."""
    from grpo_cli.files import read_jsonl
    from grpo_cli.train.callbacks import InterruptCallback, MetricsCallback
    from grpo_cli.train.stage import interrupted_line, save_final, stage_display, train_stage

    interrupt = InterruptCallback()
    display = stage_display(console, steps, checkpoint)
    trainer.add_callback(interrupt)
    trainer.add_callback(MetricsCallback(folder, 0, 0, None, on_metrics=display.update))
    train_stage(trainer, display, interrupt, checkpoint)
    if interrupt.requested:
        console.print(interrupted_line("SFT", trainer.state.global_step))
        return True
    save_final(trainer, folder / FINAL_DIR)
    logged = read_jsonl(folder / METRICS_FILE, required=("step",)).rows  # every attempt's steps, resumed or not
    losses = [r["loss"] for r in logged if r.get("loss") is not None]
    shown = f", loss {losses[0]:.3g} -> {losses[-1]:.3g}" if losses else ""
    console.print(f"SFT finished: {trainer.state.global_step} steps{shown}; saved to {folder / FINAL_DIR}")
    return False


def sft_config_kwargs(section: SftSection, training: TrainingSection, folder: Path, setup: SftSetup) -> dict:
    """The SFT stage onto SFTConfig: its own learning rate, length and batch; the settings GRPO shares
    (recipe/trainer_args.py: the training section's optimizer, schedule, seed, logging and saving, the model
    section's precision and checkpointing)."""
    precision = setup.precision
    return dict(
        **shared_trainer_args(setup.model_section, training, folder, precision.on_cpu, precision.mixed),
        completion_only_loss=True,
        max_length=section.max_length,
        learning_rate=section.learning_rate_for(setup.method),
        num_train_epochs=section.num_train_epochs,
        max_steps=section.max_steps,
        per_device_train_batch_size=section.per_device_train_batch_size,
        gradient_accumulation_steps=section.gradient_accumulation_steps,
    )


def total_steps(section: SftSection, examples: int) -> int:
    """Optimizer steps the SFT stage takes over `examples` (for the progress display)."""
    if section.max_steps > 0:
        return section.max_steps
    per_epoch = max(
        1, math.ceil(math.ceil(examples / section.per_device_train_batch_size) / section.gradient_accumulation_steps)
    )
    return math.ceil(per_epoch * section.num_train_epochs)


def _recorded(folder: Path) -> str:
    source = _read_json(folder / SFT_SOURCE_FILE)
    return f"{source.get('examples', '?')} examples from {source.get('source', '?')}"


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
