"""The audit on the console (one table, then one line per finding) and as JSON."""

from __future__ import annotations

from typing import Any

from grpo_cli.audit.findings import FINDING_SHARE, STRATEGY_SHARE
from grpo_cli.audit.run import Audit

KINDS = {"good": "good", "bad": "bad", "strategy": "strategy"}  # known-good, known-bad (the footer says so)


def print_audit(console, audit: Audit, source: str) -> None:
    from rich.table import Table

    if not audit.prompts:
        console.print(f"reward audit: nothing to probe ({source} has no rows with a reference answer)")
        return
    table = Table(box=None, pad_edge=False, title_justify="left")
    table.add_column("reply", no_wrap=True)
    table.add_column("kind")
    for reward in audit.rewards:
        table.add_column(f"{reward.label} x{reward.weight:g}", justify="right")
    table.add_column("total", justify="right")
    table.add_column("of right", justify="right")
    table.add_column("paid >= half", justify="right")
    table.add_column("right", justify="right")
    for row in audit.rows:
        probe = row.scored.probe
        cells = ["-" if m is None else f"{m:.2f}" for m in row.means]
        paid = f"{100 * row.paid_share:.0f}%"
        if probe.kind == "good":
            paid = f"{100 * (1 - row.paid_share):.0f}%"
        style = "bold red" if row.flagged else ("yellow" if row.shortcut else None)
        right = "" if row.right_share is None else f"{100 * row.right_share:.0f}%"
        total = f"{row.total(audit.rewards):.2f}"
        table.add_row(
            probe.name, KINDS[probe.kind], *cells, total, f"{row.share_of_good:.2f}", paid, right, style=style
        )
    console.print(table)
    console.print(
        f"{audit.prompts} training prompts of {source}; good: known-good replies, bad: known-bad ones, strategy: "
        f"an answer that never reads the problem. A right answer earns {audit.good_mean:.2f} on average; "
        f"'paid >= half': the prompts where the reply earns at least half of a right answer (a strategy: of those "
        f"where its answer is wrong; 'right': where it is the reference; lengths in {audit.tokens}). A finding: "
        f"a known-bad reply or a wrong strategy paid (or a known-good reply not paid) on "
        f"{100 * FINDING_SHARE:.0f}% of prompts or more, a strategy right on {100 * STRATEGY_SHARE:.0f}%."
    )
    best = audit.best_rule()
    if best is not None:
        console.print(
            f"trivial rules: the best, {best.scored.probe.why}, is right on "
            f"{100 * (best.right_share or 0):.0f}% of prompts"
        )
    for line in finding_lines(audit):
        console.print(line, highlight=False)
    if not audit.findings:
        console.print("no finding: no known-bad reply is paid, every known-good one is")


def finding_lines(audit: Audit) -> list[str]:
    """One line per finding, then one per reward left out: `grpo audit` prints them under its table, `grpo preflight`
    as its first section."""
    lines = [f"{finding.kind.replace('_', ' ')}: {finding.line}" for finding in audit.findings]
    return lines + [f"not audited: `{label}` is a model (--models loads it)" for label in audit.not_audited]


def audit_json(audit: Audit) -> dict[str, Any]:
    best = audit.best_rule()
    return {
        "prompts": audit.prompts,
        "tokens": audit.tokens,
        "rewards": [
            {"name": r.label, "weight": r.weight, "audited": r.audited, "failures": [list(f) for f in r.failures]}
            for r in audit.rewards
        ],
        "right_answer_total": audit.good_mean,
        "probes": [
            {
                "probe": row.scored.probe.name,
                "kind": row.scored.probe.kind,
                "prompts": row.prompts,
                "rewards": dict(zip((r.label for r in audit.rewards), row.means)),
                "share_of_right": row.share_of_good,
                "paid_share" if row.scored.probe.kind != "good" else "unpaid_share": row.paid_share,
                "flagged": row.flagged,
                "right_share": row.right_share,
            }
            for row in audit.rows
        ],
        "best_rule": None if best is None else {"rule": best.scored.probe.name, "share": best.right_share},
        "findings": [
            {"kind": f.kind, "probes": f.probes, "rewards": f.rewards, "share": f.share, "line": f.line}
            for f in audit.findings
        ],
    }
