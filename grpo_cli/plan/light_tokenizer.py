"""Prompt token counts without torch: the tokenizer class `AutoTokenizer` chose for a folder, loaded directly.

`AutoTokenizer` imports torch (through the model configurations), about two seconds of a `grpo plan` that otherwise
takes half a second; the tokenizer classes themselves do not. Which class `AutoTokenizer` picks depends on rules
(the folder's config, its tokenizer_config.json, lists of known exceptions) that are not repeated here: the first
plan of a local folder loads the tokenizer as training does and remembers the class it got, keyed on the folder's
tokenizer files; later plans load that class directly and count with the same function as training
(`chat_templates.prompt_lengths`). Anything else (a hub id, remote code, a folder not seen yet) returns None.
"""

from __future__ import annotations

import json
from pathlib import Path

from grpo_cli.chat_templates import adapt, prompt_lengths
from grpo_cli.errors import UserError
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.sources import model_location


def light_tokenizer(model: ModelSection):
    """The model section's tokenizer from a local folder, without torch, or None (see the module docstring)."""
    from grpo_cli.files import cache_root
    from grpo_cli.gguf import converted_dir

    if model.trust_remote_code:
        return None
    try:
        location = Path(model_location(model.tokenizer or model.name))
    except UserError:
        return None
    if location.suffix == ".gguf" and location.is_file():
        converted = converted_dir(location)
        folders = [converted, cache_root() / "tokenizers" / converted.name]
    else:
        folders = [location]
    for folder in folders:
        name = _remembered().get(folder_identity(folder)) if folder.is_dir() else None
        if name is None:
            continue
        try:
            import transformers

            tokenizer = getattr(transformers, name).from_pretrained(str(folder))
        except Exception:  # a class gone or an unreadable folder (any library error): the full tokenizer decides
            return None
        return adapt(tokenizer, model)
    return None


def remember_class(tokenizer) -> None:
    """Record the class `AutoTokenizer` loaded for the tokenizer's folder (`name_or_path`)."""
    folder = Path(getattr(tokenizer, "name_or_path", "") or "")
    name = type(tokenizer).__name__
    if not folder.is_dir() or not name.isidentifier():
        return
    known = _remembered()
    known[folder_identity(folder)] = name
    path = _classes_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(known, indent=0))
    partial.replace(path)


def folder_identity(folder: Path) -> str:
    """The folder and its tokenizer files' sizes and times: a changed tokenizer is not taken for the one seen."""
    files = sorted(p for p in folder.iterdir() if p.name.startswith(("tokenizer", "special", "chat_template")))
    stats = [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files]
    return "|".join([str(folder.resolve()), *stats])


def _classes_file() -> Path:
    from grpo_cli.files import cache_root

    return cache_root() / "tokenizer-classes.json"


def _remembered() -> dict[str, str]:
    try:
        known = json.loads(_classes_file().read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def longest_prompt(
    model: ModelSection, data: DataSection, seed: int, tools: list | None = None
) -> tuple[int, int] | None:
    """(longest prompt that survives the length filter, prompts that survive) without torch or `datasets`, or None;
    `seed`: training.seed, which generated data is drawn with."""

    prompts = plain_prompts(data, seed)
    tokenizer = light_tokenizer(model) if prompts else None
    if tokenizer is None:
        return None
    limit = data.max_prompt_length
    kept = [n for n in prompt_lengths(tokenizer, prompts, tools) if limit is None or n <= limit]
    return (max(kept), len(kept)) if kept else None


def plain_prompts(data: DataSection, seed: int = 0) -> list | None:
    """The prompts `prepare` builds before its length filter, read without `datasets` (whose import alone takes
    longer than `grpo plan`): generated data and JSON files without a shuffle. None where only `prepare` can say
    (other file types, a shuffle, missing columns, no usable row)."""
    from grpo_cli.data import DEFAULT_GENERATED_ROWS, build_prompt, keep_rows
    from grpo_cli.recipe.generated_tasks import generate_task, task_name
    from grpo_cli.recipe.sources import GENERATED
    from rewards.gsm8k_task import generate_problems

    if data.shuffle_seed is not None:
        return None
    if data.source == GENERATED:
        rows = generate_problems(data.limit or DEFAULT_GENERATED_ROWS, seed)
    elif task_name(data.source) is not None:
        rows = generate_task(data.source, data.split, data.limit or DEFAULT_GENERATED_ROWS, seed)
    else:
        path = Path(data.source).expanduser()
        try:
            text = path.read_text(encoding="utf-8") if path.suffix in (".jsonl", ".json") else None
            rows = json.loads(text) if text and text.lstrip().startswith("[") else None
            if rows is None and text is not None:
                rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except (OSError, ValueError):
            return None
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            return None
    columns = {key for row in rows for key in row}
    if data.prompt_column not in columns:
        return None
    try:
        kept, _ = keep_rows(rows, data)
    except UserError:  # `prepare` will say why, in its own words
        return None
    return [build_prompt(r[data.prompt_column], data.system_prompt, data.chat) for r in kept]
