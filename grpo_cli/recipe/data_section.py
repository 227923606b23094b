"""`data:`: where the prompts and reference answers come from and how prompts are built."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grpo_cli.recipe.section import Section

DEFAULT_SYSTEM_PROMPT = "Respond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>"


class DataSection(Section):
    source: str = Field(
        "openai/gsm8k",
        description="Hub dataset name, a local .jsonl/.json/.parquet/.csv file, `generated` (seeded GSM8K-format "
        "arithmetic problems, offline) or `generated:parity` (seeded yes/no questions, test split held out).",
    )
    config: str | None = Field(None, description="Hub dataset configuration (GSM8K: main).")
    split: str = "train"
    prompt_column: str = "question"
    answer_column: str | None = Field("answer", description="Column with the reference answer; null for none.")
    answer_format: Literal["gsm8k", "plain"] = Field(
        "gsm8k", description="gsm8k: the gold answer is the number after `####`; plain: the column as is."
    )
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    answer_marker: Literal["tag", "hashes"] = Field(
        "tag",
        description="How the system prompt asks the model to mark its final answer: `tag` = <answer>...</answer>, "
        "`hashes` = GSM8K's `#### <number>`. `grpo eval` counts a strict-match only for answers marked this way.",
    )
    chat: bool = Field(True, description="Build chat messages (uses the tokenizer's chat template); false: plain text.")
    max_prompt_length: int | None = Field(
        None, ge=1, description="Drop prompts longer than this many tokens (the count dropped is reported)."
    )
    limit: int | None = Field(None, ge=1, description="Use at most this many rows (for `generated`: how many to make).")
    shuffle_seed: int | None = Field(None, description="Shuffle rows with this seed before `limit` is applied.")
    max_solution_steps: int | None = Field(
        None,
        ge=1,
        description="Keep only problems whose reference solution has at most this many lines of working "
        "before `####` (GSM8K writes one step per line): an easier curriculum for small models. Applied after `limit`, "
        "so rows past the limit stay held out.",
    )
