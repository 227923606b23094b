"""What an SFT stage (`sft:`) costs on this CPU per 100 examples, and what it buys before any GRPO step.

Runs the SFT stage stage of recipes/demo_sft.yaml alone (SmolLM2-135M-Instruct, LoRA r16, reference solutions of
generated problems, `#### <number>` format) on N examples, then `grpo eval compare` of the SFT-trained adapter against
the base model on the same generated problems: the asked-format rate and strict-match (the number after `####`) are
what the SFT stage is for. Writes benchmarks/sft_cost.txt with the command, date, machine and load.

    python benchmarks/sft_cost.py [--examples 100] [--eval 50] [key=value overrides...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "demo_sft.yaml"
OUT = Path(__file__).with_suffix(".txt")


def machine() -> str:
    import torch

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    return f"{model}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--eval", type=int, default=50, help="generated problems evaluated, base and SFT-trained")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    from grpo_cli.eval.command import EvalRequest, run_eval
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.sft import early_examples, run_sft

    lines = [
        f"# python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}".rstrip(),
        f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {machine()}, python {platform.python_version()}",
        f"# load average at start (1, 5, 15 min): {load()}",
    ]
    with tempfile.TemporaryDirectory(prefix="sft-cost-") as tmp:
        overrides = [f"sft.count={args.examples}", f"training.output_dir={tmp}/run", *args.overrides]
        recipe = load_recipe(RECIPE, overrides)
        console = Console(stderr=True)
        started, cpu_started = time.perf_counter(), time.process_time()
        outcome = run_sft(recipe, console, resume=False, early=early_examples(recipe, False))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        folder = recipe.output_dir / "sft"
        metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        examples = json.loads((folder / "source.json").read_text())["examples"]
        train_s = sum(m["step_time_s"] for m in metrics)
        tokens = metrics[-1].get("num_tokens")
        lines += [
            f"recipe: recipes/demo_sft.yaml {' '.join(overrides[:1] + list(args.overrides))}",
            f"sft: {examples} examples, {len(metrics)} steps of {recipe.sft.per_device_train_batch_size}, "
            f"{tokens:.0f} tokens in all ({tokens / examples:.0f} per example), precision as the recipe resolves here",
            f"training steps: {train_s:.1f} s ({train_s / len(metrics):.2f} s a step); whole stage with model load, "
            f"examples and save: {wall:.1f} s",
            f"per 100 examples: {100 * train_s / examples:.1f} s of training steps, {100 * wall / examples:.1f} s "
            "with the fixed costs",
            # other processes share the CPU: CPU time (all threads) says what the stage itself consumed
            f"CPU time of the whole stage: {cpu:.1f} s ({100 * cpu / examples:.1f} s per 100 examples, all threads)",
            f"loss {metrics[0]['loss']:.3f} -> {metrics[-1]['loss']:.3f}; "
            f"mean token accuracy {metrics[0].get('mean_token_accuracy', float('nan')):.3f} -> "
            f"{metrics[-1].get('mean_token_accuracy', float('nan')):.3f}; "
            f"peak RSS {metrics[-1]['peak_memory_gb']:.2f} GiB",
        ]
        assert outcome.final_dir is not None
        request = EvalRequest(compare_run=folder, options={"eval.limit": args.eval})
        started = time.perf_counter()
        outcome = run_eval(request)
        lines.append(f"grpo eval compare RUN/sft --limit {args.eval} ({time.perf_counter() - started:.0f} s):")
        for result in outcome.results:
            summary = result.summary
            strict = summary["filters"]["strict-match"]
            flexible = summary["filters"]["flexible-extract"]
            lines.append(
                f"  {summary['target']:<8} format rate {100 * summary['format_rate']:5.1f}%  strict-match "
                f"{100 * strict['accuracy']:5.1f}% ({100 * strict['ci95'][0]:.1f}-{100 * strict['ci95'][1]:.1f})  "
                f"flexible-extract {100 * flexible['accuracy']:5.1f}%"
            )
        strict = outcome.comparison["filters"]["strict-match"]
        lines.append(
            f"  strict-match SFT-trained minus base, paired: {100 * strict['difference']:+.1f} pts "
            f"({100 * strict['low']:+.1f} to {100 * strict['high']:+.1f}), fixed {strict['fixed']}, "
            f"broken {strict['broken']}"
        )
    lines.append(f"# load average at end: {load()}")
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
