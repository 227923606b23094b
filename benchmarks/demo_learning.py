"""Run the offline demo end to end and report whether it learned.

Prints wall time, and the mean total reward over the first and the last 20% of steps.

    python benchmarks/demo_learning.py [key=value overrides...]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_demo(overrides: list[str], quiet: bool = False) -> tuple[float, list[dict]]:
    """One `grpo train recipes/demo.yaml` run in a temporary directory: wall seconds and its metrics.jsonl rows."""
    grpo = shutil.which("grpo")
    assert grpo, "install the package first: pip install -e ."
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "demo"
        start = time.perf_counter()
        subprocess.run(
            [grpo, "train", str(ROOT / "recipes" / "demo.yaml"), f"training.output_dir={run_dir}", *overrides],
            check=True,
            capture_output=quiet,
        )
        wall = time.perf_counter() - start
        return wall, [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    wall, rows = run_demo(sys.argv[1:])
    steps = len(rows)
    fifth = max(1, round(steps * 0.2))
    first, last = rows[:fifth], rows[-fifth:]
    mean = lambda part: sum(r["reward"] for r in part) / len(part)  # noqa: E731
    print(f"demo: {steps} steps in {wall:.0f} s wall ({wall / 60:.1f} min)")
    print(f"mean total reward, first 20% (steps {first[0]['step']}-{first[-1]['step']}): {mean(first):.3f}")
    print(f"mean total reward, last 20%  (steps {last[0]['step']}-{last[-1]['step']}): {mean(last):.3f}")
    for key in sorted(k for k in rows[0] if k.startswith("rewards/") and k.endswith("/mean")):
        print(f"  {key}: {sum(r[key] for r in first) / len(first):.3f} -> {sum(r[key] for r in last) / len(last):.3f}")


if __name__ == "__main__":
    main()
