"""The run directory's README.md: a model card written from what the run holds (recipe, metrics, evaluations).

It replaces the stock card TRL and PEFT write (which name no base model), after training and after each
`grpo eval` of the run, so it always says what the directory really holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_cli.files import read_jsonl
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.layout import (
    CARD_FILE,
    COMPARISON_FILE,
    EVAL_DIR,
    FINAL_DIR,
    METRICS_FILE,
    RECIPE_FILE,
    SUMMARY_FILE,
    WARMUP_DIR,
    WARMUP_SOURCE_FILE,
    headline_keys,
)
from grpo_cli.runs.validation_curve import best_line, training_rows


def write_model_card(run_dir: Path, recipe: Recipe) -> Path:
    """Write RUN/README.md (and final/README.md when the run finished) and return the first path."""
    text = render_card(run_dir, recipe)
    path = run_dir / CARD_FILE
    path.write_text(text, encoding="utf-8")
    if (run_dir / FINAL_DIR).is_dir():
        (run_dir / FINAL_DIR / CARD_FILE).write_text(text, encoding="utf-8")
    return path


def render_card(run_dir: Path, recipe: Recipe) -> str:
    logged = read_jsonl(run_dir / METRICS_FILE, required=("step",)).rows
    metrics = training_rows(logged)
    finished = (run_dir / FINAL_DIR).is_dir()
    lines = [
        "---",
        f"base_model: {recipe.model.name}",
        *([] if recipe.lora is None else ["library_name: peft"]),
        "tags: [grpo, trl, grpo-cli]",
        "---",
        "",
        f"# {recipe.run_name}",
        "",
        f"{_method(recipe)} of `{recipe.model.name}` with GRPO ({recipe.grpo.loss_type} loss), "
        f"{'finished' if finished else 'not finished'} after {metrics[-1]['step'] if metrics else 0} steps."
        if not _is_warmup(run_dir)
        else f"{_method(recipe)} of `{recipe.model.name}`: the supervised warm-up before GRPO, "
        f"{'finished' if finished else 'not finished'} after {metrics[-1]['step'] if metrics else 0} steps; GRPO "
        f"continues from it in `{run_dir.parent}`.",
        "",
        "## Training",
        "",
        "| setting | value |",
        "|---|---|",
        f"| base model | `{recipe.model.name}` ({recipe.model.dtype}) |",
        f"| method | {_method(recipe)} |",
        f"| dataset | {_dataset(recipe)} |",
        *([] if recipe.warmup is None else [f"| warm-up | {_warmup(run_dir, recipe)} |"]),
        f"| system prompt | {_cell(recipe.data.system_prompt or '(none)')} |",
        f"| rewards (weight) | {', '.join(_reward(spec) for spec in recipe.rewards)} |",
        f"| loss type | {recipe.grpo.loss_type}, beta {recipe.grpo.beta:g} |",
        f"| generations per prompt | {recipe.grpo.num_generations}, up to {recipe.grpo.max_completion_length} tokens "
        f"each, temperature {recipe.grpo.temperature:g} |",
        f"| optimisation | learning rate {recipe.training.learning_rate:g} ({recipe.training.lr_scheduler_type}), "
        f"{recipe.training.per_device_train_batch_size} completions per micro-batch x "
        f"{recipe.training.gradient_accumulation_steps} accumulation x {recipe.num_processes} process(es), "
        f"{recipe.training.optim} |",
    ]
    if metrics:
        lines += ["", "## Metrics (first and last logged step)", "", "| metric | first | last |", "|---|---|---|"]
        first, last = metrics[0], metrics[-1]
        keys = headline_keys(last) + ["completions/clipped_ratio", "step_time_s"]
        lines += [f"| {key} | {_number(first.get(key))} | {_number(last.get(key))} |" for key in keys if key in last]
    validation = best_line(logged)
    if validation:  # `validation:`: greedy accuracy on a held-out slice during training
        lines += ["", "## Validation while training", "", validation + "."]
    lines += _evaluations(run_dir)
    lines += [
        "",
        "## Reproduce",
        "",
        "```bash",
        f"grpo train {run_dir}/{RECIPE_FILE} training.output_dir={run_dir}-again   # the resolved recipe of this run",
        "```",
        "",
        "## Load",
        "",
        "```python",
        *_load_snippet(run_dir, recipe),
        "```",
        "",
    ]
    return "\n".join(lines)


def _method(recipe: Recipe) -> str:
    if recipe.lora is None:
        return "Full fine-tuning"
    lora = f"LoRA r={recipe.lora.r}, alpha={recipe.lora.alpha} on {', '.join(recipe.lora.target_modules)}"
    if recipe.quantization is not None:
        return f"QLoRA ({recipe.quantization.bits}-bit {recipe.quantization.quant_type} base), {lora}"
    return lora


def _dataset(recipe: Recipe) -> str:
    data = recipe.data
    parts = [f"`{data.source}`"] + ([f"config `{data.config}`"] if data.config else []) + [f"split `{data.split}`"]
    if data.limit:
        parts.append(f"first {data.limit} rows")
    if data.max_solution_steps:
        parts.append(f"problems solved in at most {data.max_solution_steps} steps")
    return ", ".join(parts) + f"; answers marked with {'`####`' if data.answer_marker == 'hashes' else '`<answer>`'}"


def _is_warmup(run_dir: Path) -> bool:
    return run_dir.name == WARMUP_DIR and (run_dir / WARMUP_SOURCE_FILE).is_file()


def _warmup(run_dir: Path, recipe: Recipe) -> str:
    """What the warm-up trained on and how, from RUN/warmup/source.json (train/warmup.py writes it)."""
    folder = run_dir if _is_warmup(run_dir) else run_dir / WARMUP_DIR
    try:
        source = json.loads((folder / WARMUP_SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        source = {}
    warm = recipe.warmup
    return (
        f"{source.get('examples', '?')} examples from `{source.get('source', warm.source)}`, supervised (TRL's "
        f"SFTTrainer, loss on the completion), learning rate {warm.learning_rate_for(recipe.method):g}; GRPO "
        "starts from its weights"
    )


def _reward(spec) -> str:
    kwargs = f" {json.dumps(spec.kwargs)}" if spec.kwargs else ""
    return f"`{spec.name}`{kwargs} ({spec.weight:g})"


def _evaluations(run_dir: Path) -> list[str]:
    """GSM8K results of `grpo eval --run/--compare` on this run, one row per evaluated model and data set."""
    rows = []
    found = sorted((run_dir / EVAL_DIR).glob(f"*/*/{SUMMARY_FILE}"))
    for comparison in sorted((run_dir / EVAL_DIR).glob(f"*/{COMPARISON_FILE}")):  # a reused base lives elsewhere
        base = Path(json.loads(comparison.read_text(encoding="utf-8"))["base"]) / SUMMARY_FILE
        if base.is_file() and base.resolve() not in {f.resolve() for f in found}:
            found.append(base)
    task_rows = []
    for summary_file in found:
        summary = json.loads(summary_file.read_text(encoding="utf-8"))
        data = (
            Path(summary["data"]["source"]).stem if Path(summary["data"]["source"]).suffix else summary["data"]["split"]
        )
        if summary["protocol"] == "task":  # the recipe's own verifiers, named in the cell
            cells = "; ".join(f"{name} {_accuracy(f)}" for name, f in summary["filters"].items())
        else:
            cells = " | ".join(_accuracy(summary["filters"][name]) for name in ("strict-match", "flexible-extract"))
        form = "-" if summary["format_rate"] is None else f"{100 * summary['format_rate']:.1f}%"
        model = summary["target"] + _decoding(summary.get("sampling"))
        row = f"| {summary['protocol']}, {data} | {model} | {summary['problems']} | {cells} | {form} |"
        (task_rows if summary["protocol"] == "task" else rows).append(row)
    if not rows and not task_rows:
        return ["", "## Evaluation", "", f"Not evaluated yet: `grpo eval --compare {run_dir}`."]
    lines = []
    if rows:
        lines += [
            "",
            "## Evaluation (GSM8K, greedy unless marked; 95% intervals)",
            "",
            "| protocol-data | model | problems | strict-match | flexible-extract | format rate |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    if task_rows:
        lines += [
            "",
            "## Evaluation on the task (the recipe's verifiers, greedy unless marked; 95% intervals)",
            "",
            "| protocol-data | model | problems | accuracy by verifier | format rate |",
            "|---|---|---|---|---|",
            *task_rows,
        ]
    return lines


def _decoding(sampling: dict | None) -> str:
    """Greedy says nothing; a sampled evaluation's accuracy is mean@N (its interval a normal one over problems)."""
    if not sampling:
        return ""
    return f", mean@{sampling['samples']} at T {sampling['temperature']:g}"


def _accuracy(f: dict) -> str:
    return f"{100 * f['accuracy']:.1f}% ({100 * f['ci95'][0]:.1f}-{100 * f['ci95'][1]:.1f})"


def _load_snippet(run_dir: Path, recipe: Recipe) -> list[str]:
    final = run_dir / FINAL_DIR
    if recipe.lora is None:
        return [
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f'model = AutoModelForCausalLM.from_pretrained("{final}", dtype="auto")',
            f'tokenizer = AutoTokenizer.from_pretrained("{final}")',
        ]
    base = recipe.model.name
    if base.startswith("pkg:") or base.endswith(".gguf"):
        return [
            f"# The base is a .gguf file: merge once with `grpo export {run_dir} --merge merged/{recipe.run_name}`,",
            "# then load that plain directory:",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f'model = AutoModelForCausalLM.from_pretrained("merged/{recipe.run_name}", dtype="auto")',
            f'tokenizer = AutoTokenizer.from_pretrained("merged/{recipe.run_name}")',
        ]
    return [
        "from peft import PeftModel",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'base = AutoModelForCausalLM.from_pretrained("{base}", dtype="auto")',
        f'model = PeftModel.from_pretrained(base, "{final}")',
        f'tokenizer = AutoTokenizer.from_pretrained("{final}")',
    ]


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")
