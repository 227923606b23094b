"""`grpo eval compare`: trained against base on the same problems, per filter or verifier, paired."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_cli.eval.evaluate import EvalResult
from grpo_cli.eval.sampled import completions_of, sampled_change
from grpo_cli.eval.scoring import behaviour
from grpo_cli.eval.shortcuts import against_baseline
from grpo_cli.eval.stats import paired_difference
from grpo_cli.runs.layout import COMPARISON_FILE


def compare(base: EvalResult, trained: EvalResult, output: Path) -> dict[str, Any]:
    """Trained minus base on the problems both scored, per filter, with a paired 95% interval (sampled: mean@N's
    change over the per-problem fractions, then pass@N's and maj@N's; eval/sampled.py); under the task protocol
    also trained against always giving the most common reference answer (eval/shortcuts.py)."""
    common = sorted(set(base.records) & set(trained.records))
    result = {"problems": len(common), "base": str(base.output), "trained": str(trained.output), "filters": {}}
    sampling = trained.summary.get("sampling")
    if sampling:  # both sides sampled alike: the settings check refuses a base evaluated otherwise
        result["sampling"] = sampling
    for name in trained.summary["filters"]:
        if sampling:
            result["filters"][name] = sampled_change(base.records, trained.records, common, name)
            continue
        before = [bool(base.records[i]["correct"][name]) for i in common]
        after = [bool(trained.records[i]["correct"][name]) for i in common]
        result["filters"][name] = {
            "base": sum(before) / len(common) if common else 0.0,
            "trained": sum(after) / len(common) if common else 0.0,
            **paired_difference(before, after),
        }
    baseline = against_baseline(trained.records, common, trained.summary)
    if baseline is not None:  # the task protocol: trained against always giving the most common reference answer
        result["majority_baseline"] = baseline
    for label, side in (("base", base), ("trained", trained)):
        completions = completions_of([side.records[i] for i in common])
        result[label + "_behaviour"] = behaviour(completions, side.summary.get("max_new_tokens"))
    output.mkdir(parents=True, exist_ok=True)
    (output / COMPARISON_FILE).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result
