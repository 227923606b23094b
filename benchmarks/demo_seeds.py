"""The offline demo at several seeds: does it learn correctness, or only brevity?

Each seed is one `grpo train recipes/demo.yaml` run (about 3 minutes here); printed per seed: wall time and the
mean total reward, correctness and completion length over the first and the last 8 steps (or 20% of the steps if
fewer), then the number of seeds whose correctness rose by at least 0.15.

    python benchmarks/demo_seeds.py --seeds 42,43,44,45,46 [key=value overrides...]
"""

from __future__ import annotations

import argparse

from demo_learning import run_demo

CORRECTNESS = "rewards/correctness/mean"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="42,43,44,45,46")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    print(f"overrides: {' '.join(args.overrides) or '(none)'}")
    print("seed  wall s  steps  reward first -> last  correctness first -> last  length first -> last")
    learned = 0
    seeds = [int(s) for s in args.seeds.split(",")]
    for seed in seeds:
        wall, rows = run_demo([f"training.seed={seed}", *args.overrides], quiet=True)
        rows = [r for r in rows if "reward" in r]
        window = min(8, max(1, round(len(rows) * 0.2)))
        first, last = rows[:window], rows[-window:]

        def mean(part, key):
            return sum(r.get(key, 0.0) for r in part) / len(part)

        gain = mean(last, CORRECTNESS) - mean(first, CORRECTNESS)
        learned += gain >= 0.15
        print(
            f"{seed:<5d} {wall:6.0f}  {len(rows):5d}  {mean(first, 'reward'):6.2f} -> {mean(last, 'reward'):4.2f}"
            f"          {mean(first, CORRECTNESS):6.2f} -> {mean(last, CORRECTNESS):4.2f}"
            f"             {mean(first, 'completions/mean_length'):5.1f} -> "
            f"{mean(last, 'completions/mean_length'):4.1f}",
            flush=True,
        )
    print(f"correctness rose by at least 0.15 at {learned} of {len(seeds)} seeds")


if __name__ == "__main__":
    main()
