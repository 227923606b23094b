"""The shortcut report of a task evaluation: what the model answers, what always giving the most common reference
answer would score, and a flag when the accuracy may come from a shortcut rather than from the task.

A model can raise its accuracy by giving one answer to everything: on yes/no questions where half the references
are `no`, answering `no` scores about half. Accuracy alone, and its change against the base model, cannot tell that
from learning; the answers the model gives and the accuracy of the constant answer can. Answers are read the way the
report's verifier reads them (rewards/verifiers.py, rewards/answers.py): a verifier that compares text after
normalisation counts `No.` and `no` as one answer. Pure functions over records and lists, so each figure is tested
on its own.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from grpo_cli.audit.probes import question_text
from grpo_cli.audit.rules import RULES, rule_answers
from grpo_cli.eval.stats import mean_interval, paired_difference, paired_mean_difference, wilson_interval
from rewards.answers import completion_text, extract_answer, to_number
from rewards.verifiers import final_answer, normalize_text

TOP_ANSWERS = 5  # the answers shown by name; the rest are counted together as `other`
CATEGORICAL = 10  # at most this many distinct reference answers: a categorical task, with a balanced accuracy
ONE_ANSWER = 0.8  # one answer given this often is a flag, whatever the accuracy

# How each built-in verifier reads an answer; a verifier not named here (a user's) is read as `normalized_match`
# reads, the common case for answers that are words.
READINGS = {
    "correctness": "number",
    "marked_correctness": "number",
    "exact_match": "exact",
    "math_correctness": "exact",
    "normalized_match": "normalized",
}


def reading_of(verifier: str) -> str:
    """`number`, `exact` or `normalized`: how `verifier` reads the final answer."""
    return READINGS.get(verifier, "normalized")


def read_answer(text: str, reading: str) -> str | None:
    """The final answer of a completion as the reading sees it; None when there is none to read."""
    if reading == "number":
        return _number(extract_answer(text))
    answer = final_answer(text)
    return (answer if reading == "exact" else normalize_text(answer)) or None


def read_reference(gold: Any, reading: str) -> str | None:
    """A reference answer as the same reading sees it, so it can be counted and compared with the model's."""
    text = "" if gold is None else str(gold)
    if reading == "number":
        return _number(text)
    return (text.strip() if reading == "exact" else normalize_text(text)) or None


def _number(text: str | None) -> str | None:
    value = to_number(text)
    if value is None:
        return None
    if abs(value) >= 1e15:  # written as a float, not as the 300 digits of its integer part
        return repr(value)
    return str(int(value)) if value.is_integer() else repr(value)  # 18, 18.0 and $18 are one answer


def answer_distribution(answers: list[str | None], top: int = TOP_ANSWERS) -> dict[str, Any]:
    """The most common answers with their counts and shares (None: no answer could be read), then the rest as
    `other`."""
    total = len(answers)
    counts = Counter(answers)
    shown = counts.most_common(top)  # a tie keeps the answer seen first
    other = total - sum(n for _, n in shown)
    return {
        "answers": total,
        "distinct": len(counts),
        "top": [{"answer": a, "count": n, "share": n / total} for a, n in shown],
        "other": {"count": other, "share": other / total if total else 0.0},
    }


def majority_baseline(references: list[str | None]) -> dict[str, Any]:
    """The accuracy of always giving the most common reference answer (a tie: the one seen first), with its Wilson
    interval, and how many distinct reference answers there are."""
    counts = Counter(r for r in references if r is not None)
    answer, right = counts.most_common(1)[0] if counts else (None, 0)
    n = len(references)
    return {
        "answer": answer,
        "correct": right,
        "problems": n,
        "accuracy": right / n if n else 0.0,
        "ci95": list(wilson_interval(right, n)),
        "classes": len(counts),
    }


def trivial_rules(questions: list[Any], references: list[str | None], reading: str) -> dict[str, Any] | None:
    """The accuracy of each trivial rule of the question's numbers (audit/rules.py: the first, last or largest
    number, their sum, difference, product) and the best of them; None for answers that are not numbers."""
    if reading != "number" or not any(r is not None for r in references):
        return None
    answers = [rule_answers(question_text(q)) if q is not None else {} for q in questions]
    accuracy = {
        rule: sum(_number(a.get(rule)) == ref for a, ref in zip(answers, references) if ref is not None)
        / len(references)
        for rule in RULES
    }
    best = max(accuracy, key=accuracy.get)
    return {"accuracy": accuracy, "best": best, "best_accuracy": accuracy[best], "problems": len(references)}


def balanced_accuracy(references: list[str | None], correct: list[float]) -> float | None:
    """The mean over reference answers of the accuracy on the problems with that answer (per-class recall), for a
    categorical task (at most CATEGORICAL distinct references); None otherwise. A model that gives one answer to
    everything scores 1 / classes here, whatever the classes' sizes."""
    classes: dict[str, list[float]] = {}
    for reference, right in zip(references, correct):
        if reference is not None:
            classes.setdefault(reference, []).append(float(right))
    if not classes or len(classes) > CATEGORICAL:
        return None
    return sum(sum(v) / len(v) for v in classes.values()) / len(classes)


def shortcut_flag(
    distribution: dict[str, Any], baseline: dict[str, Any], accuracy: float, ci95: list[float] | None
) -> dict[str, Any]:
    """Flagged when one answer (not a missing one) is ONE_ANSWER or more of the answers, or when the accuracy does
    not beat the majority baseline: the lower end of its 95% interval is not above the baseline's accuracy."""
    reasons, kinds = [], []
    given = [t for t in distribution["top"] if t["answer"] is not None]
    if given and given[0]["share"] >= ONE_ANSWER:
        t = given[0]
        kinds.append("one_answer")
        share = f"{_pct(t['share'])} of the answers ({t['count']} of {distribution['answers']})"
        reasons.append(f"`{t['answer']}` is {share}")
    low = accuracy if ci95 is None else ci95[0]
    if baseline["problems"] and baseline["answer"] is not None and low <= baseline["accuracy"]:
        kinds.append("below_baseline")
        interval = "" if ci95 is None else f" (95% {_pct(ci95[0])}-{_pct(ci95[1])})"
        reasons.append(
            f"accuracy {_pct(accuracy)}{interval} does not beat always answering `{baseline['answer']}` "
            f"({_pct(baseline['accuracy'])})"
        )
    return {"flag": bool(kinds), "kinds": kinds, "reasons": reasons}


def completions_and_references(records: list[dict[str, Any]]) -> tuple[list[str], list[Any], list[float]]:
    """Every completion (a sampled record's samples, a greedy record's one), each problem's reference answer and its
    verdict: right or not (greedy), the fraction right (sampled), per the report's verifier."""
    texts = [completion_text(s["completion"]) for r in records for s in (r["samples"] if "samples" in r else [r])]
    return texts, [r["gold"] for r in records], [r["correct"] for r in records]


def accuracy_of(records: list[dict[str, Any]], verdicts: list[float]) -> tuple[float, list[float]]:
    """The accuracy and 95% interval summary.json gives the same records: Wilson over problems (greedy), normal over
    the per-problem fractions (sampled: mean@N)."""
    if any("samples" in r for r in records):
        mean, low, high = mean_interval(verdicts)
        return mean, [low, high]
    right, n = int(sum(verdicts)), len(verdicts)
    return (right / n if n else 0.0), list(wilson_interval(right, n))


def shortcut_report(records: list[dict[str, Any]], verifier: str) -> dict[str, Any]:
    """summary.json's `answer_distribution`, `majority_baseline`, `balanced_accuracy` and `shortcut` for scored
    records (greedy or sampled), read and judged by `verifier` (the evaluation's first)."""
    reading = reading_of(verifier)
    texts, golds, verdicts = completions_and_references(records)
    references = [read_reference(g, reading) for g in golds]
    right = [float(v[verifier]) for v in verdicts]
    distribution = answer_distribution([read_answer(t, reading) for t in texts])
    baseline = majority_baseline(references)
    return {
        "answer_distribution": {"verifier": verifier, "reading": reading, **distribution},
        "majority_baseline": baseline,
        "trivial_rules": trivial_rules([r.get("question") for r in records], references, reading),
        "balanced_accuracy": balanced_accuracy(references, right),
        "shortcut": shortcut_flag(distribution, baseline, *accuracy_of(records, right)),
    }


def against_baseline(records: dict[int, dict], common: list[int], summary: dict[str, Any]) -> dict[str, Any] | None:
    """`grpo eval compare`: the trained model against always giving the majority answer on the same problems, paired
    (sampled: over each problem's fraction right). None when the summary has no shortcut report."""
    if "majority_baseline" not in summary or summary["majority_baseline"]["answer"] is None:
        return None  # no reference answer the verifier reads: no baseline to compare with
    verifier = summary["answer_distribution"]["verifier"]
    reading, answer = summary["answer_distribution"]["reading"], summary["majority_baseline"]["answer"]
    baseline = [float(read_reference(records[i]["gold"], reading) == answer) for i in common]
    trained = [float(records[i]["correct"][verifier]) for i in common]
    if "sampling" in summary:
        change = paired_mean_difference(baseline, trained)
        better, worse = change.pop("improved"), change.pop("worsened")
    else:
        change = paired_difference([bool(b) for b in baseline], [bool(t) for t in trained])
        better, worse = change.pop("fixed"), change.pop("broken")
    n = len(common)
    return {
        "verifier": verifier,
        "answer": answer,
        "baseline": sum(baseline) / n if n else 0.0,
        "trained": sum(trained) / n if n else 0.0,
        **change,
        "trained_right_baseline_wrong": better,
        "baseline_right_trained_wrong": worse,
    }


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The console's lines for a summary's shortcut report (none for a summary without one)."""
    if "answer_distribution" not in summary:
        return []
    d, b = summary["answer_distribution"], summary["majority_baseline"]
    shown = ", ".join(f"{_quoted(t['answer'])} {_pct(t['share'])}" for t in d["top"])
    if d["other"]["count"]:
        shown += f", other {_pct(d['other']['share'])}"
    if b["answer"] is None:  # no reference reads under the verifier: nothing to compare with
        baseline = f"majority baseline: none, no reference answer reads as {d['reading']} under {d['verifier']}"
    else:
        baseline = (
            f"majority baseline: always `{b['answer']}` {_pct(b['accuracy'])} (95% {_pct(b['ci95'][0])}-"
            f"{_pct(b['ci95'][1])}, {b['classes']} distinct reference answers)"
        )
    if summary.get("balanced_accuracy") is not None:
        baseline += f"; balanced accuracy {_pct(summary['balanced_accuracy'])}"
    lines = [f"answers ({d['verifier']}'s reading, {d['distinct']} distinct): {shown or 'none'}", baseline]
    rules = summary.get("trivial_rules")
    if rules:
        shown = ", ".join(f"{rule} {_pct(share)}" for rule, share in rules["accuracy"].items())
        lines.append(f"trivial rules of the question's numbers: {shown} (best: {rules['best']})")
    flag = summary["shortcut"]
    lines.append("shortcut: " + "; ".join(flag["reasons"]) if flag["flag"] else "shortcut: none flagged")
    return lines


def baseline_line(change: dict[str, Any]) -> str:
    """`grpo eval compare`'s line for the trained model against the majority baseline."""
    return (
        f"trained against always `{change['answer']}` ({change['verifier']}): {_pct(change['trained'])} vs "
        f"{_pct(change['baseline'])}, {100 * change['difference']:+.1f} pts (paired 95% "
        f"{100 * change['low']:+.1f} to {100 * change['high']:+.1f})"
    )


def _quoted(answer: str | None) -> str:
    return "(no answer)" if answer is None else f"`{answer}`"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"
