"""Refit the plan's FITTED activation and CPU head constants to the measured CPU peaks of memory_calibration.csv.

The plan is recomputed for every CPU row (the recipe as it ran, from benchmarks/memory.py's matrix, with a
config-only model folder) and for the newest live-tensor peak of each benchmarks/cpu_memory.py configuration (the
demo and Qwen2.5-Coder-0.5B), so nothing is trained here and a fit takes seconds. A coordinate search over a grid
minimises the largest |error|, then the sum of squared errors among the fits within 0.5 point of it.

    python benchmarks/memory_fit.py   # errors with the constants in grpo_cli/plan/phase_terms.py, the fit, the RSS fit
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

# Imported after the path insert above: memory.py is a sibling script, not a package module.
from memory import ARCHS, CPU_MATRIX, CUDA_MATRIX, TINY_MATRIX, recipe_dict  # noqa: E402

import grpo_cli.plan.memory as model  # noqa: E402
import grpo_cli.plan.phase_terms as fitted  # noqa: E402  (the FITTED constants)

CPU_MEMORY_ROWS = ROOT / "benchmarks" / "cpu_memory.jsonl"

FITTED = {
    "ACT_HIDDEN_FP32": [0.0, 1.0, 2.0, 3.0, 4.0],
    "ACT_HIDDEN": [1.0, 2.0, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 8.0, 9.0, 10.0, 12.0],
    "ACT_FFN": [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0],
    "ACT_KV": [0.0, 1.0, 2.0, 3.0, 4.0],
    "CPU_HEAD_TEMPORARIES": [4.0, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 9.0],
    "SCORING_TEMPORARIES": [1.0, 2.0, 3.0, 4.0],
}


def cases(directory: Path) -> list[tuple[str, object, object, float, str]]:
    """(name, recipe as it ran, architecture, measured bytes, device) for every row of the calibration CSV: CPU rows
    (live tensors) and CUDA rows from a lent GPU (the allocator's peak)."""
    from transformers import AutoConfig

    from grpo_cli.plan import architectures
    from grpo_cli.recipe.schema import Recipe

    lines = [
        line
        for line in (ROOT / "benchmarks" / "memory_calibration.csv").read_text().splitlines()
        if not line.startswith("#")
    ]
    matrices = {"cpu": {**CPU_MATRIX, **TINY_MATRIX}, "cuda": CUDA_MATRIX}
    out = []
    for row in csv.DictReader(lines):
        cfg = matrices.get(row["device"], {}).get(row["config"])
        if cfg is None:
            continue
        folder = directory / cfg["arch"]
        if not folder.is_dir():
            AutoConfig.for_model(**ARCHS[cfg["arch"]]).save_pretrained(folder)
        raw = recipe_dict(folder, cfg)
        raw["data"]["max_prompt_length"] = int(row["prompt"])
        recipe = Recipe.model_validate(raw)
        measured = float(row["measured_gib"]) * 2**30
        out.append((row["config"], recipe, architectures.resolve(recipe.model), measured, row["device"]))
    return out + real_model_cases(directory)


def real_model_cases(directory: Path) -> list[tuple[str, object, object, float, str]]:
    """The newest live-tensor peak of each configuration of benchmarks/cpu_memory.py (grpo's allocator): the demo's
    SmolLM2-135M and Qwen2.5-Coder-0.5B as users run them, float32 weights under bf16 autocast where the CPU has it."""
    from cpu_memory import latest_tool_rows, recipe_as_ran

    return [
        (config, *recipe_as_ran(config, directory), float(row["live_peak"]), "cpu")
        for config, row in latest_tool_rows(CPU_MEMORY_ROWS).items()
    ]


def errors(rows) -> list[float]:
    return [
        100 * (model.memory_plan(recipe, arch, device).peak_tensors - measured) / measured
        for _, recipe, arch, measured, device in rows
    ]


def score(rows) -> tuple[float, float]:
    e = errors(rows)
    return round(max(abs(x) for x in e), 1), sum(x * x for x in e)


def plan_for_data_rows() -> list[tuple[str, float, float]]:
    """(case, planned tensors GiB, measured peak RSS GiB) of benchmarks/plan_for_data.py's real `grpo train` runs the
    constants are fitted on (its FITTED cases, bf16 autocast): whole runs measured from outside, planned at the data's
    longest prompt as `grpo plan` plans them, in the precision they ran in."""
    import json

    from plan_for_data import CASES, FITTED, newest_rows

    from grpo_cli.plan import architectures
    from grpo_cli.recipe.validation import load_recipe

    rows = [json.loads(line) for line in (ROOT / "benchmarks" / "plan_for_data.jsonl").read_text().splitlines()]
    out = []
    for (case, precision), row in newest_rows(rows).items():
        if case not in FITTED or precision != "bf16":
            continue  # the held-out runs stay held out: plan_for_data.txt's `constants` column says which
        recipe_path, overrides, _ = CASES[case]
        recipe = load_recipe(ROOT / recipe_path, [*overrides, "model.mixed_precision=bf16"], scope="plan")
        plan = model.memory_plan(
            recipe, architectures.resolve(recipe.model), "cpu", prompt_tokens=row["longest_prompt_tokens"]
        )
        out.append((f"plan_for_data/{case}/{precision}", plan.peak_tensors / 2**30, row["measured_peak_rss_gib"]))
    return out


def rss_fit(rows) -> None:
    """CPU_RUNTIME_GIB and CPU_RSS_PER_TENSOR_BYTE: the pair (0.01 grid) whose plan-based peak RSS has the smallest
    largest error (an under-estimate weighing twice) against the newest measured peak RSS of each cpu_memory.py
    configuration (grpo's allocator) and of each benchmarks/plan_for_data.py run. Run after
    the tensor constants are fitted: it uses the plan's tensors, as `grpo plan` does."""
    from cpu_memory import latest_tool_rows

    rss = {config: row["rss_peak"] / 2**30 for config, row in latest_tool_rows(CPU_MEMORY_ROWS).items()}
    planned = {
        name: model.memory_plan(recipe, arch, "cpu").peak_tensors / 2**30
        for name, recipe, arch, _, _ in rows
        if name in rss
    }
    for name, tensors, measured in plan_for_data_rows():
        planned[name], rss[name] = tensors, measured

    def worst(runtime: float, slope: float) -> float:
        # An estimate below the real peak costs a user a run killed without a word, one above it a smaller batch
        # than would fit: an under-estimate counts twice.
        errors = [(runtime + slope * planned[c] - rss[c]) / rss[c] for c in planned]
        return max(max(errors), -2 * min(errors))

    best = min((worst(r / 100, k / 100), r / 100, k / 100) for r in range(30, 121) for k in range(90, 151))
    print(
        f"peak RSS = {best[1]:.2f} GiB + {best[2]:.2f} x planned tensors: largest error {100 * best[0]:.1f}% "
        "(under-estimates x 2) "
        f"(now {model.CPU_RUNTIME_GIB} + {model.CPU_RSS_PER_TENSOR_BYTE}: "
        f"{100 * worst(model.CPU_RUNTIME_GIB, model.CPU_RSS_PER_TENSOR_BYTE):.1f}%)"
    )
    for c, tensors in planned.items():
        print(
            f"  {c:30s} planned tensors {tensors:5.2f}  measured RSS {rss[c]:5.2f}  "
            f"fit {best[1] + best[2] * tensors:5.2f} GiB"
        )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = cases(Path(tmp))
        current = {name: getattr(fitted, name) for name in FITTED}
        print("constants now:", current)
        for (name, *_), error in zip(rows, errors(rows)):
            print(f"  {name:32s} {error:+6.1f}%")
        best = (score(rows), dict(current))
        for _ in range(4):  # coordinate search: one constant at a time over its grid, until nothing improves
            for name, grid in FITTED.items():
                for value in grid:
                    setattr(fitted, name, value)
                    candidate = score(rows)
                    if candidate < best[0]:
                        best = (candidate, {**best[1], name: value})
                setattr(fitted, name, best[1][name])
        for name, value in best[1].items():
            setattr(fitted, name, value)
        print("fitted:", best[1], f"max |error| {best[0][0]}%")
        for (name, *_), error in zip(rows, errors(rows)):
            print(f"  {name:32s} {error:+6.1f}%")
        rss_fit(rows)


if __name__ == "__main__":
    main()
