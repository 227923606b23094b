"""The health watch: failure signatures of a GRPO run read from its per-step figures (what TRL logs and grpo adds),
by the same rules during a run (train/health_callback.py feeds each logged step) and afterwards (`grpo report` on a
run's metrics.jsonl or a plain TRL run's trainer_state.json). Pure: no torch, no files.

A signature sounds when its condition starts to hold, once while it lasts, again after it has cleared. Thresholds
come from the recipe's `training.health:` section; docs/health.md lists each one with its fix."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from statistics import fmean, median

from grpo_cli.recipe.health_section import HealthSection
from grpo_cli.runs.health_signatures import SIGNATURES
from grpo_cli.runs.validation_curve import SHORTCUT_KEY, SHORTCUT_REASON_KEY, accuracy_keys, is_validation_row


@dataclass(frozen=True)
class Alarm:
    signature: str
    step: int
    detail: str  # the figures that set it off

    @property
    def kind(self) -> str:
        return SIGNATURES[self.signature].kind

    def line(self) -> str:
        s = SIGNATURES[self.signature]
        return f"health: {s.name} at step {self.step}: {self.detail}: {s.meaning}. Try: {s.fix}"

    def as_dict(self) -> dict:
        return {"signature": self.signature, "kind": self.kind, "step": self.step, "detail": self.detail}


class HealthWatch:
    """Reads a run's records one at a time (training steps and validation rows, in the order they were logged) and
    returns the alarms that start with each. `groups_per_step` turns grpo's flat-group count into a share;
    `weights` (reward name -> weight) tells which reward the recipe ranks first."""

    def __init__(
        self,
        settings: HealthSection | None = None,
        groups_per_step: int | None = None,
        weights: dict[str, float] | None = None,
    ):
        self.settings = settings or HealthSection()
        self.groups_per_step = groups_per_step
        self.weights = weights or {}
        self.steps: list[dict] = []
        self.validations: list[dict] = []
        self.active: set[str] = set()
        self.alarms: list[Alarm] = []

    def observe(self, record: dict) -> list[Alarm]:
        if is_validation_row(record):
            self.validations.append(record)
            checks = VALIDATION_CHECKS  # the others read training steps, which a validation row does not change
        elif "loss" in record or "reward" in record:
            self.steps.append(record)
            checks = tuple(CHECKS)
        else:  # an SFT stage's or an evaluation's row
            return []
        step = int(record.get("step") or len(self.steps))
        started = []
        for name in checks:
            check = CHECKS[name]
            detail = check(self)
            if detail is None:
                self.active.discard(name)
            elif name not in self.active:
                self.active.add(name)
                started.append(Alarm(name, step, detail))
        self.alarms.extend(started)
        return started


def diagnose(rows: Iterable[dict], **watch_args) -> list[Alarm]:
    """Every alarm of a finished run, from its records in logged order."""
    watch = HealthWatch(**watch_args)
    for row in rows:
        watch.observe(row)
    return watch.alarms


def _series(watch: HealthWatch, key: str) -> list[float]:
    """The key's finite values over the steps that logged it."""
    return [float(r[key]) for r in watch.steps if _finite(r.get(key))]


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _scale(watch: HealthWatch, start: float) -> float:
    """What a reward change is measured against: its starting size, or its typical spread when it starts near 0."""
    spreads = _series(watch, "reward_std")
    return max(abs(start), median(spreads) if spreads else 0.0, 1e-9)


def _nan(watch: HealthWatch) -> str | None:
    last = watch.steps[-1]
    # metrics.jsonl writes a non-finite figure as null; trainer_state.json keeps NaN
    bad = [key for key in ("loss", "grad_norm") if key in last and not _finite(last[key])]
    return f"{' and '.join(bad)} not finite" if bad else None


def _flat_share(watch: HealthWatch, record: dict) -> float | None:
    flat = record.get("zero_variance/groups_flat")
    if _finite(flat) and watch.groups_per_step:
        return flat / watch.groups_per_step
    share = record.get("frac_reward_zero_std")
    return float(share) if _finite(share) else None


def _no_signal(watch: HealthWatch) -> str | None:
    recent = [_flat_share(watch, r) for r in watch.steps[-watch.settings.window :]]
    if len(recent) < watch.settings.window or any(s is None or s < watch.settings.flat_share for s in recent):
        return None
    return f"{fmean(recent):.0%} of groups flat over {len(recent)} steps"


def _dropped(watch: HealthWatch, key: str, share: float) -> str | None:
    values, n = _series(watch, key), watch.settings.window
    if len(values) < 2 * n or fmean(values[:n]) <= 0:
        return None
    start, now = fmean(values[:n]), fmean(values[-n:])
    return f"{key} {start:.3g} -> {now:.3g}" if now < share * start else None


def _entropy_collapse(watch: HealthWatch) -> str | None:
    """Entropy far below its start while the reward has not risen: the policy narrowed onto answers that earn no
    more than at the start. With the reward up it is converging on what it learned (a demo that learns the largest
    of three numbers ends near 0.35 nats from 1.9), not collapsing."""
    if _reward_rose(watch):
        return None
    return _dropped(watch, "entropy", watch.settings.entropy_drop)


def _reward_rose(watch: HealthWatch) -> bool:
    """The last window's reward above the first's by `reward_rise` of its scale (_scale)."""
    rewards, n = _series(watch, "reward"), watch.settings.window
    if len(rewards) < 2 * n:
        return False
    start = fmean(rewards[:n])
    return fmean(rewards[-n:]) - start >= watch.settings.reward_rise * _scale(watch, start)


def _held(watch: HealthWatch, key: str, test: Callable[[float], bool], what: str) -> str | None:
    values, n = _series(watch, key), watch.settings.window
    if len(values) < n or not all(test(v) for v in values[-n:]):
        return None
    return f"{key} {what} for {n} steps (last {values[-1]:.3g})"


def _cut_at_limit(watch: HealthWatch) -> str | None:
    """Most completions cut at every step of a window, and no fewer than in the window before: a run that starts
    long and learns brevity (the demo's first steps) is on its way out of it, not stuck."""
    cut, n = _series(watch, "completions/clipped_ratio"), watch.settings.window
    if len(cut) < 2 * n or min(cut[-n:]) < watch.settings.cut_share or fmean(cut[-n:]) < fmean(cut[-2 * n : -n]):
        return None
    return f"completions/clipped_ratio {fmean(cut[-n:]):.0%} over {n} steps, {fmean(cut[-2 * n : -n]):.0%} before"


def _reward_saturated(watch: HealthWatch) -> str | None:
    rewards, n = _series(watch, "reward"), watch.settings.window
    keys = accuracy_keys(watch.validations)
    accuracies = [r[keys[0]] for r in watch.validations if keys and _finite(r.get(keys[0]))]
    # Two validations in a row no higher than the first: one dip on a slice of 100 problems is noise (a demo that
    # went on to learn read 0.41 then 0.35 while its reward rose).
    if len(accuracies) < 3 or not _reward_rose(watch) or max(accuracies[-2:]) > accuracies[0]:
        return None
    start, now = fmean(rewards[:n]), fmean(rewards[-n:])
    return f"reward {start:.3g} -> {now:.3g}, {keys[0]} {accuracies[0]:.3g} -> {accuracies[-1]:.3g}"


def _shortcut(watch: HealthWatch) -> str | None:
    last = watch.validations[-1] if watch.validations else {}
    return str(last.get(SHORTCUT_REASON_KEY) or last[SHORTCUT_KEY]) if last.get(SHORTCUT_KEY) else None


def _one_reward_dominates(watch: HealthWatch) -> str | None:
    n = watch.settings.window
    names = sorted({k.split("/")[1] for r in watch.steps for k in r if k.startswith("rewards/") and k.endswith("/std")})
    if len(names) < 2 or len(watch.steps) < n:
        return None
    weight = {name: watch.weights.get(name, 1.0) for name in names}
    first = [name for name in names if weight[name] == max(weight.values())]
    # Only while the reward the recipe weights most still varies: when it is flat (no completion of a group right)
    # the others lead by default, which is no learning signal from it, not gaming.
    if not all(any((r.get(f"rewards/{name}/std") or 0.0) > 0 for name in first) for r in watch.steps[-n:]):
        return None
    shares = []
    for record in watch.steps[-n:]:
        spread = {name: abs(weight[name]) * (record.get(f"rewards/{name}/std") or 0.0) for name in names}
        total = sum(spread.values())
        if total <= 0:
            return None
        shares.append({name: value / total for name, value in spread.items()})
    top = max(names, key=lambda name: fmean(s[name] for s in shares))
    share = fmean(s[top] for s in shares)
    if share < watch.settings.dominance or weight[top] >= max(weight.values()):
        return None  # the reward the recipe weights most leads: as intended
    return f"{top} (weight {weight[top]:g}) makes {share:.0%} of the spread over {n} steps"


def _reward_falling(watch: HealthWatch) -> str | None:
    rewards, n = _series(watch, "reward"), watch.settings.window
    if len(rewards) < 3 * n:
        return None
    first = fmean(rewards[:n])
    windows = [fmean(rewards[-3 * n : -2 * n]), fmean(rewards[-2 * n : -n]), fmean(rewards[-n:])]
    falling = windows[0] > windows[1] > windows[2]
    if not falling or first - windows[2] < watch.settings.reward_fall * _scale(watch, first):
        return None
    return f"reward {first:.3g} at the start, then {' -> '.join(f'{w:.3g}' for w in windows)}"


def _grad_spike(watch: HealthWatch) -> str | None:
    norms, n = _series(watch, "grad_norm"), watch.settings.window
    if len(norms) <= n or not _finite(watch.steps[-1].get("grad_norm")):
        return None
    typical = median(norms[-n - 1 : -1])
    if typical <= 0 or norms[-1] <= watch.settings.grad_spike * typical:
        return None
    return f"grad_norm {norms[-1]:.3g} against a median of {typical:.3g}"


def _tools_vanished(watch: HealthWatch) -> str | None:
    calls, n = _series(watch, "tools/call_frequency"), watch.settings.window
    if len(calls) < 2 * n or fmean(calls[:n]) < 0.1 or any(calls[-n:]):
        return None
    return f"tools/call_frequency {fmean(calls[:n]):.2f} at the start, 0 for {n} steps"


def _tools_failing(watch: HealthWatch) -> str | None:
    n = watch.settings.window
    called = [r for r in watch.steps if _finite(r.get("tools/call_frequency")) and r["tools/call_frequency"] > 0]
    failures = [r.get("tools/failure_frequency") for r in called[-n:]]
    if len(failures) < n or not all(_finite(f) and f >= watch.settings.tool_failures for f in failures):
        return None
    return f"tools/failure_frequency {fmean(failures):.0%} over {n} steps with calls"


CHECKS: dict[str, Callable[[HealthWatch], str | None]] = {
    "nan": _nan,
    "no_signal": _no_signal,
    "entropy_collapse": _entropy_collapse,
    "length_collapse": lambda w: _dropped(w, "completions/mean_length", w.settings.length_drop),
    "cut_at_limit": _cut_at_limit,
    "reward_saturated": _reward_saturated,
    "shortcut": _shortcut,
    "one_reward_dominates": _one_reward_dominates,
    "reward_falling": _reward_falling,
    "kl_runaway": lambda w: _held(w, "kl", lambda v: v > w.settings.kl_max, f"above {w.settings.kl_max:g}"),
    "grad_spike": _grad_spike,
    "tools_vanished": _tools_vanished,
    "tools_failing": _tools_failing,
}
# The signatures a validation row can start (and end).
VALIDATION_CHECKS = ("reward_saturated", "shortcut")
