"""Re-score two `grpo eval` outputs with lm-eval's gsm8k filters, paired problem by problem.

`grpo eval`'s chat protocol extracts answers its own way (the recipe's marker, the last number). The GSM8K proof is
judged by lm-eval's two regexes instead (its gsm8k.yaml: strict-match `#### (-?[0-9.,]+)`, first match;
flexible-extract `(-?[$0-9.,]{2,})|(-?[0-9]+)`, last match; exact_match after dropping `,`, `$`, a trailing `.`).
This reads the completions in each folder's predictions.jsonl, applies those filters (rewards/answers.py, checked
against lm-eval itself in benchmarks/eval_vs_lm_eval.txt) and prints accuracy, Wilson interval and the paired
95% interval of the change on the problems both folders hold.

    python benchmarks/lm_eval_rescore.py BASE_DIR TRAINED_DIR [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpo_cli.eval.stats import paired_difference, wilson_interval  # noqa: E402
from rewards.gsm8k_task import LM_EVAL_FLEXIBLE, LM_EVAL_STRICT, lm_eval_exact_match, regex_filter  # noqa: E402

FILTERS = {
    "strict-match": lambda text: regex_filter(text, LM_EVAL_STRICT),
    "flexible-extract": lambda text: regex_filter(text, LM_EVAL_FLEXIBLE, group_select=-1),
}


def rescored(folder: Path) -> dict[int, dict[str, bool]]:
    """Problem index -> whether each lm-eval filter's answer matches the gold answer."""
    results = {}
    for line in (folder / "predictions.jsonl").read_text().splitlines():
        record = json.loads(line)
        results[record["index"]] = {
            name: lm_eval_exact_match(extract(record["completion"]), record["gold"])
            for name, extract in FILTERS.items()
        }
    return results


def compare(base_dir: Path, trained_dir: Path) -> dict:
    base, trained = rescored(base_dir), rescored(trained_dir)
    shared = sorted(base.keys() & trained.keys())
    report = {"base": str(base_dir), "trained": str(trained_dir), "problems": len(shared), "filters": {}}
    for name in FILTERS:
        before = [base[i][name] for i in shared]
        after = [trained[i][name] for i in shared]
        report["filters"][name] = {
            "base": {"correct": sum(before), "ci95": wilson_interval(sum(before), len(shared))},
            "trained": {"correct": sum(after), "ci95": wilson_interval(sum(after), len(shared))},
            "paired": paired_difference(before, after),
        }
    return report


def table(report: dict) -> str:
    n = report["problems"]
    lines = [f"lm-eval filters on {n} problems both folders hold ({report['base']} -> {report['trained']})"]
    for name, result in report["filters"].items():
        sides = []
        for side in ("base", "trained"):
            correct, (low, high) = result[side]["correct"], result[side]["ci95"]
            sides.append(f"{side} {correct / n:.1%} ({low:.1%}-{high:.1%}, {correct})")
        paired = result["paired"]
        lines.append(
            f"{name:17} {sides[0]}  {sides[1]}  change {paired['difference'] * 100:+.1f} pts, paired 95% "
            f"{paired['low'] * 100:+.1f} to {paired['high'] * 100:+.1f} "
            f"({paired['fixed']} fixed, {paired['broken']} broken)"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("trained", type=Path)
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = parser.parse_args()
    report = compare(args.base, args.trained)
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
