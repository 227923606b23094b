"""Rules that involve several fields of a recipe, checked before any model is touched, each with its fix."""

from __future__ import annotations

from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.eval_section import EvalSection
from grpo_cli.recipe.machine import DistributedSection
from grpo_cli.recipe.model_section import QuantizationSection
from grpo_cli.recipe.precision import BY_WEIGHTS
from grpo_cli.recipe.reward_model_checks import reward_entry_problems
from grpo_cli.recipe.schema import GRPOSection, Recipe, generation_batch
from grpo_cli.recipe.sft_checks import sft_problems
from grpo_cli.recipe.validation_section import ValidationSection
from grpo_cli.recipe.yaml_source import KeyPath


def cross_field_problems(recipe: Recipe) -> list[tuple[KeyPath, str]]:
    """Rules that involve several fields, checked before any model is touched, each with its fix."""
    out: list[tuple[KeyPath, str]] = []
    grpo, training = recipe.grpo, recipe.training

    if recipe.quantization is not None and recipe.lora is None:
        out.append(
            (
                ("quantization",),
                "a quantized base cannot be trained directly; add a `lora:` section (e.g. lora.r=16) "
                "to train LoRA adapters on it (QLoRA), or remove `quantization`",
            )
        )
    mixed, weights = recipe.model.mixed_precision, recipe.model.dtype
    if (mixed, weights) in (("fp16", "bfloat16"), ("bf16", "float16")):
        fix = BY_WEIGHTS[weights]
        out.append(
            (
                ("model", "mixed_precision"),
                f"{mixed} autocast does not match {weights} weights; use model.mixed_precision={fix} (or auto)",
            )
        )
    if grpo.epsilon_high is not None and grpo.epsilon_high < grpo.epsilon:
        out.append(
            (
                ("grpo", "epsilon_high"),
                f"must be >= grpo.epsilon ({grpo.epsilon}); e.g. grpo.epsilon_high={max(0.28, grpo.epsilon)}",
            )
        )
    if recipe.grpo.importance_sampling_level == "token" and grpo.loss_type == "luspo":
        out.append(
            (("grpo", "importance_sampling_level"), "luspo is a sequence-level loss; set it to `sequence` or remove it")
        )
    if training.warmup_steps and training.warmup_ratio:
        out.append((("training", "warmup_steps"), "set warmup_steps or warmup_ratio, not both"))
    alone = [name for name in ("none", "all") if name in training.report_to]
    if alone and len(training.report_to) > 1:  # transformers reads them only alone, else refuses them as trackers
        out.append(
            (
                ("training", "report_to"),
                f"`{alone[0]}` stands alone (none: no tracker; all: every one installed); give it alone, or list "
                "only trackers",
            )
        )
    if recipe.trl.get("generation_batch_size") and recipe.trl.get("steps_per_generation"):
        out.append((("trl", "generation_batch_size"), "set generation_batch_size or steps_per_generation, not both"))
    processes, uses_tools = recipe.num_processes, bool(recipe.tools) or recipe.environment is not None
    out += _batch_problems(
        grpo.num_generations,
        training.per_device_train_batch_size,
        processes,
        recipe.steps_per_generation,
        recipe.generation_batch_size,
        bool(recipe.trl.get("generation_batch_size")),
    )
    out += _distributed_problems(recipe.distributed, grpo, recipe.quantization)
    out += _tool_use_problems(uses_tools, recipe.data, recipe.eval)
    out += sft_problems(recipe.sft, recipe.data, recipe.rewards, uses_tools, processes)
    out += reward_entry_problems(recipe.rewards, recipe.data, recipe.distributed)
    out += _validation_problems(recipe.validation, uses_tools, processes)
    return out


def _validation_problems(
    validation: ValidationSection | None, uses_tools: bool, processes: int
) -> list[tuple[KeyPath, str]]:
    """What validation while training cannot do yet: it generates in rank 0's process with plain `generate`."""
    if validation is None:
        return []
    out: list[tuple[KeyPath, str]] = []
    if uses_tools:
        out.append(
            (
                ("validation",),
                "validation while training runs without the tool loop; remove `validation:` and score the "
                "checkpoints afterwards with grpo eval run RUN/checkpoint-N",
            )
        )
    if processes > 1:
        out.append(
            (
                ("validation",),
                "validation while training runs in one process; remove `validation:` (or train with "
                "distributed.num_processes=1) and score the checkpoints with grpo eval run RUN/checkpoint-N",
            )
        )
    return out


def _tool_use_problems(uses_tools: bool, data: DataSection, evaluation: EvalSection) -> list[tuple[KeyPath, str]]:
    """Tools live in chat messages: a plain-text prompt or lm-eval's few-shot text has nowhere to put a call."""
    if not uses_tools:
        return []
    out: list[tuple[KeyPath, str]] = []
    if not data.chat:
        out.append((("data", "chat"), "tools need chat messages (the chat template renders them); set data.chat: true"))
    if evaluation.protocol == "lm-eval":
        out.append(
            (
                ("eval", "protocol"),
                "lm-eval's protocol is few-shot plain text with no tools; use eval.protocol: chat with tools",
            )
        )
    return out


def _distributed_problems(
    d: DistributedSection, grpo: GRPOSection, quantization: QuantizationSection | None
) -> list[tuple[KeyPath, str]]:
    out: list[tuple[KeyPath, str]] = []
    if d.num_processes % d.num_machines:
        out.append(
            (
                ("distributed", "num_processes"),
                f"is the total over all machines, so a multiple of "
                f"distributed.num_machines ({d.num_machines}); "
                f"e.g. {d.num_machines * max(1, d.num_processes // d.num_machines)}",
            )
        )
    if d.machine_rank >= d.num_machines:
        out.append((("distributed", "machine_rank"), f"must be below distributed.num_machines ({d.num_machines})"))
    if d.num_machines > 1 and not d.main_process_ip and not d.accelerate_config:
        out.append((("distributed", "main_process_ip"), "several machines need the address of machine 0"))
    if grpo.zero_variance_groups == "resample" and d.num_processes > 1:
        out.append(
            (
                ("grpo", "zero_variance_groups"),
                "resample draws extra prompts in one process; with several "
                "processes use grpo.zero_variance_groups=skip",
            )
        )
    if d.zero_stage is not None and quantization is not None:
        out.append(
            (
                ("distributed", "strategy"),
                "DeepSpeed ZeRO does not shard bitsandbytes-quantized weights; "
                "use distributed.strategy=ddp for QLoRA, or drop `quantization`",
            )
        )
    return out


def _batch_problems(g: int, b: int, n: int, s: int, total: int, total_given: bool) -> list[tuple[KeyPath, str]]:
    """The generation batch (`total` completions: per-device batch `b` x `n` processes x `s` steps per generation,
    unless trl.generation_batch_size gives it) must hold whole groups of `g`."""
    if total_given:
        out = []
        if total % (b * n):
            out.append(
                (("trl", "generation_batch_size"), f"must be a multiple of per-device batch x processes ({b * n})")
            )
        if total % g:
            out.append((("trl", "generation_batch_size"), f"must be divisible by grpo.num_generations ({g})"))
        return out
    if total % g == 0:
        return []
    fixes = [
        f"training.per_device_train_batch_size={v}" for v in _nearest(b, lambda v: generation_batch(v, n, s) % g == 0)
    ]
    fixes += [
        f"training.gradient_accumulation_steps={v}" for v in _nearest(s, lambda v: generation_batch(b, n, v) % g == 0)
    ][:1]
    fixes += [f"grpo.num_generations={v}" for v in _nearest(g, lambda v: v >= 2 and total % v == 0)][:1]
    if n > 1:
        fixes += [f"distributed.num_processes={v}" for v in _nearest(n, lambda v: generation_batch(b, v, s) % g == 0)][
            :1
        ]
    return [
        (
            ("training", "per_device_train_batch_size"),
            f"the generation batch (per_device_train_batch_size {b} x {n} process(es) x steps_per_generation {s} "
            f"= {total} completions) must be divisible by grpo.num_generations ({g}) so every prompt's group is "
            f"whole; nearest fixes: {', '.join(fixes)}",
        )
    ]


def _nearest(value: int, ok, limit: int = 4096) -> list[int]:
    """Valid values closest to `value` (the lower one first on a tie, at most one on each side)."""
    below = next((v for v in range(value - 1, 0, -1) if ok(v)), None)
    above = next((v for v in range(value + 1, value + limit) if ok(v)), None)
    found = [v for v in (below, above) if v is not None]
    return sorted(found, key=lambda v: abs(v - value))
