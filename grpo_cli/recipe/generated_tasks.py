"""The generated tasks a recipe names as `data.source: generated:<task>`: seeded problems made on the spot (no
download), and a train split and a test split that share no problem. A task answers either in words, for the string
verifiers (`normalized_match`, `exact_match`; `data.answer_format: plain`), or as GSM8K does, a worked solution whose
arithmetic is annotated `<<expression=result>>` and ends in `#### <number>` (`data.answer_format: gsm8k`): the
numeric rewards score it and an SFT stage turns the annotations into calculator calls (tools/traces.py). (`generated`
alone is the GSM8K-format word problems of data.py.)

Each problem is drawn from a fixed space; a problem's own hash puts it in one split for good, so the held-out
problems are unseen at any seed and any `limit`, not merely drawn with another seed."""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from grpo_cli.errors import UserError

GENERATED_TASK_PREFIX = "generated:"
SPLITS = ("train", "test")
HELD_OUT_ONE_IN = 5  # a fifth of each task's problems form its test split


def _parity_space() -> list[tuple[int]]:
    return [(n,) for n in range(1, 10_000)]


def _parity_row(problem: tuple[int]) -> dict[str, str]:
    (n,) = problem
    return {"question": f"Is {n} an even number? Answer yes or no.", "answer": "yes" if n % 2 == 0 else "no"}


def _products_space() -> list[tuple[int, int]]:
    return [(a, b) for a in range(100, 1000) for b in range(100, 1000)]


def _products_row(problem: tuple[int, int]) -> dict[str, str]:
    a, b = problem
    return {"question": f"What is {a} times {b}?", "answer": f"{a} * {b} = <<{a}*{b}={a * b}>>{a * b}\n#### {a * b}"}


def _largest_space() -> list[tuple[int, int, int]]:
    return list(itertools.permutations(range(10, 100), 3))


def _largest_row(problem: tuple[int, int, int]) -> dict[str, str]:
    return {
        "question": f"Which is the largest of these numbers: {', '.join(map(str, problem))}?",
        "answer": str(max(problem)),
    }


@dataclass(frozen=True)
class GeneratedTask:
    space: Callable[[], list]  # every problem of the task
    row: Callable[..., dict[str, str]]  # a problem -> its `question` and `answer`
    about: str  # what it is, in one line
    answer_format: str  # `plain` (the answer is words) or `gsm8k` (a worked solution, then `#### <number>`)


# A yes/no question because the demo model answers those bare, as a string verifier needs; a sorted list, the next
# letter and a last digit it answers in sentences (benchmarks/string_task_probe.txt). The largest of three numbers
# because it has many distinct answers (no one answer is a shortcut) and the demo model gets some right (6% greedy,
# 12% of samples at temperature 1) where it gets no sum and no word in capitals (the same file). Products of two
# 3-digit numbers because a small model cannot do them in its head and a calculator does them exactly: a task where
# calling the tool is the whole skill.
TASKS: dict[str, GeneratedTask] = {
    "parity": GeneratedTask(
        _parity_space,
        _parity_row,
        "`Is 47 an even number? Answer yes or no.` -> `no`; the numbers 1..9,999, yes and no equally often",
        "plain",
    ),
    "largest": GeneratedTask(
        _largest_space,
        _largest_row,
        "`Which is the largest of these numbers: 37, 52, 18?` -> `52`; three distinct numbers from 10 to 99, in order",
        "plain",
    ),
    "products": GeneratedTask(
        _products_space,
        _products_row,
        "`What is 347 times 829?` -> `#### 287663`, the worked step annotated for the calculator; 100..999 squared",
        "gsm8k",
    ),
}


def task_name(source: str) -> str | None:
    """`parity` for `generated:parity`; None for any other source."""
    return source[len(GENERATED_TASK_PREFIX) :] if source.startswith(GENERATED_TASK_PREFIX) else None


def unknown_task(source: str) -> str | None:
    """Why a `generated:<task>` source names no task (None: it does, or it is not such a source)."""
    name = task_name(source)
    if name is None or name in TASKS:
        return None
    return f"no generated task `{name}`; there are: " + ", ".join(
        f"{GENERATED_TASK_PREFIX}{t} ({task.about})" for t, task in TASKS.items()
    )


def answer_format(source: str) -> str | None:
    """How a `generated:<task>` source writes its answers (`plain` or `gsm8k`); None for another source."""
    task = TASKS.get(task_name(source) or "")
    return task.answer_format if task else None


def held_out(problem: tuple) -> bool:
    """Whether a problem belongs to the test split: its hash decides, whatever the seed or the count drawn."""
    return zlib.crc32(repr(problem).encode()) % HELD_OUT_ONE_IN == 0


def generate_task(source: str, split: str, count: int, seed: int = 0, key: str = "data.source") -> list[dict]:
    """`count` distinct problems of the split (all of them when it holds fewer), drawn in a seeded order, as rows
    with `question` and `answer`."""
    problem = unknown_task(source)
    if problem:
        raise UserError(problem, path=key)
    if split not in SPLITS:
        raise UserError(f"{source} has the splits {' and '.join(SPLITS)}, not {split!r}", path=key)
    task = TASKS[task_name(source)]
    pool = [p for p in task.space() if held_out(p) == (split == "test")]
    return [task.row(p) for p in random.Random(seed).sample(pool, min(count, len(pool)))]
