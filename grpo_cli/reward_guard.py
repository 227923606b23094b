"""Every reward runs behind a guard: TRL receives exactly the list of numbers the reward returned (a generator or a
tuple is turned into that list, never consumed behind TRL's back), and a reward that misbehaves is named in one line.

- raises, returns None, the wrong count, or something that is not a number: `RewardFailure`, which stops the run
  with a checkpoint of the last finished step;
- returns NaN or +-inf for some completions: those become None ("cannot judge", which TRL leaves out of the
  group's reward) and the run warns at every step it happens;
- takes longer than its `timeout_s` (optional, per reward): `RewardFailure`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

from grpo_cli.tools.calls import batch_metrics, transcript
from grpo_cli.tools.guard import time_limit
from rewards.answers import completion_text


class RewardFailure(Exception):
    """A user's reward misbehaved; the message names the reward, the step and what it did."""


class GuardedReward:
    def __init__(
        self,
        func: Callable[..., Any],
        timeout_s: float | None = None,
        warn: Callable[[str], None] = print,
        record: bool = False,
        tool_names: set[str] | None = None,
        label: str | None = None,
    ):
        self.func = func
        self.tool_names = tool_names  # with tools: the recording reward also logs the malformed-call figures
        self.__name__ = getattr(func, "__name__", type(func).__name__)  # TRL's metric key: rewards/<name>/mean
        self.label = label or self.__name__  # as the recipe names it (my_rewards.py:score), for messages
        self.timeout_s = timeout_s
        self.warn = warn
        self.record = record  # keep the latest (prompt, completion, answer, reward) rows for samples.jsonl
        self.latest: list[dict[str, Any]] = []

    def __call__(self, prompts=None, completions=None, completion_ids=None, **columns):
        state = columns.get("trainer_state")
        step = f" at step {state.global_step + 1}" if state is not None else ""  # outside training: no step
        expected = len(completions or [])
        try:
            with time_limit(
                self.timeout_s,
                f"reward `{self.label}` took longer than its timeout_s ({self.timeout_s} s){step}",
                RewardFailure,
            ):
                out = self.func(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns)
                values = self._as_list(out, step)  # inside the limit: a generator computes as it is read
        except RewardFailure:
            raise
        except Exception as exc:
            raise RewardFailure(f"reward `{self.label}` raised{step}: {type(exc).__name__}: {str(exc)[:300]}") from exc
        if len(values) != expected:
            raise RewardFailure(
                f"reward `{self.label}` returned {len(values)} values{step} for "
                f"{expected} completions; return one number (or None) per completion"
            )
        values = self._numbers(values, step)
        if self.record:
            answers = columns.get("answer") or [None] * expected
            shown = transcript if self.tool_names is not None else completion_text  # with tools: calls and results
            self.latest = [
                {"prompt": _last_user_message(p), "completion": shown(c), "answer": a, self.__name__: v}
                for p, c, a, v in zip(prompts or [], completions or [], answers, values)
            ]
            log_metric = columns.get("log_metric")
            if self.tool_names is not None and callable(log_metric):
                for name, value in batch_metrics(completions or [], self.tool_names).items():
                    log_metric(name, value)
        return values

    def _as_list(self, out: Any, step: str) -> list[Any]:
        if out is None:
            raise RewardFailure(
                f"reward `{self.label}` returned None{step} (a missing `return`?); "
                "return a list with one number (or None) per completion"
            )
        if isinstance(out, (str, bytes, dict)):
            raise RewardFailure(
                f"reward `{self.label}` returned a {type(out).__name__}{step}; return "
                "a list with one number (or None) per completion"
            )
        try:
            return list(out)
        except TypeError:
            raise RewardFailure(
                f"reward `{self.label}` returned {type(out).__name__}{step}, not a "
                "list; return one number (or None) per completion"
            ) from None

    def _numbers(self, values: list[Any], step: str) -> list[float | None]:
        out: list[float | None] = []
        nonfinite = 0
        for index, value in enumerate(values):
            if value is None:
                out.append(None)
            elif isinstance(value, numbers.Real):
                number = float(value)
                nonfinite += not math.isfinite(number)
                out.append(number if math.isfinite(number) else None)
            else:
                raise RewardFailure(
                    f"reward `{self.label}` returned {value!r:.60} ({type(value).__name__}) for "
                    f"completion {index}{step}; rewards are numbers (or None)"
                )
        if nonfinite:
            self.warn(
                f"warning: reward `{self.label}` returned NaN or infinity for {nonfinite} of {len(values)} "
                f"completions{step}; they count as not judged (None)"
            )
        return out


def _last_user_message(prompt: Any) -> str:
    if isinstance(prompt, list) and prompt:
        return str(prompt[-1].get("content", ""))
    return str(prompt)
