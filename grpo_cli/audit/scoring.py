"""Every probe scored by every reward, called as training calls them: the batch of replies with the prompts and the
data's columns, behind the reward guard (a time limit, one line on failure). A reward that fails on a probe is
noted once and scores nothing there; one that runs out of time is not called again, so a hanging reward costs one
time limit, not one per probe."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.audit.probes import Probe

AUDIT_TIMEOUT_S = 30.0  # per call, for a reward whose recipe entry sets no timeout_s


@dataclass
class ScoredProbe:
    probe: Probe
    totals: list[float | None]  # per example, the weighted total of the form that counts (None: not built)
    values: list[list[float | None]]  # per reward, per example: its value on that form (None: no value)


@dataclass
class AuditedReward:
    label: str  # as the recipe names it
    weight: float
    func: Callable[..., Any] | None  # None: not audited (a model reward without --models)
    timeout_s: float | None = None
    failures: list[tuple[str, str]] = field(default_factory=list)  # (probe, what happened), in order
    stopped: bool = False  # ran out of time: not called again
    is_model: bool = False  # a reward model or judge, which is meant to tell a right answer from a wrong one

    @property
    def audited(self) -> bool:
        return self.func is not None


def score_probes(
    probes: list[Probe],
    examples: list[dict[str, Any]],
    rewards: list[AuditedReward],
    chat: bool,
    encode: Callable[[list[str]], tuple[list[str], list[list[int]]]],
) -> list[ScoredProbe]:
    """Score each probe's forms with each audited reward and keep, per example, the form its `pick` chooses.
    `encode`: the replies as training would hand them over (cut to the completion budget) and their token ids."""
    columns = {k: [e.get(k) for e in examples] for k in examples[0] if k != "prompt"} if examples else {}
    return [_score(probe, examples, columns, rewards, chat, encode) for probe in probes]


def _score(probe, examples, columns, rewards, chat, encode) -> ScoredProbe:
    flat = [(i, text) for i, forms in enumerate(probe.forms) for text in forms]
    texts, ids = encode([t for _, t in flat])
    if probe.kind == "good":  # a right answer longer than the budget is not one training can give: left out
        kept = [j for j, (_, text) in enumerate(flat) if texts[j] == text]
        flat, texts, ids = [flat[j] for j in kept], [texts[j] for j in kept], [ids[j] for j in kept]
    rows = [i for i, _ in flat]
    batch = {
        "prompts": [examples[i]["prompt"] for i in rows],
        "completions": [[{"role": "assistant", "content": t}] if chat else t for t in texts],
        "completion_ids": ids,
        **{k: [v[i] for i in rows] for k, v in columns.items()},
    }
    per_reward = [_call(reward, probe.name, batch, len(flat)) for reward in rewards]
    totals: list[float | None] = [None] * len(examples)
    values: list[list[float | None]] = [[None] * len(examples) for _ in rewards]
    positions: dict[int, list[int]] = {}  # example -> its forms' places in the batch
    for j, i in enumerate(rows):
        positions.setdefault(i, []).append(j)
    choose = max if probe.pick == "max" else min
    for i, at in positions.items():
        chosen = choose(at, key=lambda j: weighted_total(rewards, [v[j] for v in per_reward]))
        totals[i] = weighted_total(rewards, [v[chosen] for v in per_reward])
        for r, v in enumerate(per_reward):
            values[r][i] = v[chosen]
    return ScoredProbe(probe, totals, values)


def weighted_total(rewards: list[AuditedReward], values: list[float | None]) -> float:
    """The total TRL gives a completion: each reward's value times its weight, a reward with no value adding 0."""
    return sum(r.weight * (v or 0.0) for r, v in zip(rewards, values))


def _call(reward: AuditedReward, probe: str, batch: dict[str, Any], count: int) -> list[float | None]:
    """The reward's values on the batch (None each where it is not audited, has stopped, or failed here)."""
    from grpo_cli.reward_guard import GuardedReward, RewardFailure

    if not reward.audited or reward.stopped or not count:
        return [None] * count
    timeout = reward.timeout_s or AUDIT_TIMEOUT_S
    guarded = GuardedReward(reward.func, timeout, warn=lambda line: None, label=reward.label)
    try:
        return guarded(**batch)
    except RewardFailure as exc:
        said = str(exc).replace(f"reward `{reward.label}` ", "", 1)
        reward.stopped = said.startswith("took longer than")
        if reward.stopped and reward.timeout_s is None:
            said = f"took longer than the audit's {AUDIT_TIMEOUT_S:g} s a call (its recipe entry sets no timeout_s)"
        reward.failures.append((probe, said))
        return [None] * count
