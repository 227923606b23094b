"""`grpo eval` with the recipe's tools against the same evaluation without them: same model, same problems, same
system prompt, same engine. Prints generation tokens/s of each, and with tools the calls, failed calls and malformed
attempts per problem and the turns per problem (the model's rate of calling the tool before any training).

    M=$(bash benchmarks/models/qwen2.5_coder_0.5b.sh)
    python benchmarks/tool_eval.py recipes/gsm8k/qwen2.5_coder_0.5b_calculator_cpu.yaml model.name=$M \
        --data ../shared/data/gsm8k/test.jsonl --limit 32 --output benchmarks/tool_eval

The two evaluations are kept under --output (`tools/`, `no_tools/`); rerunning continues them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def grpo_eval(recipe: str, overrides: list[str], args, output: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "grpo_cli",
        "eval",
        "model",
        recipe,
        *overrides,
        "--data",
        args.data,
        "--limit",
        str(args.limit),
        "--output",
        str(output),
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return json.loads((output / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--data", default="openai/gsm8k")
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    runs = {
        "tools": grpo_eval(args.recipe, args.overrides, args, args.output / "tools"),
        "no_tools": grpo_eval(args.recipe, [*args.overrides, "tools=[]"], args, args.output / "no_tools"),
    }
    print(f"# {args.recipe}, {args.limit} problems of {args.data}, greedy, chat protocol")
    print("| evaluation | problems | tokens/s (last session) | flexible-extract | strict-match | mean tokens |")
    print("|---|---|---|---|---|---|")
    for label, s in runs.items():
        f = s["filters"]
        print(
            f"| {label} | {s['problems']} | {s['session']['tokens_per_s']:.1f} | "
            f"{f['flexible-extract']['correct']}/{s['problems']} | {f['strict-match']['correct']}/{s['problems']} | "
            f"{s['mean_new_tokens']:.0f} |"
        )
    tools = runs["tools"].get("tools") or {}
    print("tools: " + ", ".join(f"{k} {v:.3f}" for k, v in tools.items()))
    print(
        f"tool loop tokens/s / plain tokens/s: "
        f"{runs['tools']['session']['tokens_per_s'] / runs['no_tools']['session']['tokens_per_s']:.2f}"
    )


if __name__ == "__main__":
    main()
