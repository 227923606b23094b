"""The generated tasks a recipe names as `data.source: generated:<task>`: seeded problems made on the spot (no
download) with plain answers for the string verifiers (`normalized_match`, `exact_match`), and a train split and a
test split that share no problem. (`generated` alone is the GSM8K-format arithmetic of data.py.)

Each problem is drawn from a fixed space; a problem's own hash puts it in one split for good, so the held-out
problems are unseen at any seed and any `limit`, not merely drawn with another seed."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

from grpo_cli.errors import UserError

GENERATED_TASK_PREFIX = "generated:"
SPLITS = ("train", "test")
HELD_OUT_ONE_IN = 5  # a fifth of each task's problems form its test split


def _parity_space() -> list[tuple[int]]:
    return [(n,) for n in range(1, 10_000)]


def _parity_row(problem: tuple[int]) -> dict[str, str]:
    (n,) = problem
    return {"question": f"Is {n} an even number? Answer yes or no.", "answer": "yes" if n % 2 == 0 else "no"}


# name -> (the task's problem space, a problem -> its row, what it is in one line). A yes/no question because the
# demo model answers those bare, as a string verifier needs; a sorted list, the next letter and a last digit it
# answers in sentences (benchmarks/string_task_probe.txt).
TASKS: dict[str, tuple[Callable[[], list], Callable[..., dict[str, str]], str]] = {
    "parity": (
        _parity_space,
        _parity_row,
        "`Is 47 an even number? Answer yes or no.` -> `no`; the numbers 1..9,999, yes and no equally often",
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
        f"{GENERATED_TASK_PREFIX}{t} ({about})" for t, (_, _, about) in TASKS.items()
    )


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
    space, row, _ = TASKS[task_name(source)]
    pool = [p for p in space() if held_out(p) == (split == "test")]
    return [row(p) for p in random.Random(seed).sample(pool, min(count, len(pool)))]
