"""`grpo train` with mimalloc giving freed pages back with MADV_FREE (as `grpo train` does where the plan leaves room,
as on a machine with this one's RAM) against MADV_DONTNEED (mimalloc's default, and grpo's where memory is tight): step
time, page faults, system CPU time, peak RSS, and whether every step's rewards agree.

A GRPO step on a CPU frees and re-allocates the same large buffers (activations, logits, the sampling draws) every
step. mimalloc purges freed memory after a second; with MADV_DONTNEED the kernel unmaps it, and the next allocation
faults every 4 KiB page back in, zero-filled, in the kernel. With MADV_FREE the pages stay mapped until the kernel
needs them elsewhere, so taking them again costs nothing. Each variant runs as its own `grpo train` process,
alternating, `--rounds` times.

    python benchmarks/allocator_purge.py [--steps 6] [--rounds 2] [overrides ...]
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/allocator_purge.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "recipes" / "demo.yaml"
# name -> environment on top of what `grpo` sets itself (grpo_cli/process/allocator.py keeps a value given here)
VARIANTS = {
    "as shipped (MADV_FREE where there is room)": {},
    "MIMALLOC_PURGE_DECOMMITS=1 (MADV_DONTNEED)": {"MIMALLOC_PURGE_DECOMMITS": "1"},
}
RUSAGE = (
    "import json, resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, "
    "stderr=subprocess.DEVNULL); u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print(json.dumps({'user': u.ru_utime, 'sys': u.ru_stime, 'faults': u.ru_minflt, 'rss_kib': u.ru_maxrss}))"
)


def one_run(overrides: list[str], steps: int, out: Path, env: dict[str, str]) -> dict:
    """One `grpo train` process: its rusage and its metrics rows."""
    command = [shutil.which("grpo") or "grpo", "train", str(DEMO), *overrides]
    command += [f"training.output_dir={out}", f"training.max_steps={steps}", "training.save_steps=100000"]
    done = subprocess.run(
        [sys.executable, "-c", RUSAGE, *command], check=True, capture_output=True, text=True, env={**os.environ, **env}
    )
    usage = json.loads(done.stdout.strip().splitlines()[-1])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    usage["rows"] = [r for r in rows if "loss" in r]
    return usage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="recipe overrides for recipes/demo.yaml (key=value)")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for i, (name, env) in enumerate(VARIANTS.items()):
                runs[name].append(one_run(args.overrides, args.steps, Path(tmp) / f"r{round_}_{i}", env))
    for name, done in runs.items():
        steps = [r["step_time_s"] for run in done for r in run["rows"][1:]]  # the first step warms up
        generation = [r["generation_s"] for run in done for r in run["rows"][1:]]
        print(
            f"{name:44s} median step {statistics.median(steps):6.3f} s (generation {statistics.median(generation):6.3f}"
            f" s) over {len(steps)} steps; per run: sys {statistics.median(r['sys'] for r in done):5.1f} s, "
            f"user {statistics.median(r['user'] for r in done):5.1f} s, page faults "
            f"{statistics.median(r['faults'] for r in done) / 1e6:5.2f} M, peak RSS "
            f"{max(r['rss_kib'] for r in done) / 2**20:.3f} GiB"
        )
    rewards = {name: [[r["reward"] for r in run["rows"]] for run in done] for name, done in runs.items()}
    first, *others = rewards.values()
    print(f"identical per-step rewards: {all(other == first for other in others)}")


if __name__ == "__main__":
    main()
