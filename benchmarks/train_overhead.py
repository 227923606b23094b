"""`grpo train` against a plain TRL script on the same configuration (the offline demo, or Qwen2.5-0.5B).

Both run as separate processes, alternating, `--rounds` times each. Step time is TRL's own `step_time`
metric (the same clock for both), median over steps 2..N; peak memory is each process's peak RSS on CPU.
Completions are forced to full length (`min_new_tokens`) in both: sampling is chaotic, so two runs that
agree for a few steps can later draw completions of different lengths, and step time follows length.

    python benchmarks/train_overhead.py [--steps 10] [--rounds 2]
    python benchmarks/train_overhead.py --config qwen --model "$(bash benchmarks/models/qwen2.5_coder_0.5b.sh)" \
        --steps 3 --rounds 1
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


# Each configuration as recipe overrides for `grpo train` and the same settings as plain_trl.py options.
CONFIGS = {
    "demo": ([], []),
    # Qwen2.5-Coder-0.5B-Instruct, LoRA r16, 2 prompts x 8 completions of 128 tokens, gradient checkpointing on.
    "qwen": (
        [
            "grpo.num_generations=8",
            "training.per_device_train_batch_size=16",
            "grpo.max_completion_length=128",
            "model.gradient_checkpointing=true",
        ],
        ["--generations", "8", "--batch", "16", "--completion", "128", "--checkpointing"],
    ),
}
# Plain TRL twice: float32 as the recipe's weights (what grpo train ran before it chose precision by hardware), and
# the script written the obvious way, leaving bf16 to TRL's default (True: autocast on any hardware).
PLAIN_VARIANTS = {"plain TRL, float32": ["--mixed", "no"], "plain TRL, TRL's default bf16": ["--mixed", "trl-default"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", choices=sorted(CONFIGS), default="demo")
    parser.add_argument("--model", help="model.name for the run (the qwen configuration: the assembled .gguf)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--plain", choices=sorted(PLAIN_VARIANTS), action="append", help="plain TRL variants to run (default: both)"
    )
    args = parser.parse_args()
    from grpo_cli.models import resolve_model_path
    from grpo_cli.recipe.validation import load_recipe

    overrides, plain_options = CONFIGS[args.config]
    if args.model:
        overrides = [f"model.name={args.model}", *overrides]
    model_dir = resolve_model_path(load_recipe(DEMO, overrides).model.name)  # the same converted model for all
    completion = load_recipe(DEMO, overrides).grpo.max_completion_length
    grpo = shutil.which("grpo")
    names = ["grpo train", *(args.plain or PLAIN_VARIANTS)]
    results = {name: {"times": [], "rss": [], "rewards": []} for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            ours = Path(tmp) / f"ours{round_}"
            rss = measure(
                [
                    grpo,
                    "train",
                    str(DEMO),
                    *overrides,
                    f"training.output_dir={ours}",
                    f"training.max_steps={args.steps}",
                    "training.save_steps=100000",
                    f"trl.generation_kwargs.min_new_tokens={completion}",
                ]
            )
            rows = [json.loads(line) for line in (ours / "metrics.jsonl").read_text().splitlines()]
            results["grpo train"]["times"] += step_times(rows)
            results["grpo train"]["rss"].append(rss)
            results["grpo train"]["rewards"].append([r["reward"] for r in rows])
            for i, name in enumerate(names[1:]):
                plain = Path(tmp) / f"plain{round_}_{i}"
                plain.mkdir()
                rss = measure(
                    [
                        sys.executable,
                        str(ROOT / "benchmarks" / "plain_trl.py"),
                        model_dir,
                        str(args.steps),
                        str(plain),
                        *plain_options,
                        *PLAIN_VARIANTS[name],
                    ]
                )
                rows = json.loads((plain / "log_history.json").read_text())
                results[name]["times"] += step_times(rows)
                results[name]["rss"].append(rss)
                results[name]["rewards"].append([r["reward"] for r in rows if "reward" in r])

    summary = {}
    for name, r in results.items():
        summary[name] = (statistics.median(r["times"]), max(r["rss"]) / 2**20)
        print(
            f"{name:30s}: median step {summary[name][0]:7.3f} s over {len(r['times'])} steps, "
            f"peak RSS {summary[name][1]:.3f} GiB"
        )
    t_ours, m_ours = summary["grpo train"]
    for name in names[1:]:
        t_plain, m_plain = summary[name]
        print(
            f"grpo train / {name}: step time {t_ours / t_plain:.3f}, peak memory {m_ours / m_plain:.3f}, "
            f"identical per-step rewards: {results['grpo train']['rewards'] == results[name]['rewards']}"
        )


if __name__ == "__main__":
    main()
