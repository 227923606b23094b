"""The demos on problems they never trained on: base against trained, paired, from the CLI.

For each recipe and seed: `grpo train RECIPE training.seed=S` (the recipe as shipped otherwise), then
`grpo eval compare RUN` with the recipe's own eval settings (recipes/demo.yaml: 100 generated arithmetic problems
drawn with evaluation's seed, GSM8K's chat filters; recipes/demo_task.yaml: 400 problems of generated:parity's test
split, its verifier). A recipe's later seeds reuse its first base evaluation (`--base`): the same model on the same
problems. Appended to the log per run: wall time, the training batches' mean rewards over the first and the last 5
steps (what the model was rewarded for on training prompts, not accuracy), the validation curve where the recipe
validates, and base against trained accuracy on the held-out problems with the paired 95% interval of the change
(fixed and broken: problems it got right only after, only before), and with `--samples N` the same sampled at
temperature 1.0 (mean@N, pass@N). Each side's most common completion and its share show a collapse to one answer.

    python benchmarks/demo_heldout.py --recipes demo,demo_task --seeds 42 --samples 4 --log benchmarks/demo_heldout.txt

`--set KEY=VALUE` (repeatable) overrides the recipe in training and evaluation alike, for example
`--set model.mixed_precision=no` to train in float32 as a CPU without AVX512-BF16 does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpo_cli.runs.layout import COMPARISON_FILE, METRICS_FILE, SUMMARY_FILE  # noqa: E402

WINDOW = 5  # steps averaged at each end of a run: 20% of 24


def machine() -> str:
    names = [
        line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line
    ]
    cpu = names[0] if names else platform.processor()
    versions = ", ".join(f"{p} {version(p)}" for p in ("grpo-cli", "torch", "transformers", "trl", "peft"))
    flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    bf16 = "with" if "avx512_bf16" in flags.split() else "without"
    # The instruction sets the libraries may use, where they are capped (a CPU without AVX512 emulated on one with).
    caps = [
        f"{k}={os.environ[k]}"
        for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
        if k in os.environ
    ]
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    return (
        f"{cpu} ({bf16} AVX512-BF16{'; ' + ', '.join(caps) if caps else ''}), {os.cpu_count()} cores, "
        f"OMP_NUM_THREADS={threads}; {versions}"
    )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def grpo(*args: str) -> float:
    """Run one grpo command (its output to this console); its wall seconds."""
    start = time.perf_counter()
    subprocess.run([shutil.which("grpo") or "grpo", *args], check=True)
    return time.perf_counter() - start


def training_figures(rows: list[dict]) -> list[str]:
    steps = [r for r in rows if "loss" in r]
    first, last = steps[:WINDOW], steps[-WINDOW:]
    keys = ["reward"] + sorted(k for k in steps[0] if k.startswith("rewards/") and k.endswith("/mean"))
    keys.append("completions/mean_length")
    mean = lambda part, key: sum(r.get(key, 0.0) for r in part) / len(part)  # noqa: E731
    label = lambda key: key.removeprefix("rewards/").removesuffix("/mean")  # noqa: E731
    parts = [f"{label(k)} {mean(first, k):.2f} -> {mean(last, k):.2f}" for k in keys]
    span = f"steps 1-{WINDOW} -> {len(steps) - WINDOW + 1}-{len(steps)}"
    return [f"  training batches (rewards on training prompts, not accuracy), mean of {span}: " + ", ".join(parts)]


def validation_curve(rows: list[dict]) -> list[str]:
    validations = [r for r in rows if "val/problems" in r]
    if not validations:
        return []
    keys = [k for k in validations[0] if k.startswith("val/") and k.endswith("/accuracy")]
    return [
        f"  validation ({validations[0]['val/problems']} held-out problems, greedy), {k[4:-9]} by step: "
        + ", ".join(f"{r['step']}: {r[k]:.2f}" for r in validations)
        for k in keys
    ]


def comparison_lines(folder: Path) -> list[str]:
    """Base against trained, paired; greedy or sampled (mean@N with its paired interval, then pass@N)."""
    comparison = json.loads((folder / COMPARISON_FILE).read_text())
    trained = json.loads((folder / "trained" / SUMMARY_FILE).read_text())
    data, sampling = trained["data"], comparison.get("sampling")
    how = f"mean@{sampling['samples']} at T {sampling['temperature']}" if sampling else "greedy"
    lines = [
        f"  held out: {comparison['problems']} problems of {data['source']} ({data['split']}), "
        f"{trained['protocol']}, {how}"
    ]
    for name, f in comparison["filters"].items():
        counts = f"fixed {f['fixed']}, broken {f['broken']}" if "fixed" in f else "over per-problem fractions"
        lines.append(
            f"    {name}: base {f['base']:.3f} -> trained {f['trained']:.3f}, change {f['difference']:+.3f} "
            f"(paired 95% {f['low']:+.3f} to {f['high']:+.3f}; {counts})"
        )
        if "pass" in f:
            p = f["pass"]
            lines.append(
                f"    {name} pass@{sampling['samples']}: base {p['base']:.3f} -> trained {p['trained']:.3f} "
                f"(paired 95% {p['low']:+.3f} to {p['high']:+.3f})"
            )
    for label in ("base", "trained"):
        b = comparison[f"{label}_behaviour"]
        # comparison.json names each side's folder: a reused base (--base) lies in the first seed's folder.
        lines.append(
            f"    {label}: mean new tokens {b['mean_new_tokens']:.1f}, cut at the budget {b['cut_rate']:.2f}, "
            f"{most_common_answer(Path(comparison[label]))}"
        )
    return lines


def most_common_answer(folder: Path) -> str:
    """The completion given most often (stripped, lower case) and its share: a model that answers every question
    alike has collapsed, whatever its accuracy."""
    texts = []
    for line in (folder / "predictions.jsonl").read_text().splitlines():
        record = json.loads(line)
        texts += [s["completion"] for s in record["samples"]] if "samples" in record else [record["completion"]]
    answer, count = Counter(t.strip().lower() for t in texts).most_common(1)[0]
    return f"most common completion {answer[:30]!r} in {count / len(texts):.0%} of {len(texts)}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", default="demo,demo_task")
    parser.add_argument("--seeds", default="42")
    parser.add_argument(
        "--runs",
        default=str(Path(tempfile.gettempdir()) / "demo_heldout"),
        help="where the runs and evaluations are kept",
    )
    parser.add_argument("--log", default=str(ROOT / "benchmarks" / "demo_heldout.txt"))
    parser.add_argument("--samples", type=int, default=0, help="also compare mean@N at temperature 1.0")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe override")
    args = parser.parse_args()
    log = Path(args.log)
    command = "python benchmarks/demo_heldout.py " + " ".join(sys.argv[1:])
    header = [
        f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: {command}",
        f"# {machine()}",
        f"# load average at the start (1, 5, 15 min): {load()}",
    ]
    with log.open("a", encoding="utf-8") as out:
        out.write("\n".join(header) + "\n")
    for name in args.recipes.split(","):
        base = None
        for seed in (int(s) for s in args.seeds.split(",")):
            run = Path(args.runs) / f"{name}-s{seed}"
            shutil.rmtree(run, ignore_errors=True)
            recipe = ROOT / "recipes" / f"{name}.yaml"
            wall = grpo("train", str(recipe), f"training.seed={seed}", f"training.output_dir={run}", *args.set)
            rows = [json.loads(line) for line in (run / METRICS_FILE).read_text().splitlines()]
            folder = run / "heldout"
            reuse = ["--base", str(base)] if base else []
            eval_wall = grpo("eval", "compare", str(run), *reuse, "--output", str(folder), *args.set)
            base = base or folder / "base"
            sampled = run / "heldout_sampled"
            if args.samples:
                sampling = ["--samples", str(args.samples), "--temperature", "1.0"]
                grpo("eval", "compare", str(run), *sampling, "--output", str(sampled), *args.set)
            lines = [
                f"recipes/{name}.yaml seed {seed}: train {wall:.0f} s, compare {eval_wall:.0f} s, "
                f"load average after: {load()}",
                *training_figures(rows),
                *validation_curve(rows),
                *comparison_lines(folder),
                *(comparison_lines(sampled) if args.samples else []),
            ]
            with log.open("a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
            print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
