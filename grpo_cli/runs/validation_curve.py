"""Validation rows in a run's metrics.jsonl (`validation:`): their key names, defined once for the code that writes
them (eval/) and the code that reads them (the console, the report, the model card), and the best step."""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "val/"
SECONDS_KEY = "val/seconds"  # generation and scoring, left out of the training step's step_time_s
# The task protocol's shortcut flag (eval/shortcuts.py): the kinds raised (`one_answer`, `below_baseline`; [] for
# none) and, when raised, the reasons in words.
SHORTCUT_KEY = "val/shortcut"
SHORTCUT_REASON_KEY = "val/shortcut_reason"


def accuracy_key(name: str) -> str:
    """`val/<filter or verifier>/accuracy`: one per name `grpo eval` reports under the protocol."""
    return f"{PREFIX}{name}/accuracy"


def is_validation_row(row: dict) -> bool:
    return any(key.startswith(PREFIX) for key in row)


def training_rows(rows: list[dict]) -> list[dict]:
    """The logged training steps, without the validation rows between them."""
    return [row for row in rows if not is_validation_row(row)]


def accuracy_keys(rows: list[dict]) -> list[str]:
    """The accuracy keys in the order the writer gave them: the protocol's first filter (or verifier) first."""
    keys: dict[str, None] = {}
    for row in rows:
        keys.update((k, None) for k in row if k.startswith(PREFIX) and k.endswith("/accuracy"))
    return list(keys)


@dataclass(frozen=True)
class Best:
    name: str  # the filter or verifier
    step: int  # the earliest step that reached the best accuracy
    accuracy: float
    last_step: int
    last: float
    validations: int


def best_steps(rows: list[dict]) -> list[Best]:
    """For each accuracy key: the best validation (the earliest on a tie) and the last one."""
    out = []
    for key in accuracy_keys(rows):
        points = [(row["step"], row[key]) for row in rows if isinstance(row.get(key), (int, float))]
        if not points:
            continue
        step, accuracy = max(points, key=lambda point: (point[1], -point[0]))
        name = key.removeprefix(PREFIX).removesuffix("/accuracy")
        out.append(Best(name, step, accuracy, points[-1][0], points[-1][1], len(points)))
    return out


def best_line(rows: list[dict]) -> str | None:
    """What the console and the model card say about the validations: the best step per accuracy (the protocol's
    first filter or verifier first), and the last; None for a run without them."""
    bests = best_steps(rows)
    if not bests:
        return None
    problems = next(row.get(f"{PREFIX}problems") for row in reversed(rows) if is_validation_row(row))
    figures = "; ".join(
        f"{b.name} best {b.accuracy:.3f} at step {b.step} (last {b.last:.3f} at step {b.last_step})" for b in bests
    )
    return f"validation on {problems} held-out problems, {bests[0].validations} times: {figures}"


def shortcut_points(rows: list[dict]) -> list[tuple[int, float]]:
    """(step, accuracy of the first filter or verifier) of each validation whose shortcut flag was raised."""
    keys = accuracy_keys(rows)
    return [
        (row["step"], row[keys[0]])
        for row in rows
        if keys and row.get(SHORTCUT_KEY) and isinstance(row.get(keys[0]), (int, float))
    ]


def new_shortcut(row: dict, earlier: list[dict]) -> str | None:
    """The console's line when `row` raises a kind of shortcut flag no `earlier` validation raised; None otherwise."""
    seen = {kind for r in earlier for kind in (r.get(SHORTCUT_KEY) or [])}
    if not set(row.get(SHORTCUT_KEY) or []) - seen:
        return None
    return f"shortcut flagged at step {row['step']}: {row.get(SHORTCUT_REASON_KEY, '')}"
