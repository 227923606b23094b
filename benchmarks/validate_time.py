"""Wall time of `grpo validate` on a recipe without a `trl:` section (target: under 1.5 s).

python benchmarks/validate_time.py [RECIPE] [--runs 10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(ROOT / "recipes" / "qwen2.5" / "0.5b_lora.yaml"))
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    grpo = shutil.which("grpo")
    assert grpo, "install the package first: pip install -e ."
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([grpo, "validate", args.recipe], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    print(
        f"grpo validate {args.recipe}: {args.runs} runs, median {statistics.median(times):.3f} s, "
        f"max {max(times):.3f} s (target < 1.5 s)"
    )


if __name__ == "__main__":
    main()
