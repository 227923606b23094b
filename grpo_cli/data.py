"""Datasets for training and evaluation: loading, GSM8K answers, prompt building, the length filter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.chat_templates import prompt_lengths
from grpo_cli.errors import UserError
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.generated_tasks import generate_task, task_name
from grpo_cli.recipe.sources import GENERATED, LOCAL_DATA_BUILDERS, directory_named_as_file
from rewards.answers import normalize_number, to_number
from rewards.gsm8k_task import generate_problems, gsm8k_gold, has_numeric_gold, solution_steps

DEFAULT_GENERATED_ROWS = 1000
ROLES = ("system", "user", "assistant", "tool")  # the turns every chat template renders
MAX_ANSWER_CHARS = 10_000  # every reward compares the reference at every step; a GSM8K solution is under 1,000


def load_rows(
    source: str, config: str | None, split: str, limit: int | None = None, seed: int = 0, key: str = "data.source"
):
    """A `datasets.Dataset` from `generated`, a `generated:<task>` split, a local file, or the hub (hub failures
    become one clear line).

    `key` is the recipe key the source came from, named in errors (data.source, eval.source, ...)."""
    import datasets

    if source == GENERATED:
        return datasets.Dataset.from_list(generate_problems(limit or DEFAULT_GENERATED_ROWS, seed))
    if task_name(source) is not None:
        return datasets.Dataset.from_list(generate_task(source, split, limit or DEFAULT_GENERATED_ROWS, seed, key))
    path = Path(source).expanduser()
    if path.is_dir() and path.suffix in LOCAL_DATA_BUILDERS:
        raise UserError(directory_named_as_file(path, key), path=key)
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


def build_prompt(question: Any, system_prompt: str | None, chat: bool) -> Any:
    """Chat messages for instruct models (TRL applies the chat template), or plain text. A conversation (a row's
    `messages`) is asked as it is, after the system prompt when it has no system turn of its own."""
    if chat:
        turns = question if isinstance(question, list) else [{"role": "user", "content": question}]
        own_system = any(turn.get("role") == "system" for turn in turns)
        return ([{"role": "system", "content": system_prompt}] if system_prompt and not own_system else []) + turns
    return f"{system_prompt}\n\n{question}\n" if system_prompt else f"{question}\n"


def split_reference(row: dict[str, Any], data: DataSection) -> dict[str, Any]:
    """A conversation (a chat row's turns): without arrow's nulls for keys only other turns have; when it ends with
    the assistant's turn, that turn is the reference answer (unless the row has one in data.answer_column) and is
    not part of the prompt, since the model is asked to write it."""
    turns = row.get(data.prompt_column)
    if not isinstance(turns, list):
        return row
    turns = [{k: v for k, v in t.items() if v is not None} if isinstance(t, dict) else t for t in turns]
    row = {**row, data.prompt_column: turns}
    if turns and isinstance(turns[-1], dict) and turns[-1].get("role") == "assistant":
        row[data.prompt_column] = turns[:-1]
        if data.answer_column and row.get(data.answer_column) is None:
            row[data.answer_column] = turns[-1].get("content")
    return row


def gold_answer(raw: Any, answer_format: str) -> str:
    """The reference answer rewards receive. A plain number loses its commas and `$`; any other plain answer stays
    as written (`[1, 2)`, `Paris, France`), less surrounding whitespace, for the string and LaTeX verifiers."""
    text = str(raw)
    if answer_format == "gsm8k":
        return gsm8k_gold(text)
    return normalize_number(text) if to_number(text) is not None else text.strip()


@dataclass
class PreparedData:
    dataset: Any  # datasets.Dataset with `prompt`, `answer`, `question`
    total: int
    dropped_too_long: int
    unusable: dict[str, int] = field(default_factory=dict)  # why rows were left out -> how many
    prompt_lengths: list[int] = field(default_factory=list)  # tokens of each kept prompt (empty without a tokenizer)
    source: str = ""  # data.source, and the data.max_prompt_length the prompts were filtered with
    max_prompt_length: int | None = None

    def report(self) -> list[str]:
        """One line per kind of row left out, for the run's console."""
        lines = [
            f"left out {n} of {self.total + sum(self.unusable.values())} rows: {why}"
            for why, n in self.unusable.items()
        ]
        if self.dropped_too_long:
            lines.append(
                f"dropped {self.dropped_too_long} of {self.total} prompts longer than "
                f"{self.max_prompt_length} tokens (data.max_prompt_length)"
            )
        return lines

    def check_enough(self, generation_batch_size: int, num_generations: int, total_steps: Callable[[int], int]) -> None:
        """Refuse a dataset that cannot fill one step: TRL would run zero steps and save an untrained model.
        `total_steps`: the optimizer steps a run takes over so many rows (Recipe.total_steps)."""
        needed = generation_batch_size // num_generations
        rows = len(self.dataset)
        if rows < needed or total_steps(rows) < 1:
            left = left_out(self.unusable) or "none left out"
            raise UserError(
                f"only {rows} usable prompt(s) in {self.source} ({left}); one step needs {needed} "
                f"(generation batch {generation_batch_size} / {num_generations} generations): add rows or "
                "lower training.per_device_train_batch_size",
                path="data.source",
            )


def select_rows(data: DataSection, seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The rows training uses, before prompts are built: shuffled and limited as the recipe says (rows past
    data.limit stay held out), then `keep_rows`; returns them as plain dicts and the count left out by reason."""
    from grpo_cli.recipe.checks import column_fix

    rows = load_rows(data.source, data.config, data.split, data.limit, seed)
    missing = [c for c in (data.prompt_column, data.answer_column) if c and c not in rows.column_names]
    if missing == [data.answer_column] and len(rows) and isinstance(rows[0][data.prompt_column], list):
        missing = []  # conversations: the reference can be each one's closing assistant turn (split_reference)
    if missing:
        key = "data.prompt_column" if data.prompt_column in missing else "data.answer_column"
        raise UserError(
            f"column {missing[0]!r} not in {data.source}; it has: {', '.join(rows.column_names)}"
            + column_fix(missing[0], rows.column_names, key),
            path=key,
        )
    if data.shuffle_seed is not None:
        rows = rows.shuffle(seed=data.shuffle_seed)
    if data.limit is not None and len(rows) > data.limit:
        rows = rows.select(range(data.limit))  # before the rows become Python objects: a hub split may be large
    return keep_rows(rows.to_list(), data)


def keep_rows(rows: list[dict[str, Any]], data: DataSection) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The one row pipeline behind `prepare` and `plain_prompts`: data.limit, short solutions kept
    (data.max_solution_steps), unusable rows left out and counted by reason (`unusable_reason`)."""
    rows = [split_reference(row, data) for row in (rows[: data.limit] if data.limit is not None else rows)]
    typed = [row.get(data.answer_column) for row in rows] if data.answer_column else []
    wrong = next((value for value in typed if isinstance(value, (list, dict))), None)
    if wrong is not None:  # it would reach the verifier as its Python repr
        raise UserError(
            f"`{data.answer_column}` in {data.source} holds {'a list' if isinstance(wrong, list) else 'an object'} "
            f"({str(wrong)[:60]}) where a reference answer is text or a number: write one answer per row",
            path="data.answer_column",
        )
    if data.max_solution_steps is not None:
        if not data.answer_column or data.answer_format != "gsm8k":
            raise UserError(
                "counts the working lines of GSM8K-format answers; it needs data.answer_format: gsm8k "
                "and an answer column",
                path="data.max_solution_steps",
            )
        rows = [r for r in rows if solution_steps(str(r.get(data.answer_column))) <= data.max_solution_steps]
        if not rows:
            raise UserError("no problem has a solution this short; raise it", path="data.max_solution_steps")
    kept, unusable = [], {}
    for row in rows:
        answer = row.get(data.answer_column) if data.answer_column else ""
        why = unusable_reason(row.get(data.prompt_column), answer, data)
        if why:
            unusable[why] = unusable.get(why, 0) + 1
        else:
            kept.append(row)
    if not kept:
        raise UserError(f"no usable rows in {data.source}: {left_out(unusable)}; {_row_fix(data)}", path="data.source")
    return kept, unusable


def _row_fix(data: DataSection) -> str:
    """What each row needs, said for the recipe's answer format."""
    need = f"each row needs a question in `{data.prompt_column}`"
    if not data.answer_column:
        return need
    if data.answer_format == "gsm8k":
        return f"{need} and `#### <number>` in `{data.answer_column}` (other answers: data.answer_format: plain)"
    return f"{need} and its reference answer in `{data.answer_column}` (or set data.answer_column)"


def prepare(data: DataSection, tokenizer=None, seed: int = 0, tools: list | None = None) -> PreparedData:
    """Rows -> {prompt, answer, question}; shuffle, limit, keep short solutions, drop prompts over max_prompt_length
    (measured with the `tools` the template renders into every prompt)."""
    import datasets

    rows, unusable = select_rows(data, seed)
    prepared = datasets.Dataset.from_list([to_example(row, data) for row in rows])
    total = len(prepared)
    lengths = prompt_lengths(tokenizer, prepared["prompt"], tools) if tokenizer is not None else []
    if data.max_prompt_length is not None and lengths:
        keep = [i for i, n in enumerate(lengths) if n <= data.max_prompt_length]
        prepared, lengths = prepared.select(keep), [lengths[i] for i in keep]
    if len(prepared) == 0 and total > 0:
        raise UserError(
            f"no rows left: all {total} prompts are longer than {data.max_prompt_length} tokens; raise it",
            path="data.max_prompt_length",
        )
    return PreparedData(prepared, total, total - len(prepared), unusable, lengths, data.source, data.max_prompt_length)


def to_example(row: dict[str, Any], data: DataSection) -> dict[str, Any]:
    """A training example: the prompt as the model is asked, the question as written, the gold answer rewards get."""
    question = row[data.prompt_column]  # text, or a conversation's turns (unusable_reason checked which)
    example = {"prompt": build_prompt(question, data.system_prompt, data.chat), "question": question}
    if data.answer_column:
        example["answer"] = gold_answer(row[data.answer_column], data.answer_format)
    return example


def left_out(unusable: dict[str, int]) -> str:
    """`3 `question` is empty or not text; 1 without a reference answer in `answer``: the rows left out, by reason."""
    return "; ".join(f"{n} {why}" for why, n in unusable.items())


def unusable_reason(prompt: Any, answer: Any, data: DataSection) -> str | None:
    """Why a row cannot be used (None: it can): it needs a non-empty text question, and, with an answer column, a
    numeric GSM8K gold answer or a non-empty plain one. A conversation needs a user turn and chat prompts."""
    if isinstance(prompt, list) and prompt and all(isinstance(turn, dict) for turn in prompt):
        if not data.chat:
            return f"`{data.prompt_column}` is a conversation; it needs data.chat: true"
        odd = next((t for t in prompt if t.get("role") not in ROLES or not isinstance(t.get("content", ""), str)), None)
        if odd is not None:  # a chat template would fail on it mid-run, or render it as something else
            return f"`{data.prompt_column}` has a turn that is not {'/'.join(ROLES)} with text content"
        if not any(turn.get("role") == "user" and turn.get("content") for turn in prompt):
            return f"`{data.prompt_column}` has no user turn"
    elif not isinstance(prompt, str) or not prompt.strip():
        return f"`{data.prompt_column}` is empty or not text"
    if data.answer_column and (answer is None or not str(answer).strip()):
        return f"without a reference answer in `{data.answer_column}`"
    if data.answer_column and len(str(answer)) > MAX_ANSWER_CHARS:
        return f"`{data.answer_column}` longer than {MAX_ANSWER_CHARS:,} characters"
    if data.answer_column and data.answer_format == "gsm8k" and not has_numeric_gold(str(answer)):
        return f"`{data.answer_column}` has no number after `####`"
    return None
