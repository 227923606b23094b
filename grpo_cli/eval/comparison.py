"""`grpo eval --compare`: trained against base on the same problems, per filter or verifier, paired."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_cli.eval.evaluate import EvalResult
from grpo_cli.eval.scoring import behaviour
from grpo_cli.eval.stats import paired_difference
from grpo_cli.runs.layout import COMPARISON_FILE


def compare(base: EvalResult, trained: EvalResult, output: Path) -> dict[str, Any]:
    """Trained minus base on the problems both scored, per filter, with a paired 95% interval."""
    common = sorted(set(base.records) & set(trained.records))
    result = {"problems": len(common), "base": str(base.output), "trained": str(trained.output), "filters": {}}
    for name in trained.summary["filters"]:
        before = [bool(base.records[i]["correct"][name]) for i in common]
        after = [bool(trained.records[i]["correct"][name]) for i in common]
        result["filters"][name] = {
            "base": sum(before) / len(common) if common else 0.0,
            "trained": sum(after) / len(common) if common else 0.0,
            **paired_difference(before, after),
        }
    for label, side in (("base", base), ("trained", trained)):
        result[label + "_behaviour"] = behaviour([side.records[i] for i in common], side.summary.get("max_new_tokens"))
    output.mkdir(parents=True, exist_ok=True)
    (output / COMPARISON_FILE).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result
