"""`grpo plan`'s figure for the data at hand against the peak RSS of a real run that meets the worst batch it bounds.

For each case: `grpo plan --device cpu --json` on the recipe's own data (the peak at the longest prompt that survives
the recipe's filters, and the bound at its limits), then a real `grpo train` of 2 steps measured from outside by
`/usr/bin/time -v` (maximum resident set size). The run is made to meet the batch the plan sizes: every completion is
forced to the full budget (`trl.generation_kwargs.min_new_tokens`), and its data file holds the data's longest
surviving prompt among just enough prompts for one step, so the first batch holds it whatever TRL's sampler draws.

    python benchmarks/plan_for_data.py                 # every case not measured yet
    python benchmarks/plan_for_data.py --case demo     # one case (again)
    python benchmarks/plan_for_data.py --timing        # how long `grpo plan` takes, cached and not
    python benchmarks/plan_for_data.py --report        # the table again, with the plan as it is now
    # results: benchmarks/plan_for_data.jsonl (one line per measurement), table: benchmarks/plan_for_data.txt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QWEN = Path.home() / ".cache" / "grpo" / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GSM8K_TRAIN = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
RESULTS = ROOT / "benchmarks" / "plan_for_data.jsonl"
TABLE = ROOT / "benchmarks" / "plan_for_data.txt"

# name -> (recipe, overrides, completion budget)
CASES = {
    "demo": ("recipes/demo.yaml", [], 32),
    "demo_64": ("recipes/demo.yaml", ["grpo.max_completion_length=64"], 64),
    "qwen_gsm8k": (
        "recipes/gsm8k/qwen2.5_coder_0.5b_cpu.yaml",
        [f"model.name={QWEN}", f"data.source={GSM8K_TRAIN}"],
        448,
    ),
    # HELD OUT: configurations the plan's constants were not fitted to (memory_fit.py fits on the three above and on
    # cpu_memory.py's); the demo model, so each takes minutes. Memory does not depend on the CPU share: they may run
    # beside another job (their wall time then does).
    "r64_c96": ("recipes/demo.yaml", ["lora.r=64", "lora.alpha=128", "grpo.max_completion_length=96"], 96),
    "beta_c64": ("recipes/demo.yaml", ["grpo.beta=0.04", "grpo.max_completion_length=64"], 64),
    "full_gc_c128": (
        "recipes/demo.yaml",
        ["lora=null", "model.gradient_checkpointing=true", "grpo.max_completion_length=128"],
        128,
    ),
    "g4_accum4_c128": (
        "recipes/demo.yaml",
        [
            "grpo.num_generations=4",
            "training.per_device_train_batch_size=4",
            "training.gradient_accumulation_steps=4",
            "grpo.max_completion_length=128",
        ],
        128,
    ),
    "full_c96_b8": (
        "recipes/demo.yaml",
        [
            "lora=null",
            "grpo.max_completion_length=96",
            "training.per_device_train_batch_size=8",
            "training.gradient_accumulation_steps=2",
        ],
        96,
    ),
    "smollm2_gsm8k": (
        "recipes/gsm8k/smollm2_135m_cpu.yaml",
        [
            f"data.source={GSM8K_TRAIN}",
            "grpo.max_completion_length=64",
            "training.per_device_train_batch_size=8",
            "training.gradient_accumulation_steps=2",
        ],
        64,
    ),
}
FITTED = {"demo", "demo_64", "qwen_gsm8k"}


def plan(recipe: str, overrides: list[str]) -> dict:
    done = subprocess.run(
        ["grpo", "plan", recipe, *overrides, "--device", "cpu", "--json"], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode:
        sys.exit(f"grpo plan failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def worst_first_batch(recipe_path: str, overrides: list[str], folder: Path) -> tuple[Path, int]:
    """A data file whose one step of prompts includes the data's longest surviving prompt; its token count."""
    from grpo_cli import data, models
    from grpo_cli.recipe.validation import load_recipe

    recipe = load_recipe(ROOT / recipe_path, overrides)
    tokenizer = models.tokenizer_without_weights(recipe.model)
    prepared = data.prepare(recipe.data, tokenizer, seed=recipe.training.seed)
    order = sorted(range(len(prepared.prompt_lengths)), key=lambda i: -prepared.prompt_lengths[i])
    per_step = recipe.generation_batch_size // recipe.grpo.num_generations
    rows = [
        {"question": prepared.dataset[i]["question"], "answer": f"#### {prepared.dataset[i]['answer']}"}
        for i in order[:per_step]
    ]
    path = folder / "worst_batch.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, prepared.prompt_lengths[order[0]]


def measure(name: str) -> dict:
    recipe, overrides, budget = CASES[name]
    planned = plan(recipe, overrides)
    with tempfile.TemporaryDirectory(prefix="plan-for-data-") as tmp:
        folder = Path(tmp)
        source, longest = worst_first_batch(recipe, overrides, folder)
        assert longest == planned["prompt_tokens"], (longest, planned["prompt_tokens"])
        run = [
            *overrides,
            f"data.source={source}",
            "data.limit=null",
            f"training.output_dir={folder / 'run'}",
            "training.max_steps=2",
            "training.save_steps=100",
            f"trl.generation_kwargs={{min_new_tokens: {budget}}}",
        ]
        started = time.time()
        # The memory the plan sizes: mimalloc unmapping what it gives back, as `grpo train` runs where the plan
        # leaves no room (grpo_cli/process/allocator.py keep_freed_pages), unless the caller chose.
        purge = {"MIMALLOC_PURGE_DECOMMITS": os.environ.get("MIMALLOC_PURGE_DECOMMITS", "1")}
        done = subprocess.run(
            ["/usr/bin/time", "-v", "grpo", "train", recipe, *run],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **purge},
        )
        wall = time.time() - started
        if done.returncode:
            sys.exit(f"grpo train failed: {done.stderr.strip()[-1500:]}")
        peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
        steps = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    precision = next((s["mixed_precision"] for s in steps if "mixed_precision" in s), "?")
    lengths = [s["completions/mean_length"] for s in steps if "completions/mean_length" in s]
    measured = peak_kib * 1024 / 2**30
    return {
        "case": name,
        "recipe": recipe,
        "overrides": overrides,
        "date": time.strftime("%Y-%m-%d"),
        "longest_prompt_tokens": planned["prompt_tokens"],
        "limit_prompt_tokens": planned["limits"]["prompt_tokens"],
        "completion_budget": budget,
        "mean_completion_tokens_seen": lengths,
        "plan_for_data_gib": planned["peak_rss_gib"],
        "plan_at_limits_gib": planned["limits"]["peak_rss_gib"],
        "measured_peak_rss_gib": round(measured, 3),
        "error_for_data": round(planned["peak_rss_gib"] / measured - 1, 4),
        "error_at_limits": round(planned["limits"]["peak_rss_gib"] / measured - 1, 4),
        "wall_s": round(wall, 1),
        "mixed_precision": precision,  # bf16: autocast on a CPU with AVX512-BF16; no: float32 throughout
    }


def precision_of(row: dict) -> str:
    """The precision a row ran in, bf16 or no (a precision inferred from step times is the same precision)."""
    return "bf16" if row.get("mixed_precision", "").startswith("bf16") else "no"


def newest_rows(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """The newest row of each case in each precision: a CPU with and one without AVX512-BF16 are two measurements."""
    return {(row["case"], precision_of(row)): row for row in rows}


def with_current_plan(row: dict) -> dict:
    """A measured row beside the plan as grpo plans it now (the plan's constants may have been refitted since)."""
    recipe, overrides, _ = CASES[row["case"]]
    # planned in the precision the row ran in, whatever this machine's CPU would choose
    planned = plan(recipe, [*overrides, f"model.mixed_precision={precision_of(row)}"])
    measured = row["measured_peak_rss_gib"]
    return {
        **row,
        "plan_for_data_gib": planned["peak_rss_gib"],
        "plan_at_limits_gib": planned["limits"]["peak_rss_gib"],
        "error_for_data": round(planned["peak_rss_gib"] / measured - 1, 4),
        "error_at_limits": round(planned["limits"]["peak_rss_gib"] / measured - 1, 4),
    }


def fitting(row: dict) -> str:
    """Whether the plan's constants were fitted on this measurement (they were fitted on bfloat16-autocast runs)."""
    if row["case"] not in FITTED:
        return "held out"
    return "fitted on it" if precision_of(row) == "bf16" else "its case, not this precision"


def table(rows: list[dict]) -> str:
    head = (
        f"{'case':<15} {'prompt (data/limit)':>19} {'completion':>10} {'measured':>9} {'plan, data':>11} "
        f"{'error':>7} {'plan, limits':>12} {'error':>7} {'wall':>7}  {'autocast':<16} constants"
    )
    lines = [head]
    for r in map(with_current_plan, rows):
        lines.append(
            f"{r['case']:<15} {str(r['longest_prompt_tokens']) + ' / ' + str(r['limit_prompt_tokens']):>19} "
            f"{r['completion_budget']:>10} {r['measured_peak_rss_gib']:>7.2f} G {r['plan_for_data_gib']:>9.2f} G "
            f"{r['error_for_data']:>+7.1%} {r['plan_at_limits_gib']:>10.2f} G {r['error_at_limits']:>+7.1%} "
            f"{r['wall_s']:>6.0f}s  {r.get('mixed_precision', '?'):<16} {fitting(r)}"
        )
    return "\n".join(lines)


def timing(repeats: int = 3) -> str:
    """Wall time of `grpo plan` on the demo (2,000 generated rows) and on the Qwen recipe with the 7,473-row GSM8K
    train file: with the lengths cached, with the lengths to measure (the model converted, as after a first run), and
    with nothing cached at all (a fresh install: the tokenizer is read out of the .gguf file)."""
    import os
    import shutil
    import statistics

    from grpo_cli.files import cache_root

    lines = [
        f"# python benchmarks/plan_for_data.py --timing, {time.strftime('%Y-%m-%d')}",
        '# "lengths measured": the model converted and its tokenizer class remembered (as after a first plan or run);',
        '# "nothing cached": an empty GRPO_CACHE, as on a fresh install: the tokenizer is read out of the .gguf file',
        "median of 3 wall times of `grpo plan --device cpu --json`",
    ]
    for name in ("demo", "qwen_gsm8k"):
        recipe, overrides, _ = CASES[name]
        command = ["grpo", "plan", recipe, *overrides, "--device", "cpu", "--json"]

        def timed(env=None, command=command):
            started = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True, cwd=ROOT, env=env)
            return time.perf_counter() - started

        subprocess.run(command, check=True, capture_output=True, cwd=ROOT)  # the lengths cached
        cached = [timed() for _ in range(repeats)]
        measured = []
        for _ in range(repeats):
            shutil.rmtree(cache_root() / "prompt-lengths", ignore_errors=True)
            measured.append(timed())
        fresh = []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as empty:
                fresh.append(timed({**os.environ, "GRPO_CACHE": empty}))
        lines.append(
            f"{name:<11} lengths cached {statistics.median(cached):.2f} s; lengths measured "
            f"{statistics.median(measured):.2f} s; nothing cached {statistics.median(fresh):.2f} s"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    parser.add_argument("--timing", action="store_true", help="time grpo plan itself (needs an idle machine)")
    parser.add_argument("--report", action="store_true", help="only the table, from the measured rows")
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="append the rows here instead (and leave the table alone)"
    )
    args = parser.parse_args()
    if args.timing:
        result = timing()
        print(result)
        (ROOT / "benchmarks" / "plan_for_data_timing.txt").write_text(result + "\n")
        return
    results = args.results
    previous = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    done = {r["case"] for r in previous}
    for name in [] if args.report else args.case or [c for c in CASES if c not in done]:
        row = measure(name)
        print(json.dumps(row), flush=True)
        with results.open("a") as out:
            out.write(json.dumps(row) + "\n")
        previous = [*previous, row]
    if results != RESULTS:
        return
    latest = newest_rows(previous)
    text = (
        "grpo plan --device cpu: peak RSS for the data at hand (longest surviving prompt, completions at the budget)\n"
        "and at the recipe's limits, against /usr/bin/time's maximum RSS of a 2-step grpo train that meets that batch\n"
        "(python benchmarks/plan_for_data.py; error = plan / measured - 1; the plan columns are the plan as it is\n"
        "now, recomputed by --report, in the precision the row ran in; measured: on the date of its row in\n"
        "plan_for_data.jsonl; autocast bf16: a CPU with AVX512-BF16 (the 2026-11-25 rows: inferred from their step\n"
        "times, half of the same runs' in float32), no: float32 throughout, a CPU without it)\n\n"
        + table([row for c in CASES for (case, _), row in latest.items() if case == c])
        + "\n# wall: the 2026-11-27 rows ran at nice 19 beside another GRPO run (running or paused) and a test job:\n"
        "# their wall times are inflated (r64_c96 most), their peak RSS is their own process's.\n"
    )
    TABLE.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
