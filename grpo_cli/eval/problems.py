"""The problems an evaluation scores, in the split's order, and the prompts each protocol shows the model."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_cli.chat_templates import render_prompt
from grpo_cli.data import build_prompt, load_rows
from grpo_cli.errors import UserError
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.eval_section import EvalSection
from grpo_cli.recipe.sources import GENERATED
from rewards.gsm8k_task import gsm8k_gold, has_numeric_gold

# Seeds for `generated` data: evaluation problems must not be the training problems, which data.prepare draws with
# the recipe's training.seed (trainer.py).
GENERATED_TEST_SEED, GENERATED_FEWSHOT_SEED = 7919, 0


@dataclass(frozen=True)
class Problem:
    index: int  # position in the split: the identity used for resuming and for pairing base and trained
    question: Any  # as written: text, or a conversation's turns (a chat row's `messages`, grpo_cli/data.py)
    answer: str  # the full reference text (lm-eval compares against it after its normalisation)
    gold: str  # the number after ####


def load_problems(ev: EvalSection) -> tuple[list[Problem], int]:
    """The first `limit` problems of the split, in the split's order (so every model sees the same ones), and how
    many of them were left out because they cannot be scored (no question, or no number after `####`)."""
    rows = load_rows(ev.source, ev.config, ev.split, ev.limit, seed=GENERATED_TEST_SEED, key="eval.source (--data)")
    missing = [c for c in ("question", "answer") if c not in rows.column_names]
    if missing:
        raise UserError(
            f"evaluation data needs GSM8K's `question` and `answer` fields; it has: {', '.join(rows.column_names)}",
            path="eval.source",
        )
    count = len(rows) if ev.limit is None else min(ev.limit, len(rows))
    problems = [
        Problem(i, str(r["question"]), str(r["answer"]), gsm8k_gold(str(r["answer"])))
        for i, r in enumerate(rows.select(range(count)))
        if isinstance(r["question"], str)
        and r["question"].strip()
        and r["answer"] is not None
        and has_numeric_gold(str(r["answer"]))
    ]
    if not problems:
        raise UserError(
            f"none of the {count} problems can be scored (each needs a question and a number after "
            "`####` in its answer)",
            path="eval.source",
        )
    return problems, count - len(problems)


def fewshot_pool(ev: EvalSection) -> list[dict[str, Any]]:
    """lm-eval draws few-shot examples from GSM8K's train split."""
    source = ev.fewshot_source
    if source is None:
        local = Path(ev.source).expanduser()
        if ev.source == GENERATED or not local.is_file():
            source = ev.source
        else:
            sibling = local.with_name(re.sub(r"test", "train", local.name))
            if sibling == local or not sibling.is_file():
                raise UserError(
                    f"the lm-eval protocol needs few-shot examples: no train file beside {local}; "
                    "set eval.fewshot_source=path/to/train.jsonl (or eval.num_fewshot=0)",
                    path="eval.fewshot_source",
                )
            source = str(sibling)
    rows = load_rows(
        source,
        ev.config,
        "train",
        1000 if source == GENERATED else None,
        seed=GENERATED_FEWSHOT_SEED,
        key="eval.fewshot_source",
    )
    return [dict(r) for r in rows]


def lm_eval_prompts(problems: list[Problem], pool: list[dict[str, Any]], num_fewshot: int, seed: int) -> list[str]:
    """lm-eval's context for each problem. Its sampler is one Random(seed) drawn from once per document in split
    order, so problem i's examples depend on the draws for problems 0..i-1: every index draws, scored or not."""
    rnd = random.Random(seed)
    wanted = {p.index: p for p in problems}
    by_index = {}
    for index in range(max(wanted, default=-1) + 1):
        shots = rnd.sample(pool, num_fewshot) if num_fewshot else []
        if index in wanted:
            context = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
            by_index[index] = f"{context}Question: {wanted[index].question}\nAnswer:"
    return [by_index[p.index] for p in problems]


def chat_prompts(problems: list[Problem], data: DataSection, tokenizer) -> list[str]:
    """The training prompt: the data section's system prompt, through the chat template (or plain text)."""
    return [render_prompt(tokenizer, build_prompt(p.question, data.system_prompt, data.chat)) for p in problems]
