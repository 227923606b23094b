"""Checks that read beyond the schema: files the recipe names, reward functions, the `trl:` passthrough.

Each command asks only for the checks of what it reads (`validation.SCOPES`): evaluating a run copied to another
machine must not fail on the training data file it never opens.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from grpo_cli.chat_templates import template_problem
from grpo_cli.errors import UserError
from grpo_cli.recipe.generated_tasks import SPLITS, answer_format, task_name, unknown_task
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.sources import LOCAL_DATA_SUFFIXES, directory_named_as_file, looks_like_path, model_location
from grpo_cli.recipe.yaml_source import KeyPath


def _string_at(data: Any, *path: str) -> str | None:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, str) else None


def path_problems(data: dict[str, Any], reads: frozenset[str]) -> list[tuple[KeyPath, str]]:
    """Files named in the (raw) recipe must exist: the model always, the others when the command reads them."""
    out = _model_problems(_string_at(data, "model", "name"))
    template = _string_at(data, "model", "chat_template")
    if template and template_problem(template):
        out.append((("model", "chat_template"), template_problem(template)))
    config = _string_at(data, "distributed", "accelerate_config")
    if "launch" in reads and config and not Path(config).expanduser().is_file():
        out.append(
            (
                ("distributed", "accelerate_config"),
                f"accelerate config file not found: {config} "
                "(write one with `accelerate config`, or drop it to use distributed.strategy)",
            )
        )
    keys = [(("data", "source"), "data")] + [(("eval", k), "eval_data") for k in ("source", "fewshot_source")]
    for key, what in keys:
        source = _string_at(data, *key)
        if source and what in reads:
            out += [(key, problem) for problem in _data_source_problems(data, key, source)]
            out += _generated_task_problems(data, key, source)
    return out


def _generated_task_problems(data: dict[str, Any], key: KeyPath, source: str) -> list[tuple[KeyPath, str]]:
    """A `generated:<task>` source must name a task, one of its splits, and be read as the plain words it answers."""
    if task_name(source) is None or key == ("eval", "fewshot_source"):
        return []
    unknown = unknown_task(source)
    if unknown:
        return [(key, unknown)]
    section = data.get(key[0]) if isinstance(data.get(key[0]), dict) else {}
    split = section.get("split", "train" if key[0] == "data" else "test")
    out = []
    if split not in SPLITS:
        out.append(((key[0], "split"), f"{source} has the splits {' and '.join(SPLITS)}, not {split!r}"))
    if answer_format(source) == "gsm8k":
        if key[0] == "data" and section.get("answer_format", "gsm8k") != "gsm8k":
            out.append((("data", "answer_format"), f"{source} answers as GSM8K does: set data.answer_format: gsm8k"))
        return out
    words = f"{source} answers in words, not GSM8K numbers"
    if key[0] == "eval" and section.get("protocol", "chat") != "task":
        out.append((("eval", "protocol"), f"{words}: GSM8K's filters cannot score it; set eval.protocol: task"))
    if key[0] == "data" and section.get("answer_format", "gsm8k") != "plain":
        out.append((("data", "answer_format"), f"{words}: set data.answer_format: plain"))
    return out


def _model_problems(name: str | None) -> list[tuple[KeyPath, str]]:
    if not name:
        return []
    try:
        model = Path(model_location(name))
    except UserError as exc:
        return [(("model", "name"), exc.problems[0].message)]
    if model.is_dir() and not (model / "config.json").exists():
        return [(("model", "name"), f"{model} is a directory without config.json, so not a model directory")]
    if not model.exists() and looks_like_path(name):
        return [(("model", "name"), f"no such model file or directory: {model} (relative paths start at {Path.cwd()})")]
    return []


def _data_source_problems(data: dict[str, Any], key: KeyPath, source: str) -> list[str]:
    path = Path(source).expanduser()
    if looks_like_path(source) and not path.exists():
        return [f"data file not found: {path} (relative paths start at {Path.cwd()})"]
    if path.is_file() and path.suffix not in LOCAL_DATA_SUFFIXES:
        return [f"unsupported data file type {path.suffix!r}; use one of {', '.join(LOCAL_DATA_SUFFIXES)}"]
    if path.is_dir() and path.suffix in LOCAL_DATA_SUFFIXES:
        return [directory_named_as_file(path, ".".join(key))]
    if not path.is_file():
        return []
    section = data.get(key[0]) if isinstance(data.get(key[0]), dict) else {}
    # Training, and the task protocol on its held-out file, read the data section's columns; the other protocols
    # read GSM8K's fields.
    task = key == ("eval", "source") and section.get("protocol") == "task"
    columns = data.get("data") if isinstance(data.get("data"), dict) else {}
    if key == ("data", "source") or task:
        needed = [columns.get("prompt_column", "question"), columns.get("answer_column", "answer")]
        problem = data_file_problem(path, [c if isinstance(c, str) else "" for c in needed], answers=True, keys=True)
    else:
        problem = data_file_problem(path, ["question", "answer"], answers=True)
    return [problem] if problem else []


# Where a dataset keeps its questions and its reference answers, when it does not call them `question` and `answer`.
PROMPT_FIELDS = ("question", "prompt", "messages", "problem", "instruction", "input")
ANSWER_FIELDS = ("answer", "solution", "reference", "target", "label", "output")


def column_fix(missing: str, names: list[str], key: str) -> str:
    """`; set data.prompt_column: prompt` when the data has exactly one field of the kind `key` names, else how to
    name it: the recipe says which field it reads rather than the tool guessing (one recipe also drives eval)."""
    known = PROMPT_FIELDS if key == "data.prompt_column" else ANSWER_FIELDS
    found = [name for name in names if name in known and name != missing]
    return f"; set {key}: {found[0]}" if len(found) == 1 else f"; name the field that holds it with {key}"


def data_file_problem(path: Path, columns: list[str], answers: bool = False, keys: bool = False) -> str | None:
    """Why a local data file cannot feed training or evaluation (empty, not JSON Lines, missing columns), or None.
    `answers`: the columns are a question's and its reference answer's, which must not be a list or an object;
    `keys`: they are data.prompt_column and data.answer_column (a conversation's closing assistant turn can stand for
    the answer, and a missing one is named with its key).

    Reads at most the first rows, so a large dataset is checked in milliseconds."""
    import csv
    import json

    conversations: set[str] = set()  # fields that hold lists (a chat row's turns)
    try:
        if path.stat().st_size == 0:
            return f"{path} is empty"
        if path.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            names = schema.names
            conversations = {f.name for f in schema if pa.types.is_list(f.type) or pa.types.is_large_list(f.type)}
        elif path.suffix == ".csv":
            with open(path, encoding="utf-8", newline="") as handle:
                names = next(csv.reader(handle), [])
        elif path.suffix == ".jsonl":
            from grpo_cli.files import long_line

            names, too_long = None, long_line(path, first=20)
            if too_long:
                return too_long
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
                    wrong = row.get(columns[1]) if answers and columns[1] else None
                    if isinstance(wrong, (list, dict)):
                        return (
                            f"line {number} of {path}: `{columns[1]}` is a JSON "
                            f"{'list' if isinstance(wrong, list) else 'object'} where a reference answer is text or "
                            "a number; write one answer per row"
                        )
                    if names is None:
                        names = list(row)
                        conversations = {name for name, value in row.items() if isinstance(value, list)}
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
    missing = [c for c in columns if c and c not in names]
    if keys and missing == [columns[1]] and columns[0] in conversations:
        return None  # each conversation's closing assistant turn is its reference answer (data.split_reference)
    if missing:
        key = "data.prompt_column" if missing[0] == columns[0] else "data.answer_column"
        fix = column_fix(missing[0], names, key) if keys else ""
        return f"{path} has no `{missing[0]}` field (it has: {', '.join(map(str, names)) or 'none'}){fix}"
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
        if "model" in spec or "judge" in spec:
            continue  # a reward model or judge: its name is a label (reward_model_checks.py)
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

    import torch
    from trl import GRPOConfig

    from grpo_cli.recipe.grpo_config import grpo_config_kwargs
    from grpo_cli.recipe.precision import precision_here

    names = [f.name for f in dataclasses.fields(GRPOConfig)]
    first_class = grpo_config_kwargs(recipe.model_copy(update={"trl": {}}), Path("."))
    out: list[tuple[KeyPath, str]] = []
    for key in recipe.trl:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            out.append((("trl", key), f"`{key}` is not a GRPOConfig field in the installed trl{hint}"))
        elif key in first_class:
            out.append(
                (("trl", key), f"`{key}` is set by the recipe's own sections; set it there instead of under trl:")
            )
    if out:
        return out
    with tempfile.TemporaryDirectory() as tmp:
        try:
            precision = precision_here(recipe.model, on_cpu=not torch.cuda.is_available())
            GRPOConfig(**grpo_config_kwargs(recipe, Path(tmp), on_cpu=precision.on_cpu, mixed=precision.mixed))
        except (ValueError, TypeError) as exc:
            out.append((("trl",), f"GRPOConfig rejects these settings: {exc}"))
    return out + _continuous_batching_problems(recipe.trl, recipe.method, precision)


def _continuous_batching_problems(trl: dict, method: str, precision) -> list[tuple[KeyPath, str]]:
    """TRL's continuous batching casts the whole model to the mixed-precision dtype in place before it generates
    (GRPOTrainer._generate_single_turn), trained weights included: float32 adapters or master weights would train
    on in bfloat16 from the first step, unannounced."""
    from grpo_cli.recipe.precision import BY_WEIGHTS

    key = next((k for k in ("use_transformers_continuous_batching", "use_transformers_paged") if trl.get(k)), None)
    if (
        key is None
        or precision.mixed == "no"
        or (method == "full" and BY_WEIGHTS.get(precision.dtype) == precision.mixed)
    ):
        return []
    trained = "weights" if method == "full" else "adapter"
    return [
        (
            ("trl", key),
            f"TRL's continuous batching casts the whole model, the trained {trained} "
            f"included, to {precision.mixed} in place when it generates; drop it, or set model.mixed_precision: no "
            "(on a CPU it ran at 0.21x grpo's own sampling: docs/cpu-training.md)",
        )
    ]
