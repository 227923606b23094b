"""The replies the audit hands the recipe's rewards: known-good (the reference answer, as a model would write it),
known-bad (wrong on purpose: empty, the prompt echoed back, several answers at once, padding, malformed numbers) and
strategies (a constant answer, a trivial rule of the question's numbers). Each is built per training example from
its prompt and reference answer, in the format the recipe's data section asks for. No model, no torch.

A probe can hold several forms per example; `pick` says which counts. Known-good forms and strategies count at
their best (`max`: a policy writes the form that pays). A hedge lists the right answer first in one form and last in
the other and counts at its worst (`min`): a reward that pays it wherever the right answer stands pays the hedge
itself, not a final answer that happens to be right.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from grpo_cli.audit.rules import RULES, SAID, as_answer, rule_answers
from rewards.answers import NUMBER, numbers_equal, to_number
from rewards.verifiers import normalize_text, normalized_equal

PADDING_CHARS = 10_000
HEDGE_ANSWERS = 20  # the long hedge: the right answer among this many
NESTING = 50  # \boxed{} inside \boxed{}, this deep
FULLWIDTH = str.maketrans("0123456789", "０１２３４５６７８９")
CONSTANTS = ("0", "1", "yes", "no")


@dataclass
class Probe:
    name: str  # as the table shows it
    kind: str  # good, bad or strategy
    why: str  # what it is, for a finding's line: "an echoed prompt"
    forms: list[list[str]]  # per example: the replies tried (none: not built for that example)
    pick: str = "max"  # per example, the form that counts: max or min (see the module docstring)
    category: str = ""  # which fix a finding on it gets: silent, echo, hedge, hostile, constant, rule, variant
    right: list[bool] | None = None  # a strategy: per example, whether its answer is the reference


def answer_forms(answer: str, data) -> list[str]:
    """A reference answer as a model would write it: bare, and marked as data.answer_marker asks (inside a
    <reasoning> block's wake when the system prompt asks for one)."""
    if data.answer_marker == "hashes":
        return [answer, f"#### {answer}"]
    marked = f"<answer>\n{answer}\n</answer>"
    reasoning = "<reasoning>" in (data.system_prompt or "")
    return [answer, marked] + ([f"<reasoning>\nThe answer follows.\n</reasoning>\n{marked}"] if reasoning else [])


def marked(answer: str, data) -> str:
    """The answer in the recipe's format (the last of `answer_forms`)."""
    return answer_forms(answer, data)[-1]


def question_text(question: Any) -> str:
    """The question as the user asked it; of a conversation, the last user turn."""
    if isinstance(question, list):
        users = [t.get("content", "") for t in question if isinstance(t, dict) and t.get("role") == "user"]
        return str(users[-1]) if users else ""
    return str(question)


def build_probes(examples: list[dict[str, Any]], solutions: list[str | None], data) -> list[Probe]:
    """Every probe for `examples` (prompt, question, answer, as training prepares them); `solutions`: each
    example's worked reference solution where the data has one."""
    answers = [str(e.get("answer") or "") for e in examples]
    questions = [question_text(e.get("question", "")) for e in examples]
    keys = [normalize_text(a) if a else "" for a in answers]  # once: a long answer is not normalised per example
    pool: dict[str, str] = {}  # each distinct reference -> its first spelling
    for key, answer in zip(keys, answers):
        if key:
            pool.setdefault(key, answer)
    return [
        *_good(answers, solutions, data),
        *_bad(answers, questions, pool, data),
        *_strategies(answers, Counter(k for k in keys if k), pool, questions, data),
    ]


def _good(answers: list[str], solutions: list[str | None], data) -> list[Probe]:
    numeric = [to_number(a) is not None for a in answers]
    probes = [
        Probe("reference", "good", "the reference answer", [answer_forms(a, data) if a else [] for a in answers]),
        Probe(
            "reference solution",
            "good",
            "the reference solution",
            [[s] if s and s.strip() != a else [] for s, a in zip(solutions, answers)],
        ),
        Probe(
            "reference + period",
            "good",
            "the reference with a period",
            _each(answers, data, lambda a: a + "."),
            category="variant",
        ),
        Probe(
            "reference as $1,000",
            "good",
            "the reference with $ and commas",
            _each(answers, data, _money, numeric),
            category="variant",
        ),
        Probe(
            "reference as 1000.0",
            "good",
            "the reference with decimals",
            _each(answers, data, _decimal, numeric),
            category="variant",
        ),
    ]
    return [p for p in probes if any(p.forms)]


def _bad(answers: list[str], questions: list[str], pool: dict[str, str], data) -> list[Probe]:
    wrongs = [_wrong_answers(a, pool, HEDGE_ANSWERS - 1) for a in answers]
    padding = ("Let me think about this step by step. " * (PADDING_CHARS // 38 + 1))[:PADDING_CHARS]
    nested = "\\boxed{" * NESTING + "{}" + "}" * NESTING

    def every(text: str) -> list[list[str]]:  # the same reply to every prompt
        return [[text] for _ in answers]

    def hedged(write) -> list[list[str]]:  # the right answer among wrong ones, as `write` lists them
        return [write(a, w, data) for a, w in zip(answers, wrongs)]

    table = [  # name, what it is, the replies per example, the fix's category, which form counts
        ("empty", "an empty reply", every(""), "silent", "max"),
        ("whitespace", "a blank reply", every(" \n\t "), "silent", "max"),
        ("format, no answer", "the format with no answer", every(marked("", data)), "silent", "max"),
        ("padding", "10,000 characters of padding", every(padding), "silent", "max"),
        ("wrong answer", "a wrong answer", [[marked(w[0], data)] if w else [] for w in wrongs], "wrong", "max"),
        ("echo", "the prompt echoed", [[q] for q in questions], "echo", "max"),
        ("prompt's numbers", "every number of the prompt", [_numbers_of(q) for q in questions], "echo", "max"),
        ("two answers", "two answers at once", hedged(_pair), "hedge", "min"),
        ("one per line", "three answers, one per line", hedged(_lines), "hedge", "min"),
        ("twenty answers", "a list of twenty answers", hedged(_listed), "hedge", "max"),
        ("unicode digits", "a wrong number in Unicode digits", [_fullwidth(w, data) for w in wrongs], "hostile", "max"),
        ("nested \\boxed{}", "deeply nested \\boxed{}", every(marked(nested, data)), "hostile", "max"),
        ("1,000 digits", "a 1,000-digit number", every(marked("9" * 1000, data)), "hostile", "max"),
        ("nan", "`nan`", every(marked("nan", data)), "hostile", "max"),
        ("inf", "`inf`", every(marked("inf", data)), "hostile", "max"),
    ]
    probes = [Probe(name, "bad", why, forms, pick, category) for name, why, forms, category, pick in table]
    return [p for p in probes if any(p.forms)]


def _strategies(answers: list[str], counts: Counter, pool: dict[str, str], questions: list[str], data) -> list[Probe]:
    commonest = pool[counts.most_common(1)[0][0]] if counts else None
    constants = [commonest] if commonest else []
    constants += [c for c in CONSTANTS if all(normalize_text(c) != normalize_text(k) for k in constants)]
    probes = [
        _strategy(
            f"always `{c}`" + (" (commonest)" if c == commonest else ""),
            f"the constant answer `{c}`",
            [c] * len(answers),
            answers,
            data,
            "constant",
        )
        for c in constants
    ]
    per_question = [rule_answers(q) for q in questions]
    for rule in RULES:
        given = [r[rule] for r in per_question]
        probes.append(_strategy(f"rule: {rule}", SAID[rule], given, answers, data, "rule"))
    return [p for p in probes if any(p.forms)]


def _strategy(name: str, why: str, given: list[str | None], answers: list[str], data, category: str) -> Probe:
    """A strategy's answer per example, bare and marked, and whether it is the reference."""
    forms = [answer_forms(g, data) if g is not None and a else [] for g, a in zip(given, answers)]
    right = [g is not None and same_answer(g, a) for g, a in zip(given, answers)]
    return Probe(name, "strategy", why, forms, category=category, right=right)


def same_answer(given: str, reference: str) -> bool:
    """Equal as numbers when both are (`1.5` is not `15`), else after SQuAD's normalisation."""
    if to_number(given) is not None and to_number(reference) is not None:
        return numbers_equal(given, reference)
    return normalized_equal(given, reference)


def _each(answers: list[str], data, change, only: list[bool] | None = None) -> list[list[str]]:
    """The reference changed by `change`, bare and marked, for the examples `only` allows (default: all)."""
    return [
        answer_forms(change(a), data) if a and (only is None or only[i]) and change(a) != a else []
        for i, a in enumerate(answers)
    ]


def _money(answer: str) -> str:
    value = to_number(answer)
    sign = "-" if value < 0 else ""
    whole = f"{abs(value):,.0f}" if value == int(value) else f"{abs(value):,.2f}"
    return f"{sign}${whole}"


def _decimal(answer: str) -> str:
    value = to_number(answer)
    return f"{value:.1f}" if value == int(value) else f"{value}0"


def _wrong_answers(answer: str, pool: dict[str, str], count: int) -> list[str]:
    """`count` answers that are not `answer`: its neighbours for a number, else other references of the data."""
    value = to_number(answer)
    if value is not None:
        steps = [k for n in range(1, count + 1) for k in (n, -n)][:count]
        return [w for w in (as_answer(value + k) for k in steps) if w is not None]
    if not answer:
        return []
    key = normalize_text(answer)
    return [a for k, a in pool.items() if k != key][:count]


def _pair(answer: str, wrongs: list[str], data) -> list[str]:
    """The right answer and a wrong one, in both orders."""
    if not wrongs:
        return []
    return [marked(f"{answer} or {wrongs[0]}", data), marked(f"{wrongs[0]} or {answer}", data)]


def _lines(answer: str, wrongs: list[str], data) -> list[str]:
    if len(wrongs) < 2:
        return []
    three = [answer, wrongs[0], wrongs[1]]
    return [marked("\n".join(three), data), marked("\n".join(reversed(three)), data)]


def _listed(answer: str, wrongs: list[str], data) -> list[str]:
    """The right answer in the middle of the list, neither first nor last."""
    if len(wrongs) < 2:
        return []
    middle = len(wrongs) // 2
    return [marked(", ".join(wrongs[:middle] + [answer] + wrongs[middle:]), data)]


def _numbers_of(question: str) -> list[str]:
    return [", ".join(NUMBER.findall(question))] if NUMBER.search(question) else []


def _fullwidth(wrongs: list[str], data) -> list[str]:
    """A wrong number written in Unicode's fullwidth digits, marked."""
    if not wrongs or to_number(wrongs[0]) is None:
        return []
    return [marked(wrongs[0].translate(FULLWIDTH), data)]
