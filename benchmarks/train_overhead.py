"""Overhead of `grpo train` over a plain TRL script on the same configuration (the offline demo).

Both run as separate processes, alternating, `--rounds` times each. Step time is TRL's own `step_time`
metric (the same clock for both), median over steps 2..N; peak memory is each process's peak RSS on CPU.
Completions are forced to full length (`min_new_tokens`) in both: sampling is chaotic, so two runs that
agree for a few steps can later draw completions of different lengths, and step time follows length.

    python benchmarks/train_overhead.py [--steps 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "recipes" / "demo.yaml"


def measure(command: list[str]) -> int:
    """Peak RSS (KiB) of one child process tree, measured in a fresh wrapper process."""
    wrapper = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", wrapper, *command], check=True, capture_output=True, text=True)
    return int(out.stdout.strip().splitlines()[-1])


def step_times(rows: list[dict]) -> list[float]:
    return [float(r["step_time"]) for r in rows if "step_time" in r and "loss" in r][1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from grpo_cli.models import resolve_model_path
    from grpo_cli.recipe.validation import load_recipe

    model_dir = resolve_model_path(load_recipe(DEMO).model.name)  # the same converted model for both
    grpo = shutil.which("grpo")
    results: dict[str, dict[str, list]] = {"grpo train": {"times": [], "rss": [], "rewards": []},
                                           "plain TRL": {"times": [], "rss": [], "rewards": []}}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            ours = Path(tmp) / f"ours{round_}"
            rss = measure([grpo, "train", str(DEMO), f"training.output_dir={ours}", f"training.max_steps={args.steps}",
                           "training.save_steps=100000", "trl.generation_kwargs.min_new_tokens=32"])
            rows = [json.loads(line) for line in (ours / "metrics.jsonl").read_text().splitlines()]
            results["grpo train"]["times"] += step_times(rows)
            results["grpo train"]["rss"].append(rss)
            results["grpo train"]["rewards"].append([r["reward"] for r in rows])

            plain = Path(tmp) / f"plain{round_}"
            plain.mkdir()
            rss = measure([sys.executable, str(ROOT / "benchmarks" / "plain_trl.py"), model_dir, str(args.steps), str(plain)])
            rows = json.loads((plain / "log_history.json").read_text())
            results["plain TRL"]["times"] += step_times(rows)
            results["plain TRL"]["rss"].append(rss)
            results["plain TRL"]["rewards"].append([r["reward"] for r in rows if "reward" in r])

    summary = {}
    for name, r in results.items():
        summary[name] = (statistics.median(r["times"]), max(r["rss"]) / 2**20)
        print(f"{name:10s}: median step {summary[name][0]:.3f} s over {len(r['times'])} steps, "
              f"peak RSS {summary[name][1]:.3f} GiB")
    (t_ours, m_ours), (t_plain, m_plain) = summary["grpo train"], summary["plain TRL"]
    print(f"step time: grpo train / plain = {t_ours / t_plain:.3f}")
    print(f"peak memory: grpo train / plain = {m_ours / m_plain:.3f}")
    same = results["grpo train"]["rewards"] == results["plain TRL"]["rewards"]
    print(f"identical per-step rewards in both runs: {same} (identical for the first steps; sampling then "
          "amplifies last-bit differences, which is why lengths are forced)")


if __name__ == "__main__":
    main()
