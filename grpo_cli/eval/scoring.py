"""Scoring a completion under each protocol's filters, and the summary of a set of scored problems."""

from __future__ import annotations

from typing import Any

from grpo_cli.eval.problems import Problem
from grpo_cli.eval.stats import wilson_interval
from rewards.gsm8k_task import FILTERS, score_completion


def score(protocol: str, completion: str, problem: Problem, marker: str = "tag") -> dict[str, Any]:
    """Extracted answers per filter, whether each is correct, whether the format was followed (gsm8k_task.py)."""
    return score_completion(protocol, completion, problem.answer, problem.gold, marker)


def summarize(
    records: list[dict[str, Any]],
    wall_s: float,
    new_problems: int,
    new_tokens: int,
    budget: int,
    names: list[str] | tuple[str, ...] = FILTERS,
) -> dict[str, Any]:
    """Accuracy per filter (GSM8K) or verifier (task) with its interval, and among well-formed answers where the
    format is known; how often the format was followed, completion length and the share cut at the token budget
    (the engines stop a row at end-of-sequence without counting it, so reaching the budget means the model was still
    writing)."""
    n = len(records)
    formed = [r for r in records if r["formatted"]]
    filters = {}
    for name in names:
        correct = sum(bool(r["correct"][name]) for r in records)
        low, high = wilson_interval(correct, n)
        filters[name] = {"correct": correct, "accuracy": correct / n if n else 0.0, "ci95": [low, high]}
        if formed:
            filters[name]["accuracy_well_formed"] = sum(bool(r["correct"][name]) for r in formed) / len(formed)
    return {
        "problems": n,
        "filters": filters,
        **behaviour(records, budget),
        # Throughput of this invocation's generation only (a resumed run does not count earlier sessions).
        "session": {
            "problems": new_problems,
            "generated_tokens": new_tokens,
            "wall_s": round(wall_s, 3),
            "problems_per_s": new_problems / wall_s if wall_s > 0 else None,
            "tokens_per_s": new_tokens / wall_s if wall_s > 0 else None,
        },
    }


def behaviour(records: list[dict[str, Any]], budget: int | None) -> dict[str, float]:
    """How often the format was followed, mean completion length, and the share cut at the token budget (left out
    when the budget is unknown: a summary without `max_new_tokens`)."""
    n = len(records)
    known = n and all(r["formatted"] is not None for r in records)  # a task without a format reward has no rate
    result = {
        "format_rate": sum(bool(r["formatted"]) for r in records) / n if known else None,
        "mean_new_tokens": sum(r["new_tokens"] for r in records) / n if n else 0.0,
    }
    if budget:
        result["cut_rate"] = sum(r["new_tokens"] >= budget for r in records) / n if n else 0.0
    return result
