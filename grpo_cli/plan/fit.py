"""`grpo plan` end to end: the plan for the recipe on its GPU, and when it does not fit, the cheapest changes that
make it fit, as recipe changes (`{"key.path": value}`) a user can type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpo_cli.plan import architectures
from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.data_lengths import DataLengths, read_data_lengths
from grpo_cli.plan.gpus import gpu_for, has_nvidia_gpu, plan_device, ram_for
from grpo_cli.plan.memory import Plan, memory_plan
from grpo_cli.recipe.schema import Recipe

Changes = dict[str, Any]


@dataclass
class PlanResult:
    plan: Plan  # what the verdict uses: at the data's longest prompt when the data was measured, else the bound
    bound: Plan  # at the recipe's limits: no batch of any data the recipe accepts needs more
    data: DataLengths | None  # None: the data could not be read here (`data_note` says why)
    data_note: str = ""
    suggestions: list[tuple[str, Changes, float]] = field(default_factory=list)
    gpu_label: str | None = None


def plan_recipe(recipe: Recipe, gpu: str | None, device: str | None, ram: str | None = None) -> PlanResult:
    """The plan on the GPU named by `--gpu` or the recipe, or on the CPU against `--ram` (default: this machine's),
    for the recipe's data and at its limits; the suggestions when it does not fit."""
    device = plan_device(device, gpu, ram)
    arch = architectures.resolve(recipe.model)
    architectures.check_context(recipe.data, recipe.grpo, arch)
    gpu_label, gpu_bytes = gpu_for(recipe.hardware, gpu) if device != "cpu" else (None, None)
    device = device or ("cuda" if gpu_bytes or has_nvidia_gpu() else "cpu")
    if device == "cpu":
        gpu_label, gpu_bytes = ram_for(ram)
    lengths, note = read_data_lengths(recipe)
    prompt_tokens = lengths.longest_prompt if lengths else None
    bound = memory_plan(recipe, arch, device, gpu_bytes)
    plan = memory_plan(recipe, arch, device, gpu_bytes, prompt_tokens) if lengths else bound
    suggestions = suggest(recipe, arch, device, gpu_bytes, prompt_tokens) if plan.fits is False else []
    return PlanResult(plan, bound, lengths, note, suggestions, gpu_label)


def candidate_changes(recipe: Recipe) -> list[tuple[str, Changes]]:
    """Changes that lower memory, in order of least harm to training; only those that apply to this recipe."""
    out: list[tuple[str, Changes]] = []
    t, g = recipe.training, recipe.grpo
    if not recipe.model.gradient_checkpointing:
        out.append(("gradient checkpointing", {"model.gradient_checkpointing": True}))
    if t.optim not in ("adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit", "sgd"):
        out.append(("8-bit AdamW", {"training.optim": "adamw_8bit"}))
    lora = {} if recipe.lora else {"lora.r": 16, "lora.alpha": 32}
    if recipe.lora is None:
        out.append(("LoRA instead of full fine-tuning", lora))
    if recipe.quantization is None:
        out.append(("QLoRA (4-bit base)", {**lora, "quantization.bits": 4}))
    b, ga = t.per_device_train_batch_size, t.gradient_accumulation_steps
    if b % 2 == 0 and b > 1:
        out.append(
            (
                "half the micro-batch, same effective batch",
                {"training.per_device_train_batch_size": b // 2, "training.gradient_accumulation_steps": ga * 2},
            )
        )
    if g.max_completion_length >= 64:
        out.append(("shorter completions", {"grpo.max_completion_length": g.max_completion_length // 2}))
    if g.num_generations >= 4 and g.num_generations % 2 == 0 and b % 2 == 0:
        # per_device_train_batch_size counts completions: halving the group alone would leave the batch (and the
        # memory) as it was, with twice the prompts in it.
        out.append(
            (
                "fewer generations per prompt, same prompts per step",
                {"grpo.num_generations": g.num_generations // 2, "training.per_device_train_batch_size": b // 2},
            )
        )
    return out


def suggest(
    recipe: Recipe, arch: Architecture, device: str, gpu_bytes: float, prompt_tokens: int | None = None
) -> list[tuple[str, Changes, float]]:
    """Cheapest ways to fit: every single change that fits, else the shortest cumulative prefix that does.

    Each candidate is applied to the validated recipe itself (never the YAML again) and validated like the file.
    A change that does not lower the peak is never proposed, alone or in a combination (LoRA without gradient
    checkpointing, for one, can hold more activations than full fine-tuning: PEFT keeps float32 copies).
    """
    from grpo_cli.errors import UserError
    from grpo_cli.recipe.validation import with_changes

    def apply(changes: Changes) -> Recipe | None:
        try:
            return with_changes(recipe, changes)
        except UserError:  # not valid for this recipe (batch rule, ...): not a suggestion
            return None

    baseline = memory_plan(recipe, arch, device, gpu_bytes, prompt_tokens).expected
    singles, helpful = [], []
    for label, changes in candidate_changes(recipe):
        changed = apply(changes)
        if changed is None:
            continue
        plan = memory_plan(changed, arch, device, gpu_bytes, prompt_tokens)
        if plan.expected < baseline:
            helpful.append((label, changes))
            if plan.fits:
                singles.append((label, changes, plan.expected))
    if singles:
        return singles
    combined: Changes = {}
    labels: list[str] = []
    peak = baseline
    for label, changes in helpful:
        trial = apply({**combined, **changes})
        if trial is None:
            continue
        plan = memory_plan(trial, arch, device, gpu_bytes, prompt_tokens)
        if plan.expected >= peak:
            continue  # helps alone, but not on top of the changes already taken
        combined, labels, peak = {**combined, **changes}, labels + [label], plan.expected
        if plan.fits:
            return [(" + ".join(labels), combined, plan.expected)]
    return []
