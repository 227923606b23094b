"""What `grpo eval` shows: a progress bar with problems/s and the running accuracy, then result tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from grpo_cli.eval.shortcuts import baseline_line, report_lines
from grpo_cli.progress import progress_bar
from grpo_cli.runs.layout import PREDICTIONS_FILE


class EvalDisplay:
    """A rich bar in a terminal; one plain line per batch elsewhere (CI, logs)."""

    def __init__(self, console: Console):
        self.console = console
        self.progress: Progress | None = None

    def note(self, line: str) -> None:
        self.console.print(line, highlight=False)

    def start(
        self,
        label: str,
        total: int,
        done: list[dict[str, Any]],
        unscorable: int = 0,
        engine: str | None = None,
        names: list[str] | tuple[str, ...] = ("strict-match", "flexible-extract"),
    ) -> None:
        self.label, self.total = label, total
        if engine:
            self.console.print(f"{label}: generating with {engine}", highlight=False)
        if unscorable:
            self.console.print(
                f"{label}: left out {unscorable} problem(s) that cannot be scored (no question or answer)"
            )
        self.scored = len(done)
        # A sampled record's `correct` is its fraction of right completions: the running figure is mean@N.
        self.correct = {name: sum(float(r["correct"][name]) for r in done) for name in names}
        self.new = 0
        if done:
            self.console.print(f"{label}: continuing, {len(done)} of {total} problems already scored")
        if self.console.is_terminal:
            self.progress = progress_bar(self.console, label)
            self.task = self.progress.add_task(label, total=total, completed=self.scored, stats="generating...")
            self.progress.start()

    def advance(self, records: list[dict[str, Any]], elapsed_s: float) -> None:
        self.scored += len(records)
        self.new += len(records)
        for name in self.correct:
            self.correct[name] += sum(float(r["correct"][name]) for r in records)
        rate = self.new / elapsed_s if elapsed_s > 0 else 0.0
        shown = {"strict-match": "strict", "flexible-extract": "flexible"}
        stats = f"{rate:.2f} problems/s  " + "  ".join(
            f"acc {shown.get(name, name)} {correct / self.scored:.3f}" for name, correct in self.correct.items()
        )
        if self.progress:
            self.progress.update(self.task, completed=self.scored, stats=stats)
        else:
            self.console.print(f"{self.label} {self.scored}/{self.total}  {stats}", highlight=False)

    def stop(self) -> None:
        if self.progress:
            self.progress.stop()
            self.progress = None


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _interval(ci: list[float]) -> str:
    return f"{_pct(ci[0])} - {_pct(ci[1])}"


def summary_table(summary: dict[str, Any]) -> Table:
    title = f"{summary['target']}: {summary['model']}" + (f" + {summary['adapter']}" if summary.get("adapter") else "")
    table = Table(title=f"{title}  ({summary['protocol']}, {summary['problems']} problems)", box=None)
    if "sampling" in summary:
        _sampled_rows(table, summary)
    else:
        for column in ("filter", "accuracy", "95% interval (Wilson)", "correct"):
            table.add_column(column, justify="left" if column == "filter" else "right")
        for name, f in summary["filters"].items():
            table.add_row(name, _pct(f["accuracy"]), _interval(f["ci95"]), f"{f['correct']}/{summary['problems']}")
    session = summary["session"]
    form = "no format reward" if summary["format_rate"] is None else f"format rate {_pct(summary['format_rate'])}"
    table.caption = (
        f"{form}   mean completion {summary['mean_new_tokens']:.0f} tokens"
        f"   cut at the {summary['max_new_tokens']}-token budget {_pct(summary['cut_rate'])}"
    )
    if session["problems"]:
        table.caption += (
            f"   this run: {session['problems']} problems in {session['wall_s']:.0f}s, "
            f"{session['problems_per_s']:.2f} problems/s, {session['tokens_per_s']:.1f} tokens/s"
        )
    return table


def _sampled_rows(table: Table, summary: dict[str, Any]) -> None:
    """mean@N (normal interval over problems), pass@N and maj@N (Wilson intervals over problems) per filter."""
    s, n = summary["sampling"], summary["sampling"]["samples"]
    table.title += f"\n{n} samples per problem, temperature {s['temperature']}, top-p {s['top_p']}, seed {s['seed']}"
    columns = ("filter", f"mean@{n}", "95% normal", f"pass@{n}", "95% Wilson", f"maj@{n}", "95% Wilson")
    for column in columns:
        table.add_column(column, justify="left" if column == "filter" else "right")
    for name, f in summary["filters"].items():
        vote = f["majority"]
        table.add_row(
            name,
            _pct(f["accuracy"]),
            _interval(f["ci95"]),
            _pct(f["pass"]["accuracy"]),
            _interval(f["pass"]["ci95"]),
            *((_pct(vote["accuracy"]), _interval(vote["ci95"])) if vote else ("n/a", "")),
        )
    if "majority" in s:
        table.title += f"\nmaj@{n} {s['majority']}"


def comparison_table(result: dict[str, Any]) -> Table:
    table = Table(title=f"trained vs base on the same {result['problems']} problems", box=None)
    if "sampling" in result:
        return _sampled_comparison(table, result)
    for column in ("filter", "base", "trained", "difference", "95% interval (paired)", "fixed", "broken"):
        table.add_column(column, justify="left" if column == "filter" else "right")
    for name, f in result["filters"].items():
        table.add_row(
            name,
            _pct(f["base"]),
            _pct(f["trained"]),
            f"{100 * f['difference']:+.1f} pts",
            f"{100 * f['low']:+.1f} to {100 * f['high']:+.1f}",
            str(f["fixed"]),
            str(f["broken"]),
        )
    table.caption = "an interval that contains 0 means the change is not distinguishable from noise"
    return table


def _sampled_comparison(table: Table, result: dict[str, Any]) -> Table:
    """mean@N's change (paired over the per-problem fractions), then pass@N's and maj@N's (paired over problems)."""
    n = result["sampling"]["samples"]
    columns = ("filter", "figure", "base", "trained", "difference", "95% interval (paired)", "better", "worse")
    for column in columns:
        table.add_column(column, justify="left" if column in ("filter", "figure") else "right")
    for name, f in result["filters"].items():
        figures = [(f"mean@{n}", f, "improved", "worsened"), (f"pass@{n}", f["pass"], "fixed", "broken")]
        if "majority" in f:
            figures.append((f"maj@{n}", f["majority"], "fixed", "broken"))
        for label, g, better, worse in figures:
            table.add_row(
                name,
                label,
                _pct(g["base"]),
                _pct(g["trained"]),
                f"{100 * g['difference']:+.1f} pts",
                f"{100 * g['low']:+.1f} to {100 * g['high']:+.1f}",
                str(g[better]),
                str(g[worse]),
            )
    table.caption = (
        f"better/worse: problems whose fraction right ({'mean@' + str(n)}) or verdict rose or fell; "
        "an interval that contains 0 means the change is not distinguishable from noise"
    )
    return table


def outcome_json(outcome) -> dict[str, Any]:
    return {
        "results": [r.summary for r in outcome.results],
        **({"comparison": outcome.comparison} if outcome.comparison else {}),
        **({"curve": outcome.curve} if outcome.curve else {}),
    }


def print_outcome(console: Console, outcome) -> None:
    """Each evaluation's table and where its per-problem results are, then the comparison."""
    for result in outcome.results:
        console.print(summary_table(result.summary))
        print_shortcuts(console, result.summary)
        console.print(f"per-problem results: {result.output / PREDICTIONS_FILE}", highlight=False)
    if outcome.comparison:
        console.print(comparison_table(outcome.comparison))
        if outcome.comparison.get("majority_baseline"):
            console.print(baseline_line(outcome.comparison["majority_baseline"]), highlight=False, soft_wrap=True)
    if outcome.curve:
        console.print(curve_table(outcome.curve))
        console.print(f"curve: {outcome.results[-1].output.parent / 'curve.jsonl'} and curve.png", highlight=False)


def print_shortcuts(console: Console, summary: dict[str, Any]) -> None:
    """A task evaluation's answers, majority baseline and shortcut flag (eval/shortcuts.py), the flag in yellow."""
    for line in report_lines(summary):
        flagged = line.startswith("shortcut:") and summary["shortcut"]["flag"]
        console.print(line, style="yellow" if flagged else None, highlight=False, soft_wrap=True)


def curve_table(curve: list[dict[str, Any]]) -> Table:
    """A row a step: each filter's (or verifier's) accuracy with its 95% interval; the shortcut flags raised, when a
    step has one."""
    names = [k for k, v in curve[0].items() if isinstance(v, dict)]
    table = Table(title=f"accuracy by step ({curve[0]['problems']} problems)", box=None, pad_edge=False)
    flags = any(row.get("shortcut") for row in curve)
    for column in ("step", "model", *names, *(["shortcut"] if flags else [])):
        table.add_column(column, justify="left" if column in ("model", "shortcut") else "right")
    for row in curve:
        cells = []
        for name in names:
            low, high = row[name]["ci95"] or (None, None)
            interval = f" [{low:.3f}, {high:.3f}]" if low is not None else ""
            cells.append(f"{row[name]['accuracy']:.3f}{interval}")
        if flags:
            cells.append(", ".join(row.get("shortcut") or []).replace("_", " "))
        table.add_row(str(row["step"]), row["model"], *cells)
    return table
