"""The health watch on runs that learn: a shipped recipe trained at several seeds should raise no alarm.

Each run trains in a temporary folder (removed afterwards); its metrics.jsonl is kept as text under
benchmarks/health_quiet/<recipe>-seed<S>.jsonl, and one line per run is appended to benchmarks/health_quiet.txt:
the recipe, seed, steps, first and last reward, and the signatures `grpo report` finds (none expected).
tests/test_health.py reads the kept metrics back through the same rules.

    python benchmarks/health_quiet.py recipes/demo.yaml --seeds 42 7
    python benchmarks/health_quiet.py recipes/demo_largest.yaml --seeds 42 7
    python benchmarks/health_quiet.py recipes/demo.yaml --seeds 42 7 --rescore   # the kept runs, today's rules
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEPT = ROOT / "benchmarks" / "health_quiet"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 7])
    parser.add_argument("--rescore", action="store_true", help="Score the kept metrics again with today's rules.")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from grpo_cli.runs.run_health import run_alarms

    KEPT.mkdir(exist_ok=True)
    name = Path(args.recipe).stem
    if args.rescore:
        return rescore(args.recipe, name, args.seeds)
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as work:
            run_dir = Path(work) / "run"
            command = ["grpo", "train", args.recipe, f"training.seed={seed}", f"training.output_dir={run_dir}"]
            print(" ".join(command), flush=True)
            done = subprocess.run(command, cwd=ROOT)
            rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            kept = KEPT / f"{name}-seed{seed}.jsonl"
            shutil.copyfile(run_dir / "metrics.jsonl", kept)
            alarms = run_alarms(run_dir, rows)
        steps = [r for r in rows if "reward" in r]
        line = (
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}  {args.recipe} seed {seed}  "
            f"exit {done.returncode}  {len(steps)} steps  "
            f"reward {steps[0]['reward']:.3f} -> {steps[-1]['reward']:.3f}  "
            f"signatures: {', '.join(f'{a.signature}@{a.step}' for a in alarms) or 'none'}  "
            f"({kept.relative_to(ROOT)})"
        )
        print(line, flush=True)
        with (ROOT / "benchmarks" / "health_quiet.txt").open("a") as out:
            out.write(line + "\n")


def rescore(recipe_file: str, name: str, seeds: list[int]) -> None:
    """The kept runs through the rules as they are now, with the shipped recipe's thresholds and weights."""
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.runs.health import diagnose
    from grpo_cli.runs.run_health import watch_args

    recipe = load_recipe(ROOT / recipe_file)
    groups = recipe.generation_batch_size // recipe.grpo.num_generations
    for seed in seeds:
        kept = KEPT / f"{name}-seed{seed}.jsonl"
        rows = [json.loads(line) for line in kept.read_text().splitlines()]
        alarms = diagnose(rows, **watch_args(recipe.training.health, recipe.rewards, groups))
        line = (
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}  {recipe_file} seed {seed}  rescored  "
            f"signatures: {', '.join(f'{a.signature}@{a.step}' for a in alarms) or 'none'}  ({kept.relative_to(ROOT)})"
        )
        print(line)
        with (ROOT / "benchmarks" / "health_quiet.txt").open("a") as out:
            out.write(line + "\n")


if __name__ == "__main__":
    main()
