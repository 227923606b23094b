"""`grpo eval` in float32 against the training precision (bf16 where the hardware has it), same problems.

Runs `grpo eval` four times on the same problems: the base model and a trained LoRA run, each with
`model.mixed_precision=no` (float32, the adapter merged) and with the recipe's own setting (`auto`: bfloat16 on a
CPU with native bf16, the adapter kept unmerged). Prints generation tokens/s (from each summary.json) and how
many completions are identical between the two precisions, and how many are scored the same.

    python benchmarks/eval_precision.py RECIPE RUN_OR_CHECKPOINT [key=value ...] [--data FILE] [--limit 16]
        [--batch-size 16] [--max-new-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def grpo_eval(target: list[str], overrides: list[str], args, output: Path) -> tuple[dict, dict[int, dict]]:
    command = [
        sys.executable,
        "-m",
        "grpo_cli",
        "eval",
        *target,
        *overrides,
        "--data",
        args.data,
        "--limit",
        str(args.limit),
        f"eval.batch_size={args.batch_size}",
        f"eval.max_new_tokens={args.max_new_tokens}",
        "--output",
        str(output),
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((output / "summary.json").read_text())
    records = [json.loads(line) for line in (output / "predictions.jsonl").read_text().splitlines()]
    return summary, {r["index"]: r for r in records}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("run")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--data", default="openai/gsm8k")
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    print(f"# {args.limit} problems, batch {args.batch_size}, {args.max_new_tokens} new tokens, greedy")
    with tempfile.TemporaryDirectory() as tmp:
        for label, target in (("base", ["model", args.recipe]), ("trained", ["run", args.run])):
            results = {}
            for precision, extra in (("float32", ["model.mixed_precision=no"]), ("auto", [])):
                output = Path(tmp) / f"{label}-{precision}"
                summary, records = grpo_eval(target, [*args.overrides, *extra], args, output)
                settings = json.loads((output / "settings.json").read_text())
                computed = settings.get("compute_dtype", settings["dtype"])
                results[precision] = records
                session = summary["session"]
                print(
                    f"{label:8s} {computed:9s} {session['tokens_per_s']:6.1f} tokens/s  "
                    f"strict {summary['filters']['strict-match']['correct']:3d}  "
                    f"flexible {summary['filters']['flexible-extract']['correct']:3d}  of {summary['problems']}"
                )
            same_text = sum(
                results["float32"][i]["completion"] == results["auto"][i]["completion"] for i in results["float32"]
            )
            same_score = sum(
                results["float32"][i]["correct"] == results["auto"][i]["correct"] for i in results["float32"]
            )
            print(
                f"{label:8s} identical completions {same_text} of {len(results['float32'])}, "
                f"identically scored {same_score}"
            )


if __name__ == "__main__":
    main()
