"""What the scores mean. A known-good total per example is the best any known-good reply earns there; each probe's
total is read as a share of it. A false pass is a known-bad reply (or a strategy that never solves the problem)
earning at least half of the known-good total on FINDING_SHARE of the prompts or more; a false fail is a known-good
reply earning under half of it as often. Each finding is one line naming the reward that paid, the reply, the share
of prompts and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean

from grpo_cli.audit.scoring import AuditedReward, ScoredProbe

HALF = 0.5  # of the known-good total: a reply earning this much is paid as if it were half right
FINDING_SHARE = 0.05  # of the prompts: a known-bad reply paid (or a known-good one not paid) this often is a finding
# A strategy is right by chance now and then (the commonest answer is some share of the references): a finding
# only when it solves a tenth of the task.
STRATEGY_SHARE = 0.10

FIXES = {
    "silent": "it pays a reply that gives no answer",
    "echo": "it pays the prompt repeated back: pay only an answer the reply marks (marked_correctness, or a verifier "
    "that reads only <answer> or ####)",
    "hedge": "it pays a reply that lists several answers: read one final answer (the marked one, else the last) and "
    "compare it whole, not as a substring",
    "hostile": "it pays a malformed answer: read a finite number and pay nothing for what does not parse",
    "constant": "one answer to everything is paid this often: a policy can stop reading the problems; balance the "
    "data's answers, and compare a trained model with this, not with 0",
    "rule": "a one-line rule solves this share of the task: compare a trained model's accuracy with it, not with 0",
    "variant": "it fails right answers written this way: compare numbers as numbers and text after normalisation "
    "(normalized_match), or say the form in the system prompt",
    "": "it fails right answers: check data.answer_column and data.answer_format against what the reward reads",
}
FORM_FIX = (
    "it pays form or length whatever the answer: lower its weight until such a reply earns under half of a right one"
)


@dataclass
class ProbeRow:
    scored: ScoredProbe
    prompts: int  # examples where the probe was built and a known-good reply earns something
    paid_share: float  # of those, where it earns at least HALF of the known-good total (a good probe: under HALF)
    share_of_good: float  # its mean total as a share of the known-good total
    means: list[float | None]  # per reward, its mean value

    @property
    def flagged(self) -> bool:
        limit = STRATEGY_SHARE if self.scored.probe.kind == "strategy" else FINDING_SHARE
        return self.prompts > 0 and self.paid_share >= limit


@dataclass
class Finding:
    kind: str  # false_pass, false_fail, shortcut, blind, failure
    line: str
    probe: str = ""
    reward: str = ""
    share: float = 0.0


def good_totals(scored: list[ScoredProbe]) -> list[float]:
    """Per example, the most any known-good reply earns (0 where none was built or none earns)."""
    goods = [s for s in scored if s.probe.kind == "good"]
    count = len(scored[0].totals) if scored else 0
    return [max([t for s in goods if (t := s.totals[i]) is not None], default=0.0) for i in range(count)]


def probe_rows(scored: list[ScoredProbe], good: list[float]) -> list[ProbeRow]:
    rows = []
    for s in scored:
        at = [i for i, t in enumerate(s.totals) if t is not None and good[i] > 0]
        if s.probe.kind == "good":
            hits = [i for i in at if s.totals[i] < HALF * good[i]]
        else:
            hits = [i for i in at if s.totals[i] >= HALF * good[i]]
        share_of_good = fmean(s.totals[i] / good[i] for i in at) if at else 0.0
        means = [_mean(v) for v in s.values]
        rows.append(ProbeRow(s, len(at), len(hits) / len(at) if at else 0.0, share_of_good, means))
    return rows


def findings(rows: list[ProbeRow], rewards: list[AuditedReward], good: list[float]) -> list[Finding]:
    """One finding per reward failure, per flagged probe, and one when no known-good reply earns anything."""
    out = [
        Finding(
            "failure", f"`{r.label}` on the `{probe}` probe: {said}; training stops on such a reply", probe, r.label
        )
        for r in rewards
        for probe, said in r.failures[:1]
    ]
    if good and not any(good):
        out.append(
            Finding(
                "blind",
                "no known-good reply earns anything: the rewards cannot tell a right answer from a wrong one; check "
                "data.answer_column, data.answer_format and the verifier",
            )
        )
        return out
    reference = next((row for row in rows if row.scored.probe.name == "reference"), None)
    silent = next((row for row in rows if row.scored.probe.name == "empty"), None)
    for row in rows:
        if row.flagged:
            out.append(_finding(row, rewards, good, reference, silent))
    return out


def _finding(row: ProbeRow, rewards, good, reference: ProbeRow | None, silent: ProbeRow | None) -> Finding:
    probe = row.scored.probe
    share = f"{100 * row.paid_share:.0f}% of {row.prompts} prompts"
    if probe.kind == "good":
        line = f"{probe.why} earns under half of a right answer on {share}: {FIXES[probe.category]}"
        return Finding("false_fail", line, probe.name, "", row.paid_share)
    weighted = [(r.weight * (m or 0.0), r) for r, m in zip(rewards, row.means)]
    paid, reward = max(weighted, key=lambda pair: pair[0])
    good_mean = fmean(good)
    if probe.kind == "strategy":
        kind, text = "shortcut", f"{probe.why} earns at least half of a right answer on {share}"
    else:
        kind, text = "false_pass", f"`{reward.label}` pays {probe.why} {paid:.2g} of {good_mean:.2g} on {share}"
    if probe.kind == "strategy":
        fix = FIXES[probe.category]
    else:
        fix = _fix(probe.category, rewards.index(reward), reference, silent)
    return Finding(kind, f"{text}: {fix}", probe.name, reward.label, row.paid_share)


def _fix(category: str, index: int, reference: ProbeRow | None, silent: ProbeRow | None) -> str:
    """A reward that pays an empty reply as much as the reference answer checks form or length, not answers."""
    right = reference.means[index] if reference else None
    empty = silent.means[index] if silent else None
    checks_answers = right is not None and (empty is None or right > empty)
    return FIXES[category] if checks_answers else FORM_FIX


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None
