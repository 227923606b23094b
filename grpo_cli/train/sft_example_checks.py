"""The SFT stage's examples checked before training: those whose prompt leaves room under sft.max_length, the
validation questions among them, and an earlier attempt's examples read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.recipe.sft_section import SftSection
from grpo_cli.train.sft_examples import SftExamples


def read_examples(path: Path) -> list[dict]:
    """The examples an earlier attempt wrote; a cut or edited file is one line naming it, not a traceback."""
    from grpo_cli.files import read_jsonl

    lines = read_jsonl(path, required=("prompt", "completion"))
    if lines.skipped:
        raise UserError(
            f"{path} line {lines.skipped[0]} is cut or is not an example (an interrupted write?): delete {path.parent} "
            "to build the SFT stage again, or train into another output_dir",
            path="sft",
        )
    return lines.rows


def checked_examples(section: SftSection, examples: SftExamples, tokenizer) -> tuple[SftExamples, list[str]]:
    """The examples the SFT stage can learn from, and what the console should say about them."""
    examples, cut = fit_max_length(section.max_length, examples, tokenizer)
    return examples, [cut] if cut else []


def validation_questions_in(examples: SftExamples, questions: list[Any]) -> int:
    """How many examples' prompts hold a validation question's text (a chat prompt: its user turns)."""
    texts = [q.strip() for q in questions if isinstance(q, str) and q.strip()]
    count = 0
    for row in examples.rows:
        prompt = row["prompt"]
        if isinstance(prompt, list):
            prompt = "\n".join(str(m.get("content", "")) for m in prompt if m.get("role") == "user")
        count += any(text in prompt for text in texts)
    return count


def fit_max_length(limit: int | None, examples: SftExamples, tokenizer) -> tuple[SftExamples, str | None]:
    """Drop the examples whose prompt alone fills sft.max_length (truncation would leave no completion token
    to learn from; TRL fails when it leaves none at all); refuse when that is every one."""
    if limit is None:
        return examples, None
    lengths = [_prompt_tokens(tokenizer, row) for row in examples.rows]
    if any(n is None for n in lengths):
        return examples, None  # a template this count cannot render: TRL's own truncation decides
    kept = [row for row, n in zip(examples.rows, lengths) if n < limit]
    if not kept:
        raise UserError(
            f"every SFT prompt is at least sft.max_length={limit} tokens (the shortest is {min(lengths)}), "
            f"so no completion token would be trained on; set sft.max_length above {max(lengths)}",
            path="sft.max_length",
        )
    if len(kept) == len(examples.rows):
        return examples, None
    note = (
        f"sft: {len(examples.rows) - len(kept)} of {len(examples.rows)} examples dropped: their prompt alone "
        f"fills sft.max_length={limit} tokens (the longest is {max(lengths)})"
    )
    return SftExamples(kept, {**examples.source, "cut_by_max_length": len(examples.rows) - len(kept)}), note


def _prompt_tokens(tokenizer, row: dict) -> int | None:
    prompt = row["prompt"]
    try:
        if isinstance(prompt, str):
            return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        tools = json.loads(row["tools"]) if isinstance(row.get("tools"), str) else row.get("tools")
        ids = tokenizer.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)
    except Exception:  # a template error here is TRL's to report, with its own message, as before
        return None
