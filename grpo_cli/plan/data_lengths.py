"""The prompt lengths of the data a recipe will train on, for a plan of the batches the run will actually see.

TRL pads a batch only to its longest prompt, so a run whose prompts are all shorter than `data.max_prompt_length`
never holds sequences of the limit's length. The lengths come from the recipe's own data preparation (the same
filters and chat template as `grpo train`) with the tokenizer alone, never the weights. Reading the data and loading
a tokenizer cost seconds, so the result is cached, keyed on everything it depends on (the data file's size and
modification time among them).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.plan.light_tokenizer import folder_identity
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.generated_tasks import task_name
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.sources import GENERATED, model_location
from grpo_cli.recipe.user_code import ToolSpec


@dataclass(frozen=True)
class DataLengths:
    longest_prompt: int  # tokens of the longest prompt that survives the recipe's filters: the worst batch's
    prompts: int  # prompts that survive
    source: str


def read_data_lengths(recipe: Recipe) -> tuple[DataLengths | None, str]:
    """The data's prompt lengths, or None and one line saying why the plan stays at the recipe's limits. A data file
    with a line too long to read whole (files.long_line) is refused: training could not read it either."""
    data = recipe.data
    if recipe.environment is not None:
        return None, "the environment's reset() may rewrite each prompt, so the plan stays at the recipe's limits"
    generated = data.source == GENERATED or task_name(data.source) is not None
    if not generated and not Path(data.source).expanduser().is_file():
        return None, f"data.source `{data.source}` is not a local file: planned at the recipe's limits"
    if not generated and Path(data.source).suffix == ".jsonl":
        from grpo_cli.files import long_line

        too_long = long_line(Path(data.source).expanduser())  # before any line is read whole
        if too_long:
            raise UserError(too_long, path="data.source")
    if not generated:  # an empty or malformed file: validate's words, not the reader's (StopIteration, arrow's)
        from grpo_cli.recipe.checks import data_file_problem

        columns = [c for c in (data.prompt_column, data.answer_column) if c]
        problem = data_file_problem(Path(data.source).expanduser(), columns, answers=True, keys=True)
        if problem:
            return None, f"the data could not be measured ({problem}): planned at the recipe's limits"
    key = _cache_key(recipe.model, data, recipe.training.seed, recipe.tools)
    cached = _cache_file(key)
    try:
        return DataLengths(**json.loads(cached.read_text())), ""
    except (OSError, ValueError, TypeError):
        pass  # not cached yet (or an unreadable entry): measure
    from grpo_cli.tools.wiring import prompt_tools

    try:
        lengths = _measure(recipe.model, data, recipe.training.seed, prompt_tools(recipe.tools))
    except UserError as error:
        return None, f"the data could not be measured ({error.problems[0].message}): planned at the recipe's limits"
    except Exception as exc:  # a tokenizer that cannot load offline, a broken file: the limits still give a plan
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        return None, f"the data could not be measured ({reason}): planned at the recipe's limits"
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    partial.write_text(json.dumps(asdict(lengths)))
    partial.replace(cached)
    return lengths, ""


def _measure(model: ModelSection, data: DataSection, seed: int, tools: list | None) -> DataLengths:
    """Without torch where the tokenizer and data allow (light_tokenizer.py), else as training prepares its data;
    `seed`: training.seed, `tools`: those rendered into every prompt (tools/wiring.py, prompt_tools)."""
    from grpo_cli.plan.light_tokenizer import longest_prompt, remember_class

    light = longest_prompt(model, data, seed, tools)
    if light is not None:
        return DataLengths(*light, data.source)

    from grpo_cli import models
    from grpo_cli.data import prepare
    from grpo_cli.progress import quiet_libraries

    quiet_libraries()
    tokenizer = models.tokenizer_without_weights(model)
    remember_class(tokenizer)  # the next plan of this folder loads the same class without torch
    prepared = prepare(data, tokenizer, seed=seed, tools=tools)
    return DataLengths(max(prepared.prompt_lengths), len(prepared.prompt_lengths), data.source)


def _cache_key(model: ModelSection, data: DataSection, seed: int, tools: list[ToolSpec]) -> str:
    """Everything the lengths depend on: the data settings, the data file, the tokenizer's files, the tools."""
    import grpo_cli

    parts = [
        grpo_cli.__version__,
        data.model_dump_json(),
        str(seed),  # generated data is drawn with it
        json.dumps([t.model_dump(mode="json") for t in tools], sort_keys=True, default=str),
        _file_identity(data.source) if data.source != GENERATED else GENERATED,
        _tokenizer_identity(model),
    ]
    for tool in tools:
        file = tool.name.partition(":")[0]
        if file.endswith(".py"):
            parts.append(_file_identity(file))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _tokenizer_identity(model: ModelSection) -> str:
    if model.chat_template:  # another template renders other prompt lengths
        return f"{_tokenizer_files(model)}|template:{model.chat_template}"
    return _tokenizer_files(model)


def _tokenizer_files(model: ModelSection) -> str:
    name = model.tokenizer or model.name
    try:
        location = Path(model_location(name))
    except UserError:
        return name
    if location.is_dir():
        return folder_identity(location)
    if location.is_file():
        return _file_identity(str(location))
    return f"{name}@{model.revision}"  # a hub id: its revision names its files


def _file_identity(path: str) -> str:
    resolved = Path(path).expanduser().resolve()
    try:
        stat = resolved.stat()
    except OSError:
        return str(resolved)
    return f"{resolved}:{stat.st_size}:{stat.st_mtime_ns}"


def _cache_file(key: str) -> Path:
    from grpo_cli.files import cache_root

    return cache_root() / "prompt-lengths" / f"{key}.json"
