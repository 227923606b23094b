"""Trivial rules: answers a one-line rule computes from the numbers of a question, without solving anything.

On the demo's generated problems, always answering the sum of the question's numbers is right on a third of them.
A trained model's accuracy means little until it clears the best of these; the audit reports them before training
and `grpo eval`'s shortcut report beside the majority baseline. Pure functions over text, no model.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rewards.answers import NUMBER, normalize_number

MAX_NUMBERS = 50  # a question with more numbers than this is a table, not a word problem: no rule is tried
MAX_DIGITS = 30  # longer numbers are left out of the rules (a product of them would be enormous)


def question_numbers(question: str) -> list[float]:
    """The numbers of a question as written (`$1,200`, `3.5`, `-4`), in order; none past MAX_NUMBERS."""
    found = NUMBER.findall(question)[: MAX_NUMBERS + 1]
    if len(found) > MAX_NUMBERS:
        return []
    out = []
    for text in found:
        plain = normalize_number(text)
        if len(plain) <= MAX_DIGITS:
            out.append(float(plain))
    return out


def _difference(numbers: list[float]) -> float:
    return max(numbers) - min(numbers)


RULES: dict[str, Callable[[list[float]], float]] = {
    "first number": lambda n: n[0],
    "last number": lambda n: n[-1],
    "largest number": max,
    "sum": math.fsum,
    "difference": _difference,  # the largest less the smallest: `a - b` of a two-number problem, never negative
    "product": math.prod,
}
SAID = {  # each rule in a sentence
    "first number": "the prompt's first number",
    "last number": "the prompt's last number",
    "largest number": "the prompt's largest number",
    "sum": "the sum of the prompt's numbers",
    "difference": "the largest of the prompt's numbers less the smallest",
    "product": "the product of the prompt's numbers",
}


def as_answer(value: float) -> str | None:
    """A rule's number as a model would write it: `12`, `2.5`; None when it is not a finite number."""
    if not math.isfinite(value) or abs(value) >= 1e15:
        return None
    if value == int(value):
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def rule_answers(question: str) -> dict[str, str | None]:
    """Each rule's answer to a question (None: no number to apply it to)."""
    numbers = question_numbers(question)
    return {name: as_answer(rule(numbers)) if numbers else None for name, rule in RULES.items()}
