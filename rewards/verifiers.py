"""Verifiers for answers that are not GSM8K numbers: rewards that check what the answer says, not its form.

Each reward has TRL's signature, pays 1.0 or 0.0 per completion (None without a gold answer) and reads the
completion's final answer the way `correctness` does: inside the last <answer>, else after the last `####`, else
the whole completion. Each rests on a comparison of two strings (`exact_equal`, `normalized_equal`, and
`math_equal` and `math_equal_in_text` in rewards/math_judge.py) that evaluation can use on its own. None of them
evaluates model output as code.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable
from typing import Any

from rewards.answers import answer_text, completion_text
from rewards.math_judge import math_equal, math_equal_in_text

ARTICLES = re.compile(r"\b(a|an|the)\b")


def final_answer(text: str) -> str:
    """The marked answer (<answer>, else `####`), else the whole text, without surrounding whitespace."""
    marked = answer_text(text)
    return (text if marked is None else marked).strip()


def normalize_text(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles (a, an, the), single spaces.
    Punctuation also counts Unicode's (curly quotes, dashes), which SQuAD's ASCII list misses. An answer that is
    nothing but an article keeps it (`A` of a multiple choice is not `The`, nor empty)."""
    text = " ".join("".join(ch for ch in text.lower() if not _is_punctuation(ch)).split())
    return " ".join(ARTICLES.sub(" ", text).split()) or text


def _is_punctuation(ch: str) -> bool:
    return ch in string.punctuation or unicodedata.category(ch).startswith("P")


def exact_equal(answer: str, gold: str) -> bool:
    """The same characters, once surrounding whitespace is dropped (a model's line breaks inside <answer>)."""
    return answer.strip() == gold.strip()


def normalized_equal(answer: str, gold: str) -> bool:
    """Equal after SQuAD's normalisation: `The Eiffel Tower.` matches `eiffel tower`."""
    return normalize_text(answer) == normalize_text(gold)


def exact_match(prompts=None, completions=None, completion_ids=None, answer=None, **kwargs) -> list[float | None]:
    """1.0 when the final answer is the gold answer, character for character (surrounding whitespace aside)."""
    return _judge(completions, answer, lambda text, gold: exact_equal(final_answer(text), gold))


def normalized_match(prompts=None, completions=None, completion_ids=None, answer=None, **kwargs):
    """1.0 when the final answer equals the gold answer up to case, punctuation, articles and spacing."""
    return _judge(completions, answer, lambda text, gold: normalized_equal(final_answer(text), gold))


def math_correctness(prompts=None, completions=None, completion_ids=None, answer=None, **kwargs):
    """1.0 when the final answer is mathematically equal to the gold answer (math-verify: LaTeX or plain, fractions,
    roots, intervals, sets, `\\boxed{}`). Unmarked, math-verify picks the answer from the whole completion itself
    (a `\\boxed{}` first, else the last expression), as TRL's `accuracy_reward` does."""
    return _judge(completions, answer, _math_verdict)


def _math_verdict(text: str, gold: str) -> bool:
    marked = answer_text(text)
    return math_equal_in_text(text, gold) if marked is None else math_equal(marked, gold)


def _judge(completions: Any, answer: Any, equal: Callable[[str, str], bool]) -> list[float | None]:
    texts = [completion_text(c) for c in (completions or [])]
    golds = list(answer) if isinstance(answer, (list, tuple)) else [answer] * len(texts)
    return [
        None if gold is None or not str(gold).strip() else float(equal(text, str(gold)))
        for text, gold in zip(texts, golds)
    ]
