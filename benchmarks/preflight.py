"""`grpo preflight` on the demo: wall time of the whole command (target at most 90 s, model load included), and its
measured peak against the calibration's own measurement of the same configuration (benchmarks/memory.py's method:
two steps under the live-tensor tracker, in a fresh process).

    python benchmarks/preflight.py [--recipe recipes/demo.yaml]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CALIBRATION = """
import json, sys
from grpo_cli.preflight.measure import measure_peak
from grpo_cli.recipe.validation import load_recipe
peak, _ = measure_peak(load_recipe(sys.argv[1]))
print(json.dumps({"peak_gib": peak / 2**30}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "demo.yaml")
    args = parser.parse_args()

    started = time.perf_counter()
    done = subprocess.run(
        [shutil.which("grpo") or "grpo", "preflight", str(args.recipe), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - started
    result = json.loads(done.stdout)
    calibration = subprocess.run(
        [sys.executable, "-c", CALIBRATION, str(args.recipe)], capture_output=True, text=True, check=True
    )
    reference = json.loads(calibration.stdout.strip().splitlines()[-1])["peak_gib"]

    print(f"grpo preflight {args.recipe.name}: {wall:.1f} s wall (target <= 90 s; {result['seconds']} s inside)")
    print(
        f"measured peak {result['measured_peak_gib']:.4f} GiB; benchmarks/memory.py's method "
        f"{reference:.4f} GiB ({100 * (result['measured_peak_gib'] - reference) / reference:+.2f}%); "
        f"plan {result['planned_peak_gib']:.4f} GiB ({result['peak_error_pct']:+.2f}%)"
    )
    print(
        f"step {result['step_s']} s (generation {result['generation_s']} s), {result['total_steps']} steps: "
        f"ETA {result['eta_s'] / 60:.1f} min (at most {result['eta_worst_s'] / 60:.1f} min)"
    )
    print(
        f"signal: {result['prompts']} prompts, {result['completions']} completions, zero-variance share "
        f"{result['zero_variance_share']:.2f}, truncated {result['truncated_share']:.2f}, mean length "
        f"{result['mean_completion_tokens']} tokens"
    )
    for reward in result["rewards"]:
        print(
            f"  {reward['name']}: mean {reward['mean']:.3f} std {reward['std']:.3f} "
            f"[{reward['min']:.3f}, {reward['max']:.3f}] failed {reward['failed']}"
        )
    for advice in result["advice"]:
        print(f"  advice: {advice['reason']} {' '.join(advice['overrides'])}")


if __name__ == "__main__":
    main()
