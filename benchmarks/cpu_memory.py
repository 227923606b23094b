"""Peak RSS of real GRPO steps on the CPU beside their peak live tensors, per configuration and allocator setting.

Each configuration runs in a fresh child process: `preflight.measure_steps` (the recipe at full completion length,
the last step tracked for live tensor bytes), then the child's peak RSS from the kernel (ru_maxrss). The allocator
settings are given to the child through its environment (glibc's tunables, or another malloc preloaded); `tool` is
what grpo itself runs with on a CPU.

    python benchmarks/cpu_memory.py [--configs demo,demo_long] [--allocators default,tool] [--steps 3]
    # prints a table and appends rows to benchmarks/cpu_memory.jsonl
    python benchmarks/cpu_memory.py --report   # grpo plan's peak RSS beside each measured one
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QWEN = Path.home() / ".cache" / "grpo" / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
DEMO = str(ROOT / "recipes" / "demo.yaml")
QWEN_RECIPE = str(ROOT / "recipes" / "gsm8k" / "qwen2.5_coder_0.5b_cpu.yaml")
QWEN_DATA = "data.source=generated"

# name -> (recipe, overrides). SmolLM2-135M (the demo) and Qwen2.5-Coder-0.5B, LoRA and full, checkpointing on
# and off, two lengths.
CONFIGS = {
    "demo": (DEMO, []),
    "demo_long": (DEMO, ["grpo.max_completion_length=128"]),
    "demo_ckpt": (DEMO, ["model.gradient_checkpointing=true", "grpo.max_completion_length=128"]),
    "demo_full": (DEMO, ["lora=null", "training.learning_rate=1e-6"]),
    "qwen_small": (
        QWEN_RECIPE,
        [
            f"model.name={QWEN}",
            QWEN_DATA,
            "grpo.num_generations=4",
            "training.per_device_train_batch_size=8",
            "grpo.max_completion_length=64",
        ],
    ),
    "qwen_small_nockpt": (
        QWEN_RECIPE,
        [
            f"model.name={QWEN}",
            QWEN_DATA,
            "grpo.num_generations=4",
            "training.per_device_train_batch_size=8",
            "grpo.max_completion_length=64",
            "model.gradient_checkpointing=false",
        ],
    ),
    "qwen_issue": (QWEN_RECIPE, [f"model.name={QWEN}", QWEN_DATA, "grpo.max_completion_length=256"]),
    # the same in float32 throughout, as the row measured it (13.3 GB on 2026-11-23)
    "qwen_issue_fp32": (
        QWEN_RECIPE,
        [f"model.name={QWEN}", QWEN_DATA, "grpo.max_completion_length=256", "model.mixed_precision=no"],
    ),
}
ALLOCATORS = {
    "default": {},  # glibc as it comes: the mmap threshold grows after each large free
    "mmap64k": {"MALLOC_MMAP_THRESHOLD_": "65536"},
    "arena2": {"MALLOC_ARENA_MAX": "2"},
    "mmap1m": {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)},
    "mmap4m": {"MALLOC_MMAP_THRESHOLD_": str(4 << 20)},
    "mmap1m_top": {"MALLOC_MMAP_THRESHOLD_": str(1 << 20), "MALLOC_TOP_PAD_": str(64 << 20)},
    # mimalloc from PyPI (pip install cmeel-mimalloc), preloaded in place of glibc's malloc
    "mimalloc": {
        "LD_PRELOAD": str(
            Path(sys.prefix)
            / "lib"
            / f"python{sys.version_info.major}.{sys.version_info.minor}"
            / "site-packages"
            / "cmeel.prefix"
            / "lib"
            / "libmimalloc.so"
        )
    },
    "mimalloc_purge0": {
        "LD_PRELOAD": str(
            Path(sys.prefix) / "lib" / f"python{sys.version_info.major}."
            f"{sys.version_info.minor}" / "site-packages" / "cmeel.prefix" / "lib" / "libmimalloc.so"
        ),
        "MIMALLOC_PURGE_DELAY": "0",
    },
    "trim": {},
    "trim_mmap1m": {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)},
    "mmap256k": {"MALLOC_MMAP_THRESHOLD_": str(256 << 10)},
    "mmap64k_thp": {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536:glibc.malloc.hugetlb=1"},
    "mmap1m_thp": {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1048576:glibc.malloc.hugetlb=1"},
    "tool": {},  # what grpo itself runs with on a CPU (grpo_cli/process/allocator.py: mimalloc preloaded)
}

CHILD = r"""
import json, resource, sys, tempfile, time
from pathlib import Path
allocator = sys.argv[3]
if allocator.startswith("trim"):  # give freed heap pages back at each phase boundary
    import ctypes
    from trl import GRPOTrainer
    libc = ctypes.CDLL("libc.so.6")
    original = GRPOTrainer._generate_and_score_completions
    def trimmed(self, *a, **k):
        libc.malloc_trim(0)
        try:
            return original(self, *a, **k)
        finally:
            libc.malloc_trim(0)
    GRPOTrainer._generate_and_score_completions = trimmed
from grpo_cli.process import optional_libraries
from grpo_cli.recipe.validation import load_recipe
recipe = load_recipe(sys.argv[1], json.loads(sys.argv[2]), scope="preflight")
if allocator == "tool":  # as the grpo command runs: bitsandbytes left out when the recipe does not use it
    optional_libraries.skip_unused_bitsandbytes(recipe.quantization, recipe.training.optim, own_process=True)
from grpo_cli.progress import quiet_libraries
from grpo_cli.preflight.measure import measure_steps
quiet_libraries()
started = time.perf_counter()
with tempfile.TemporaryDirectory() as tmp:
    m = measure_steps(recipe, Path(tmp), int(sys.argv[4]))
ran = m.recipe
print(json.dumps({"live_peak": m.peak_bytes, "rss_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "step_s": m.step_seconds, "generation_s": m.generation_seconds,
                  "wall_s": time.perf_counter() - started, "batch": ran.generation_batch_per_process,
                  "completion": ran.grpo.max_completion_length, "prompt": ran.data.max_prompt_length,
                  "checkpointing": ran.model.gradient_checkpointing, "method": ran.method}))
"""


def run(config: str, allocator: str, steps: int) -> dict:
    recipe, overrides = CONFIGS[config]
    from grpo_cli.process.allocator import ALLOCATOR_ENV, preload_env

    env = {
        k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k not in (ALLOCATOR_ENV, "LD_PRELOAD")
    }
    env.update((preload_env() or {}) if allocator == "tool" else {ALLOCATOR_ENV: "system", **ALLOCATORS[allocator]})
    done = subprocess.run(
        [sys.executable, "-c", CHILD, recipe, json.dumps(overrides), allocator, str(steps)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if done.returncode:
        raise SystemExit(f"{config}/{allocator} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def latest_tool_rows(path: Path) -> dict[str, dict]:
    """The newest measurement of each configuration with grpo's own allocator."""
    latest = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row["allocator"] == "tool" and row["config"] in CONFIGS:
            latest[row["config"]] = row
    return latest


def recipe_as_ran(config: str, directory: Path):
    """The configuration's recipe as measure_steps runs it (fixed-length prompts, full completions), and its
    architecture: what the plan is made for."""
    from grpo_cli import models
    from grpo_cli.plan import architectures
    from grpo_cli.preflight.measure import calibration_recipe
    from grpo_cli.recipe.validation import load_recipe

    recipe = load_recipe(CONFIGS[config][0], CONFIGS[config][1], scope="plan")
    ran = calibration_recipe(recipe, models.load_tokenizer(recipe.model), directory)
    return ran, architectures.resolve(ran.model)


def report(path: Path) -> None:
    """`grpo plan`'s CPU figures for every configuration measured with grpo's own allocator, beside the measurement."""
    import tempfile

    from grpo_cli.plan.memory import GIB, memory_plan
    from grpo_cli.progress import quiet_libraries

    quiet_libraries()
    print(f"{'config':18s} {'live':>6s} {'plan':>6s} {'RSS':>6s} {'plan RSS':>8s} {'error':>6s}   (GiB)")
    for config, row in latest_tool_rows(path).items():
        with tempfile.TemporaryDirectory() as tmp:
            plan = memory_plan(*recipe_as_ran(config, Path(tmp)), "cpu")
        error = 100 * (plan.peak_rss - row["rss_peak"]) / row["rss_peak"]
        print(
            f"{config:18s} {row['live_peak'] / GIB:6.2f} {plan.peak_tensors / GIB:6.2f} {row['rss_peak'] / GIB:6.2f} "
            f"{plan.peak_rss / GIB:8.2f} {error:+5.1f}%"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", default="demo")
    parser.add_argument("--allocators", default="default,tool")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--report", action="store_true", help="only compare the plan with the rows measured so far")
    args = parser.parse_args()
    out = ROOT / "benchmarks" / "cpu_memory.jsonl"
    if args.report:
        report(out)
        return
    print(f"{'config':18s} {'allocator':9s} {'live GiB':>9s} {'RSS GiB':>8s} {'RSS/live':>8s} {'step s':>7s}")
    for config in args.configs.split(","):
        for allocator in args.allocators.split(","):
            r = run(config, allocator, args.steps)
            gib = 2**30
            row = {
                "config": config,
                "allocator": allocator,
                "overrides": [o.replace(str(QWEN), "$M") for o in CONFIGS[config][1]],  # no machine path kept
                **r,
                "date": time.strftime("%Y-%m-%d"),
            }
            with out.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            print(
                f"{config:18s} {allocator:9s} {r['live_peak'] / gib:9.3f} {r['rss_peak'] / gib:8.3f} "
                f"{r['rss_peak'] / r['live_peak']:8.2f} {r['step_s'][-1]:7.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
