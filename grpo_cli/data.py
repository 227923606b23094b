"""Datasets for training and evaluation: loading, GSM8K answers, prompt building, the length filter."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_cli.answers import gsm8k_gold, normalize_number
from grpo_cli.errors import UserError
from grpo_cli.recipe.schema import DataSection

GENERATED = "generated"
# Local data files by suffix -> the `datasets` builder that reads them.
LOCAL_DATA_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
DEFAULT_GENERATED_ROWS = 1000

# Templates for one-step arithmetic word problems in GSM8K's format (question, worked answer ending `#### N`).
_NAMES = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam"]
_ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "cookies", "stamps", "shells", "cards", "coins"]
_TEMPLATES = {
    "+": ("{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?",
          "{name} has {a} + {b} = <<{a}+{b}={r}>>{r} {item}."),
    "-": ("{name} has {a} {item} and gives away {b} of them. How many {item} does {name} have left?",
          "{name} has {a} - {b} = <<{a}-{b}={r}>>{r} {item} left."),
    "*": ("{name} buys {a} boxes with {b} {item} in each box. How many {item} does {name} buy?",
          "{name} buys {a} * {b} = <<{a}*{b}={r}>>{r} {item}."),
}


def generate_problems(count: int, seed: int = 0) -> list[dict[str, str]]:
    """Seeded GSM8K-format problems (fields `question`, `answer` ending in `#### N`) for offline demos and tests."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        op = rng.choice("+-*")
        a, b = (rng.randint(2, 12), rng.randint(2, 9)) if op == "*" else (rng.randint(5, 60), rng.randint(2, 30))
        if op == "-" and b > a:
            a, b = b, a
        r = {"+": a + b, "-": a - b, "*": a * b}[op]
        words = dict(name=rng.choice(_NAMES), item=rng.choice(_ITEMS), a=a, b=b, r=r)
        question, working = _TEMPLATES[op]
        rows.append({"question": question.format(**words), "answer": f"{working.format(**words)}\n#### {r}"})
    return rows


def load_rows(source: str, config: str | None, split: str, limit: int | None = None, seed: int = 0,
              key: str = "data.source"):
    """A `datasets.Dataset` from `generated`, a local file, or the hub (hub failures become one clear line).

    `key` is the recipe key the source came from, named in errors (data.source, eval.source, ...)."""
    import datasets

    if source == GENERATED:
        return datasets.Dataset.from_list(generate_problems(limit or DEFAULT_GENERATED_ROWS, seed))
    path = Path(source).expanduser()
    if path.is_file():
        builder = LOCAL_DATA_BUILDERS.get(path.suffix)
        if builder is None:
            raise UserError(f"unsupported data file type {path.suffix!r}", path=key)
        try:
            return datasets.load_dataset(builder, data_files=str(path), split="train")
        except Exception as exc:  # malformed JSON/CSV: one line naming the file beats a pyarrow traceback
            raise UserError(f"cannot read {path}: {type(exc).__name__}: {str(exc)[:300]}", path=key) from None
    try:
        return datasets.load_dataset(source, config, split=split)
    except Exception as exc:  # the hub raises many types (ConnectionError, DatasetNotFoundError, ValueError...)
        raise UserError(
            f"cannot load dataset `{source}` (config {config!r}, split {split!r}): {str(exc).splitlines()[0][:200]}; "
            f"offline? point {key} at a local .jsonl/.json/.parquet/.csv file or use `generated`",
            path=key,
        ) from None


def build_prompt(question: str, system_prompt: str | None, chat: bool) -> Any:
    """Chat messages for instruct models (TRL applies the chat template), or plain text."""
    if chat:
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return messages + [{"role": "user", "content": question}]
    return f"{system_prompt}\n\n{question}\n" if system_prompt else f"{question}\n"


def solution_steps(answer: str) -> int:
    """Lines of working before GSM8K's `#### N` line: a proxy for how hard the problem is."""
    working = answer.split("####", 1)[0].strip()
    return len(working.splitlines()) if working else 0


def gold_answer(raw: Any, answer_format: str) -> str:
    text = str(raw)
    return gsm8k_gold(text) if answer_format == "gsm8k" else normalize_number(text)


@dataclass
class PreparedData:
    dataset: Any  # datasets.Dataset with `prompt`, `answer`, `question`
    total: int
    dropped_too_long: int


def prepare(data: DataSection, tokenizer=None, seed: int = 0) -> PreparedData:
    """Rows -> {prompt, answer, question}; shuffle, limit, keep short solutions, drop prompts over max_prompt_length."""
    rows = load_rows(data.source, data.config, data.split, data.limit, seed)
    missing = [c for c in (data.prompt_column, data.answer_column) if c and c not in rows.column_names]
    if missing:
        key = "data.prompt_column" if data.prompt_column in missing else "data.answer_column"
        raise UserError(f"column {missing[0]!r} not in the data; it has: {', '.join(rows.column_names)}", path=key)
    if data.shuffle_seed is not None:
        rows = rows.shuffle(seed=data.shuffle_seed)
    if data.limit is not None and len(rows) > data.limit:
        rows = rows.select(range(data.limit))
    if data.max_solution_steps is not None:
        if not data.answer_column or data.answer_format != "gsm8k":
            raise UserError("counts the working lines of GSM8K-format answers; it needs data.answer_format: gsm8k "
                            "and an answer column", path="data.max_solution_steps")
        rows = rows.filter(lambda row: solution_steps(str(row[data.answer_column])) <= data.max_solution_steps)
        if len(rows) == 0:
            raise UserError("no problem has a solution this short; raise it", path="data.max_solution_steps")

    def to_example(row: dict[str, Any]) -> dict[str, Any]:
        example = {"prompt": build_prompt(str(row[data.prompt_column]), data.system_prompt, data.chat),
                   "question": str(row[data.prompt_column])}
        if data.answer_column:
            example["answer"] = gold_answer(row[data.answer_column], data.answer_format)
        return example

    prepared = rows.map(to_example, remove_columns=rows.column_names)
    total = len(prepared)
    if data.max_prompt_length is not None and tokenizer is not None:
        lengths = [prompt_length(tokenizer, p) for p in prepared["prompt"]]
        keep = [i for i, n in enumerate(lengths) if n <= data.max_prompt_length]
        prepared = prepared.select(keep)
    if len(prepared) == 0:
        raise UserError(
            f"no rows left: all {total} prompts are longer than {data.max_prompt_length} tokens; raise it",
            path="data.max_prompt_length",
        )
    return PreparedData(prepared, total, total - len(prepared))


def prompt_length(tokenizer, prompt: Any) -> int:
    """Tokens the model will see for this prompt (with the chat template and generation prompt)."""
    if isinstance(prompt, list):
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)
    return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
