"""Load a recipe file (plus overrides) into a `Recipe`, or raise one `UserError` listing every problem."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from grpo_cli.data import LOCAL_DATA_BUILDERS
from grpo_cli.errors import Problem, UserError
from grpo_cli.models import model_location
from grpo_cli.recipe.schema import Recipe, generation_batch
from grpo_cli.recipe.yaml_source import COMMAND_LINE, KeyPath, apply_overrides, format_path, line_of, read_yaml

LOCAL_DATA_SUFFIXES = tuple(LOCAL_DATA_BUILDERS)


def load_recipe(
    file: str | Path | None, overrides: list[str] | None = None, check_trl: bool = True, data: dict | None = None
) -> Recipe:
    """Read, merge overrides, validate. Nothing heavier than pydantic is imported unless a `trl:` section exists.

    With `file=None`, `data` is a recipe assembled from command-line options (`grpo eval --model ...`).
    """
    if file is None:
        data, lines = dict(data or {}), {}
    else:
        file = Path(file)
        data, lines = read_yaml(file)
    overridden = apply_overrides(data, list(overrides or []))

    def problem(path: KeyPath, message: str) -> Problem:
        # An error on an override's key, or on a section only an override named (not in the file), is the
        # command line's, not line 1 of the file's.
        from_command_line = file is None or (bool(path) and any(
            path[: len(o)] == o or (o[: len(path)] == path and path not in lines) for o in overridden))
        if from_command_line:
            return Problem(message, format_path(path), source=COMMAND_LINE)
        return Problem(message, format_path(path), line_of(lines, path), str(file))

    # Files and rewards are checked on the raw YAML so their problems are listed with the schema's.
    found = path_problems(data) + reward_problems(data)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise UserError([problem(path, msg) for path, msg in _translate(exc) + found]) from None
    recipe._source = file  # None: assembled from command-line options

    found += cross_field_problems(recipe)
    if check_trl and recipe.trl and not found:
        found += trl_problems(recipe)
    if found:
        raise UserError([problem(path, msg) for path, msg in found])
    return recipe


def with_overrides(recipe: Recipe, overrides: list[str]) -> Recipe:
    """The recipe with more `key.path=value` overrides, validated like a file (schema and cross-field checks)."""
    data = recipe.model_dump(mode="json")
    apply_overrides(data, overrides)
    try:
        changed = Recipe.model_validate(data)
    except ValidationError as exc:
        raise UserError([Problem(msg, format_path(path), source=COMMAND_LINE) for path, msg in _translate(exc)]) from None
    changed._source = recipe._source
    problems = cross_field_problems(changed)
    if problems:
        raise UserError([Problem(msg, format_path(path), source=COMMAND_LINE) for path, msg in problems])
    return changed


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
    if d.strategy in ("zero2", "zero3") and recipe.quantization is not None:
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


# ---------------------------------------------------------------- files, rewards, trl passthrough


def looks_like_path(name: str) -> bool:
    """A hub id is `org/name`; anything with a file suffix or an explicit relative/absolute prefix is a path."""
    return name.startswith(("/", "./", "../", "~")) or name.endswith((".gguf", *LOCAL_DATA_SUFFIXES)) or name.count("/") > 1


def _string_at(data: Any, *path: str) -> str | None:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, str) else None


def path_problems(data: dict[str, Any]) -> list[tuple[KeyPath, str]]:
    """Model and data files named in the (raw) recipe must exist."""
    out: list[tuple[KeyPath, str]] = []
    name = _string_at(data, "model", "name")
    if name:
        try:
            model = Path(model_location(name))
        except UserError as exc:
            model = None
            out.append((("model", "name"), exc.problems[0].message))
        if model is None:
            pass
        elif model.is_dir() and not (model / "config.json").exists():
            out.append((("model", "name"), f"{model} is a directory without config.json, so not a model directory"))
        elif not model.exists() and looks_like_path(name):
            out.append((("model", "name"), f"no such model file or directory: {model} (relative paths start at {Path.cwd()})"))

    config = _string_at(data, "distributed", "accelerate_config")
    if config and not Path(config).expanduser().is_file():
        out.append((("distributed", "accelerate_config"), f"accelerate config file not found: {config} "
                    "(write one with `accelerate config`, or drop it to use distributed.strategy)"))
    for key in (("data", "source"), ("eval", "source"), ("eval", "fewshot_source")):
        source = _string_at(data, *key)
        if not source:
            continue
        path = Path(source).expanduser()
        if looks_like_path(source) and not path.exists():
            out.append((key, f"data file not found: {path} (relative paths start at {Path.cwd()})"))
        elif path.is_file() and path.suffix not in LOCAL_DATA_SUFFIXES:
            out.append((key, f"unsupported data file type {path.suffix!r}; use one of {', '.join(LOCAL_DATA_SUFFIXES)}"))
        elif path.is_file():
            section = data.get(key[0]) if isinstance(data.get(key[0]), dict) else {}
            if key == ("data", "source"):
                needed = [section.get("prompt_column", "question"), section.get("answer_column", "answer")]
            else:  # evaluation reads GSM8K's fields
                needed = ["question", "answer"]
            problem = data_file_problem(path, [c for c in needed if isinstance(c, str)])
            if problem and "field" in problem and key == ("data", "source"):
                problem += "; name yours with data.prompt_column / data.answer_column"
            if problem:
                out.append((key, problem))
    return out


def data_file_problem(path: Path, columns: list[str]) -> str | None:
    """Why a local data file cannot feed training or evaluation (empty, not JSON Lines, missing columns), or None.

    Reads at most the first rows, so a large dataset is checked in milliseconds."""
    import csv
    import json

    try:
        if path.stat().st_size == 0:
            return f"{path} is empty"
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            names = pq.read_schema(path).names
        elif path.suffix == ".csv":
            with open(path, encoding="utf-8", newline="") as handle:
                names = next(csv.reader(handle), [])
        elif path.suffix == ".jsonl":
            names = None
            with open(path, "rb") as handle:
                for number, raw in enumerate(handle, start=1):
                    if not raw.strip():
                        continue
                    try:
                        row = json.loads(raw)
                    except ValueError:
                        return f"line {number} of {path} is not JSON (JSON Lines: one object per line)"
                    if not isinstance(row, dict):
                        return f"line {number} of {path} is not a JSON object"
                    names = list(row) if names is None else names
                    if number >= 20:
                        break
            if names is None:
                return f"{path} holds no rows"
        else:  # .json: one array of objects, or datasets' {"data": [...]} layout; too varied to sniff cheaply
            return None
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read {path}: {exc}"
    except Exception as exc:  # pyarrow's errors for a file that is not parquet
        return f"cannot read {path}: {type(exc).__name__}: {str(exc)[:200]}"
    missing = [c for c in columns if c not in names]
    if missing:
        return f"{path} has no `{missing[0]}` field (it has: {', '.join(map(str, names)) or 'none'})"
    return None


def reward_problems(data: dict[str, Any]) -> list[tuple[KeyPath, str]]:
    """Every reward must resolve to a callable, with its kwargs accepted."""
    from rewards.registry import RewardLookupError, resolve_reward

    specs = data.get("rewards")
    out: list[tuple[KeyPath, str]] = []
    for index, spec in enumerate(specs if isinstance(specs, list) else []):
        spec = {"name": spec} if isinstance(spec, str) else spec
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            continue  # the schema reports the shape problem
        kwargs = spec.get("kwargs") or {}
        try:
            resolve_reward(spec["name"], kwargs if isinstance(kwargs, dict) else {})
        except RewardLookupError as exc:
            out.append((("rewards", index, exc.field), str(exc)))
    return out


def trl_problems(recipe: Recipe) -> list[tuple[KeyPath, str]]:
    """Check the passthrough section against GRPOConfig itself: field names, then the values by building one."""
    import dataclasses
    import tempfile

    from grpo_cli.train.config import grpo_config_kwargs

    import torch
    from trl import GRPOConfig

    names = [f.name for f in dataclasses.fields(GRPOConfig)]
    first_class = grpo_config_kwargs(recipe.model_copy(update={"trl": {}}), Path("."))
    out: list[tuple[KeyPath, str]] = []
    for key in recipe.trl:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            out.append((("trl", key), f"`{key}` is not a GRPOConfig field in the installed trl{hint}"))
        elif key in first_class:
            out.append((("trl", key), f"`{key}` is set by the recipe's own sections; set it there instead of under trl:"))
    if out:
        return out
    with tempfile.TemporaryDirectory() as tmp:
        try:
            GRPOConfig(**grpo_config_kwargs(recipe, Path(tmp), on_cpu=not torch.cuda.is_available()))
        except (ValueError, TypeError) as exc:
            out.append((("trl",), f"GRPOConfig rejects these settings: {exc}"))
    return out
