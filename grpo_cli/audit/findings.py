"""What the scores mean. A known-good total per example is the best any known-good reply earns there; each probe's
total is read as a share of it. A false pass is a known-bad reply (or a strategy that never solves the problem)
earning at least half of the known-good total on FINDING_SHARE of the prompts or more; a false fail is a known-good
reply earning under half of it as often. Each finding is one line naming the reward that paid, the reply, the share
of prompts and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean

from grpo_cli.audit.scoring import AuditedReward, ScoredProbe, weighted_total

KINDS = ("false_pass", "false_fail", "shortcut", "indifferent", "blind", "failure")  # docs/rewards.md tables them
HALF = 0.5  # of the known-good total: a reply earning this much is paid as if it were half right
FINDING_SHARE = 0.05  # of the prompts: a known-bad reply paid (or a known-good one not paid) this often is a finding
# A strategy is right by chance now and then (the commonest answer is some share of the references): a finding
# only when it solves a tenth of the task.
STRATEGY_SHARE = 0.10

FIXES = {
    "silent": "it pays a reply that gives no answer",
    "wrong": "it pays a wrong answer: compare the reply's final answer with the reference",
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
    "what pays here is form or length, whatever the answer: lower those weights until such a reply earns under half "
    "of a right one"
)


@dataclass
class ProbeRow:
    scored: ScoredProbe
    prompts: int  # examples where the probe was built and a known-good reply earns something
    # of those, where it earns at least HALF of the known-good total (a good probe: under HALF; a strategy: while
    # its answer is wrong, out of the prompts where it is wrong)
    paid_share: float
    share_of_good: float  # its mean total as a share of the known-good total
    means: list[float | None]  # per reward, its mean value
    right_share: float | None = None  # a strategy: the share of prompts where its answer is the reference

    @property
    def flagged(self) -> bool:
        return self.prompts > 0 and self.paid_share >= FINDING_SHARE

    @property
    def shortcut(self) -> bool:
        return self.right_share is not None and self.right_share >= STRATEGY_SHARE

    def total(self, rewards: list[AuditedReward]) -> float:
        """Its mean weighted total over the rewards."""
        return weighted_total(rewards, self.means)


@dataclass
class Finding:
    kind: str  # false_pass, false_fail, shortcut, indifferent, blind, failure
    line: str
    probes: list[str] = field(default_factory=list)
    rewards: list[str] = field(default_factory=list)  # the rewards that paid (a false pass)
    share: float = 0.0  # the largest share of prompts among its probes


def good_totals(scored: list[ScoredProbe]) -> list[float]:
    """Per example, the most any known-good reply earns (0 where none was built or none earns)."""
    goods = [s for s in scored if s.probe.kind == "good"]
    count = len(scored[0].totals) if scored else 0
    return [max([t for s in goods if (t := s.totals[i]) is not None], default=0.0) for i in range(count)]


def probe_rows(scored: list[ScoredProbe], good: list[float]) -> list[ProbeRow]:
    rows = []
    for s in scored:
        at = [i for i, t in enumerate(s.totals) if t is not None and good[i] > 0]
        right = s.probe.right
        wrong = [i for i in at if not right[i]] if right is not None else at
        if s.probe.kind == "good":
            hits = [i for i in at if s.totals[i] < HALF * good[i]]
        else:
            hits = [i for i in wrong if s.totals[i] >= HALF * good[i]]
        share_of_good = fmean(s.totals[i] / good[i] for i in at) if at else 0.0
        means = [_mean(v) for v in s.values]
        base = at if s.probe.kind == "good" else wrong
        right_share = sum(right[i] for i in at) / len(at) if right is not None and at else None
        rows.append(ProbeRow(s, len(at), len(hits) / len(base) if base else 0.0, share_of_good, means, right_share))
    return rows


def findings(rows: list[ProbeRow], rewards: list[AuditedReward], good: list[float]) -> list[Finding]:
    """One finding per failing reward, per group of replies the same rewards pay for the same reason, per known-good
    reply not paid, one for the strategies that are right, and one when no known-good reply earns anything."""
    out = [
        Finding(
            "failure", f"`{r.label}` on the `{probe}` probe: {said}; training stops on such a reply", [probe], [r.label]
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
    wrong = next((row for row in rows if row.scored.probe.name == "wrong answer"), None)
    for row in rows:
        if row.flagged and row.scored.probe.kind == "good":
            probe = row.scored.probe
            share = f"{100 * row.paid_share:.0f}% of {row.prompts} prompts"
            line = f"{probe.why} earns under half of a right answer on {share}: {FIXES[probe.category]}"
            out.append(Finding("false_fail", line, [probe.name], [], row.paid_share))
    out += _indifferent(rewards, reference, wrong)
    out += _false_passes([r for r in rows if r.flagged and r.scored.probe.kind != "good"], rewards, reference, wrong)
    shortcuts = sorted((r for r in rows if r.shortcut), key=lambda r: -r.right_share)
    if shortcuts:
        said = ", ".join(f"{r.scored.probe.why} {100 * r.right_share:.0f}%" for r in shortcuts)
        line = f"right without solving, on this share of {shortcuts[0].prompts} prompts: {said}: {FIXES['rule']}"
        out.append(Finding("shortcut", line, [r.scored.probe.name for r in shortcuts], [], shortcuts[0].right_share))
    return out


def _false_passes(rows: list[ProbeRow], rewards, reference, wrong) -> list[Finding]:
    """Known-bad replies and wrong strategies that are paid, grouped by the rewards that pay them and the fix."""
    groups: dict[tuple, list[ProbeRow]] = {}
    for row in rows:
        total = row.total(rewards)
        paid = sorted(((r.weight * (m or 0.0), i) for i, (r, m) in enumerate(zip(rewards, row.means))), reverse=True)
        payers = tuple(i for amount, i in paid if amount > 0.1 * total)  # a tenth of it: not a right answer's odd pay
        if not payers:
            continue
        category = "wrong" if row.scored.probe.kind == "strategy" else row.scored.probe.category
        groups.setdefault((payers, _fix(category, payers[0], reference, wrong)), []).append(row)
    good = reference.total(rewards) if reference else 0.0
    out = []
    for (payers, fix), members in groups.items():
        names = ", ".join(f"`{rewards[i].label}`" for i in payers)
        verb = "pays" if len(payers) == 1 else "pay"
        said = ", ".join(f"{row.scored.probe.why} on {100 * row.paid_share:.0f}%" for row in members)
        most = max(row.total(rewards) for row in members)
        line = f"{names} {verb} up to {most:.2g} of a right answer's {good:.2g} to {said} of prompts: {fix}"
        probes, paying = [row.scored.probe.name for row in members], [rewards[i].label for i in payers]
        out.append(Finding("false_pass", line, probes, paying, max(row.paid_share for row in members)))
    return out


def _indifferent(rewards, reference: ProbeRow | None, wrong: ProbeRow | None) -> list[Finding]:
    """A reward model or judge that pays a wrong answer in the asked format as much as the reference: whatever it
    scores, it is not whether the answer is right."""
    out = []
    for index, reward in enumerate(rewards):
        right, paid_wrong = _mean_of(reference, index), _mean_of(wrong, index)
        if reward.is_model and right is not None and paid_wrong is not None and right <= paid_wrong:
            line = (
                f"`{reward.label}` pays a wrong answer {paid_wrong:.2f} and the reference {right:.2f}: it does not "
                "tell a right answer from a wrong one; give it a stronger model, or its weight only beside a verifier"
            )
            out.append(Finding("indifferent", line, ["reference", "wrong answer"], [reward.label], 1.0))
    return out


def _fix(category: str, index: int, reference: ProbeRow | None, wrong: ProbeRow | None) -> str:
    """A reward that pays a wrong answer in the asked format as much as the reference checks form or length, not
    answers: the fix is its weight, not its reading."""
    right, paid_wrong = _mean_of(reference, index), _mean_of(wrong, index)
    checks_answers = right is not None and (paid_wrong is None or right > paid_wrong)
    return FIXES[category] if checks_answers else FORM_FIX


def _mean_of(row: ProbeRow | None, index: int) -> float | None:
    """The mean value reward `index` gives the probe of `row` (None: no such probe, or no value)."""
    return row.means[index] if row is not None else None


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None
