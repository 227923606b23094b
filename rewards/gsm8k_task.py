"""Everything this tool knows about GSM8K, in one place: the gold answer of a worked solution, which rows can be
scored, the offline generated problems in GSM8K's format, lm-evaluation-harness's `gsm8k` task (its filters and
exact match), and how a completion is scored under each evaluation protocol. Data preparation, the rewards and
`grpo eval` all use this module. Never evaluates model output as code.
"""

from __future__ import annotations

import random
import re
from typing import Any

from rewards.answers import extract_answer, marked_answer, normalize_number, numbers_equal, to_number

FILTERS = ("strict-match", "flexible-extract")


def gsm8k_gold(answer: str) -> str:
    """GSM8K reference solutions end in `#### 1,234`; the gold answer is that number without commas."""
    return normalize_number(answer.split("####")[-1])


def has_numeric_gold(answer: str) -> bool:
    """The usable-row rule: a row can be scored when its solution ends in a number after `####`."""
    return to_number(gsm8k_gold(answer)) is not None


def solution_steps(answer: str) -> int:
    """Lines of working before GSM8K's `#### N` line: a proxy for how hard the problem is."""
    working = answer.split("####", 1)[0].strip()
    return len(working.splitlines()) if working else 0


# Templates for one-step arithmetic word problems in GSM8K's format (question, worked answer ending `#### N`).
_NAMES = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam"]
_ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "cookies", "stamps", "shells", "cards", "coins"]
_TEMPLATES = {
    "+": (
        "{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?",
        "{name} has {a} + {b} = <<{a}+{b}={r}>>{r} {item}.",
    ),
    "-": (
        "{name} has {a} {item} and gives away {b} of them. How many {item} does {name} have left?",
        "{name} has {a} - {b} = <<{a}-{b}={r}>>{r} {item} left.",
    ),
    "*": (
        "{name} buys {a} boxes with {b} {item} in each box. How many {item} does {name} buy?",
        "{name} buys {a} * {b} = <<{a}*{b}={r}>>{r} {item}.",
    ),
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


# ---------------------------------------------------------------- lm-evaluation-harness `gsm8k` task, exactly
# Copied from lm_eval/tasks/gsm8k/gsm8k.yaml (lm-eval 0.4.13): the two filters, then exact_match with
# regexes_to_ignore and ignore_case applied to both prediction and reference. Comparison is on strings, as
# lm-eval does it, so "18.0" does not match "18" under this protocol.
LM_EVAL_FALLBACK = "[invalid]"
LM_EVAL_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
LM_EVAL_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
LM_EVAL_IGNORE = (",", r"\$", r"(?s).*#### ", r"\.$")


def regex_filter(text: str, pattern: re.Pattern[str], group_select: int = 0) -> str:
    """lm-eval's RegexFilter followed by take_first: one match (or the fallback) per response."""
    found = pattern.findall(text)
    if not found:
        return LM_EVAL_FALLBACK
    match = found[group_select]
    if isinstance(match, tuple):
        groups = [g for g in match if g]
        match = groups[0] if groups else LM_EVAL_FALLBACK
    return match.strip()


def lm_eval_normalize(text: str) -> str:
    for pattern in LM_EVAL_IGNORE:
        text = re.sub(pattern, "", text)
    return text.lower()


def lm_eval_exact_match(prediction: str, reference: str) -> bool:
    """`reference` is the whole GSM8K answer text; its worked solution is cut away by `(?s).*#### `."""
    return lm_eval_normalize(prediction) == lm_eval_normalize(reference)


def score_completion(protocol: str, completion: str, answer: str, gold: str, marker: str = "tag") -> dict[str, Any]:
    """Extracted answers per filter, whether each is correct, and whether the answer format was followed.

    `answer` is the whole reference solution (lm-eval compares against it), `gold` its number; `marker` (chat
    protocol): how the recipe's system prompt asked the model to mark its answer."""
    if protocol == "lm-eval":
        filtered = {
            "strict-match": regex_filter(completion, LM_EVAL_STRICT),
            "flexible-extract": regex_filter(completion, LM_EVAL_FLEXIBLE, group_select=-1),
        }
        correct = {name: lm_eval_exact_match(value, answer) for name, value in filtered.items()}
        return {"extracted": filtered, "correct": correct, "formatted": filtered["strict-match"] != LM_EVAL_FALLBACK}
    extracted = {"strict-match": marked_answer(completion, marker), "flexible-extract": extract_answer(completion)}
    correct = {name: numbers_equal(value, gold) for name, value in extracted.items()}
    return {"extracted": extracted, "correct": correct, "formatted": extracted["strict-match"] is not None}
