"""Load a recipe file (plus overrides and typed options) into a `Recipe`, or raise one `UserError` listing every
problem. What is checked beyond the schema depends on what the command reads (`SCOPES`)."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from grpo_cli.errors import Problem, UserError
from grpo_cli.recipe.checks import path_problems, reward_problems, trl_problems
from grpo_cli.recipe.tool_checks import tool_problems
from grpo_cli.recipe.precision import BY_WEIGHTS
from grpo_cli.recipe.schema import Recipe, generation_batch
from grpo_cli.recipe.yaml_source import (
    COMMAND_LINE, KeyPath, apply_options, apply_overrides, format_path, line_of, read_yaml,
)

Scope = Literal["train", "preflight", "eval", "plan", "export"]
# What each command reads, beyond the model it always names. train (and validate) checks everything.
SCOPES: dict[str, frozenset[str]] = {
    "train": frozenset({"data", "eval_data", "rewards", "tools", "trl", "launch"}),
    "preflight": frozenset({"data", "rewards", "tools", "trl"}),
    "eval": frozenset({"eval_data", "tools"}),
    "plan": frozenset(),
    "export": frozenset(),
}


def load_recipe(file: str | Path | None, overrides: list[str] | None = None, *, options: dict[str, Any] | None = None,
                scope: Scope = "train") -> Recipe:
    """Read, merge `key.path=value` overrides then typed `options` (command-line flags), validate.

    `file=None`: a recipe made of options alone (`grpo eval --model ...`). Nothing heavier than pydantic is imported
    unless the scope reads a `trl:` section."""
    reads = SCOPES[scope]
    if file is None:
        data, lines = {}, {}
    else:
        file = Path(file)
        data, lines = read_yaml(file)
    written = apply_overrides(data, list(overrides or [])) | apply_options(data, options or {})

    def problem(path: KeyPath, message: str) -> Problem:
        # An error on an override's key, or on a section only an override named (not in the file), is the
        # command line's, not line 1 of the file's.
        from_command_line = file is None or (bool(path) and any(
            path[: len(o)] == o or (o[: len(path)] == path and path not in lines) for o in written))
        if from_command_line:
            return Problem(message, format_path(path), source=COMMAND_LINE)
        return Problem(message, format_path(path), line_of(lines, path), str(file))

    # Files and rewards are checked on the raw YAML so their problems are listed with the schema's.
    found = path_problems(data, reads) + (reward_problems(data) if "rewards" in reads else [])
    found += tool_problems(data) if "tools" in reads else []
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise UserError([problem(path, msg) for path, msg in _translate(exc) + found]) from None
    recipe._source = file  # None: assembled from command-line options

    if "rewards" in reads and not recipe.rewards:
        found.append((("rewards",), "required key is missing: training needs at least one reward, "
                                    "e.g. rewards: [correctness]"))
    found += cross_field_problems(recipe)
    if "trl" in reads and recipe.trl and not found:
        found += trl_problems(recipe)
    if found:
        raise UserError([problem(path, msg) for path, msg in found])
    return recipe


def with_changes(recipe: Recipe, changes: dict[str, Any]) -> Recipe:
    """The recipe with `{"key.path": value}` changes, validated like a file (schema and cross-field checks).

    A key that is not a schema field is a bug in the caller (a renamed field), never a user mistake: KeyError."""
    for key in changes:
        if not is_schema_field(tuple(key.split("."))):
            raise KeyError(f"`{key}` is not a recipe field")
    data = recipe.model_dump(mode="json")
    apply_options(data, changes)
    try:
        changed = Recipe.model_validate(data)
    except ValidationError as exc:
        raise UserError([Problem(msg, format_path(path), source=COMMAND_LINE) for path, msg in _translate(exc)]) from None
    changed._source = recipe._source
    problems = cross_field_problems(changed)
    if problems:
        raise UserError([Problem(msg, format_path(path), source=COMMAND_LINE) for path, msg in problems])
    return changed


def is_schema_field(path: KeyPath) -> bool:
    return bool(path) and path[-1] in _valid_keys(path[:-1])


# ---------------------------------------------------------------- pydantic errors -> user messages


def _translate(exc: ValidationError) -> list[tuple[KeyPath, str]]:
    out = []
    for err in exc.errors():
        loc: KeyPath = tuple(err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            msg = _unknown_key_message(loc)
        elif kind == "missing":
            msg = "required key is missing"
        else:
            msg = err["msg"].rstrip(".")
            if "input" in err and not isinstance(err["input"], (dict, list)):
                msg += f" (got {err['input']!r})"
        out.append((loc, msg))
    return out


def _unknown_key_message(loc: KeyPath) -> str:
    key = str(loc[-1])
    valid = _valid_keys(loc[:-1])
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f"did you mean `{close[0]}`?" if close else "valid keys: " + ", ".join(valid)
    return f"unknown key `{key}`; {hint}"


def _valid_keys(parent: KeyPath) -> list[str]:
    """Field names of the schema section at `parent` (walking through Optional and list annotations)."""
    model: Any = Recipe
    for part in parent:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return []
        model = _unwrap(model.model_fields[part].annotation)
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _unwrap(annotation: Any) -> Any:
    for arg in typing.get_args(annotation) or ():
        inner = _unwrap(arg)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return annotation


# ---------------------------------------------------------------- cross-field rules


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
        out.append((("model", "mixed_precision"),
                    f"{mixed} autocast does not match {weights} weights; use model.mixed_precision={fix} (or auto)"))
    if grpo.epsilon_high is not None and grpo.epsilon_high < grpo.epsilon:
        out.append(
            (("grpo", "epsilon_high"), f"must be >= grpo.epsilon ({grpo.epsilon}); e.g. grpo.epsilon_high={max(0.28, grpo.epsilon)}")
        )
    if recipe.grpo.importance_sampling_level == "token" and grpo.loss_type == "luspo":
        out.append((("grpo", "importance_sampling_level"), "luspo is a sequence-level loss; set it to `sequence` or remove it"))
    if training.warmup_steps and training.warmup_ratio:
        out.append((("training", "warmup_steps"), "set warmup_steps or warmup_ratio, not both"))
    if recipe.trl.get("generation_batch_size") and recipe.trl.get("steps_per_generation"):
        out.append((("trl", "generation_batch_size"), "set generation_batch_size or steps_per_generation, not both"))
    out += _batch_problems(recipe)
    out += _distributed_problems(recipe)
    out += _tool_use_problems(recipe)
    return out


def _tool_use_problems(recipe: Recipe) -> list[tuple[KeyPath, str]]:
    """Tools live in chat messages: a plain-text prompt or lm-eval's few-shot text has nowhere to put a call."""
    if not recipe.tools and recipe.environment is None:
        return []
    out: list[tuple[KeyPath, str]] = []
    if not recipe.data.chat:
        out.append((("data", "chat"), "tools need chat messages (the chat template renders them); set data.chat: true"))
    if recipe.eval.protocol == "lm-eval":
        out.append((("eval", "protocol"), "lm-eval's protocol is few-shot plain text with no tools; use "
                                          "eval.protocol: chat with tools"))
    return out


def _distributed_problems(recipe: Recipe) -> list[tuple[KeyPath, str]]:
    d = recipe.distributed
    out: list[tuple[KeyPath, str]] = []
    if d.num_processes % d.num_machines:
        out.append((("distributed", "num_processes"), f"is the total over all machines, so a multiple of "
                    f"distributed.num_machines ({d.num_machines}); e.g. {d.num_machines * max(1, d.num_processes // d.num_machines)}"))
    if d.machine_rank >= d.num_machines:
        out.append((("distributed", "machine_rank"), f"must be below distributed.num_machines ({d.num_machines})"))
    if d.num_machines > 1 and not d.main_process_ip and not d.accelerate_config:
        out.append((("distributed", "main_process_ip"), "several machines need the address of machine 0"))
    if recipe.grpo.zero_variance_groups == "resample" and d.num_processes > 1:
        out.append((("grpo", "zero_variance_groups"), "resample draws extra prompts in one process; with several "
                    "processes use grpo.zero_variance_groups=skip"))
    if d.zero_stage is not None and recipe.quantization is not None:
        out.append((("distributed", "strategy"), "DeepSpeed ZeRO does not shard bitsandbytes-quantized weights; "
                    "use distributed.strategy=ddp for QLoRA, or drop `quantization`"))
    return out


def _batch_problems(recipe: Recipe) -> list[tuple[KeyPath, str]]:
    g = recipe.grpo.num_generations
    b = recipe.training.per_device_train_batch_size
    n = recipe.num_processes
    s = recipe.steps_per_generation
    total = recipe.generation_batch_size
    if recipe.trl.get("generation_batch_size"):
        out = []
        if total % (b * n):
            out.append((("trl", "generation_batch_size"), f"must be a multiple of per-device batch x processes ({b * n})"))
        if total % g:
            out.append((("trl", "generation_batch_size"), f"must be divisible by grpo.num_generations ({g})"))
        return out
    if total % g == 0:
        return []
    fixes = [f"training.per_device_train_batch_size={v}"
             for v in _nearest(b, lambda v: generation_batch(v, n, s) % g == 0)]
    fixes += [f"training.gradient_accumulation_steps={v}"
              for v in _nearest(s, lambda v: generation_batch(b, n, v) % g == 0)][:1]
    fixes += [f"grpo.num_generations={v}" for v in _nearest(g, lambda v: v >= 2 and total % v == 0)][:1]
    if n > 1:
        fixes += [f"distributed.num_processes={v}" for v in _nearest(n, lambda v: generation_batch(b, v, s) % g == 0)][:1]
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
