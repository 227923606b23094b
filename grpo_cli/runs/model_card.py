"""The run directory's README.md: a model card written from what the run holds (recipe, metrics, evaluations).

It replaces the stock card TRL and PEFT write (which name no base model), after training and after each
`grpo eval` of the run, so it always says what the directory really holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_cli.files import read_jsonl
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.health_section import HealthSection
from grpo_cli.recipe.model_section import LoraSection, QuantizationSection
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.sft_section import SftSection
from grpo_cli.recipe.user_code import RewardSpec
from grpo_cli.runs.layout import (
    CARD_FILE,
    COMPARISON_FILE,
    EVAL_DIR,
    FINAL_DIR,
    METRICS_FILE,
    OLD_SFT_DIR,
    RECIPE_FILE,
    SFT_DIR,
    SFT_SOURCE_FILE,
    SUMMARY_FILE,
    headline_keys,
    sft_dir,
)
from grpo_cli.runs.validation_curve import best_line, training_rows


def write_model_card(run_dir: Path, recipe: Recipe) -> Path:
    """Write RUN/README.md (and final/README.md when the run finished) and return the first path. The card describes
    the whole recipe; the helpers below get the sections they describe."""
    logged = read_jsonl(run_dir / METRICS_FILE, required=("step",)).rows
    metrics = training_rows(logged)
    method = _method(recipe.lora, recipe.quantization)
    model, grpo, training = recipe.model, recipe.grpo, recipe.training
    sft = [] if recipe.sft is None else [f"| SFT | {_sft(run_dir, recipe.sft, recipe.method)} |"]
    lines = [
        "---",
        f"base_model: {model.name}",
        *([] if recipe.lora is None else ["library_name: peft"]),
        "tags: [grpo, trl, grpo-cli]",
        "---",
        "",
        f"# {recipe.run_name}",
        "",
        _summary(run_dir, method, model.name, grpo.loss_type, metrics),
        "",
        "## Training",
        "",
        "| setting | value |",
        "|---|---|",
        f"| base model | `{model.name}` ({model.dtype}) |",
        f"| method | {method} |",
        f"| dataset | {_dataset(recipe.data)} |",
        *sft,
        f"| system prompt | {_cell(recipe.data.system_prompt or '(none)')} |",
        f"| rewards (weight) | {', '.join(_reward(spec) for spec in recipe.rewards)} |",
        f"| loss type | {grpo.loss_type}, beta {grpo.beta:g} |",
        f"| generations per prompt | {grpo.num_generations}, up to {grpo.max_completion_length} tokens "
        f"each, temperature {grpo.temperature:g} |",
        f"| optimisation | learning rate {training.learning_rate:g} ({training.lr_scheduler_type}), "
        f"{training.per_device_train_batch_size} completions per micro-batch x "
        f"{training.gradient_accumulation_steps} accumulation x {recipe.num_processes} process(es), "
        f"{training.optim} |",
        *_metric_lines(metrics),
    ]
    validation = best_line(logged)
    if validation:  # `validation:`: greedy accuracy on a held-out slice during training
        lines += ["", "## Validation while training", "", validation + "."]
    lines += _health(logged, training.health, recipe.rewards, recipe.generation_batch_size // grpo.num_generations)
    lines += _evaluations(run_dir)
    lines += _usage(run_dir, model.name, recipe.lora, recipe.run_name)
    text = "\n".join(lines)
    path = run_dir / CARD_FILE
    path.write_text(text, encoding="utf-8")
    if (run_dir / FINAL_DIR).is_dir():
        (run_dir / FINAL_DIR / CARD_FILE).write_text(text, encoding="utf-8")
    return path


def _health(logged: list[dict], settings: HealthSection, rewards: list[RewardSpec], groups: int) -> list[str]:
    """The health watch's signatures over the run (runs/health.py), each with what it means and what to change."""
    from grpo_cli.runs.health import diagnose
    from grpo_cli.runs.run_health import watch_args

    if not training_rows(logged):
        return []
    alarms = diagnose(logged, **watch_args(settings, rewards, groups))
    body = [f"- {alarm.line().removeprefix('health: ')}" for alarm in alarms] or ["No signature sounded."]
    return ["", "## Health", "", *body]


def _summary(run_dir: Path, method: str, model_name: str, loss_type: str, metrics: list[dict]) -> str:
    finished = "finished" if (run_dir / FINAL_DIR).is_dir() else "not finished"
    steps = metrics[-1]["step"] if metrics else 0
    if not _is_sft(run_dir):
        return f"{method} of `{model_name}` with GRPO ({loss_type} loss), {finished} after {steps} steps."
    return (
        f"{method} of `{model_name}`: supervised fine-tuning (SFT) before GRPO, {finished} after {steps} steps; GRPO "
        f"continues from it in `{run_dir.parent}`."
    )


def _metric_lines(metrics: list[dict]) -> list[str]:
    if not metrics:
        return []
    lines = ["", "## Metrics (first and last logged step)", "", "| metric | first | last |", "|---|---|---|"]
    first, last = metrics[0], metrics[-1]
    keys = headline_keys(last) + ["completions/clipped_ratio", "step_time_s"]
    return lines + [f"| {key} | {_number(first.get(key))} | {_number(last.get(key))} |" for key in keys if key in last]


def _usage(run_dir: Path, model_name: str, lora: LoraSection | None, run_name: str) -> list[str]:
    """How to train the run again and how to load what it made."""
    return [
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
        *_load_snippet(run_dir, model_name, lora, run_name),
        "```",
        "",
    ]


def _method(lora: LoraSection | None, quantization: QuantizationSection | None) -> str:
    if lora is None:
        return "Full fine-tuning"
    label = f"LoRA r={lora.r}, alpha={lora.alpha} on {', '.join(lora.target_modules)}"
    if quantization is not None:
        return f"QLoRA ({quantization.bits}-bit {quantization.quant_type} base), {label}"
    return label


def _dataset(data: DataSection) -> str:
    parts = [f"`{data.source}`"] + ([f"config `{data.config}`"] if data.config else []) + [f"split `{data.split}`"]
    if data.limit:
        parts.append(f"first {data.limit} rows")
    if data.max_solution_steps:
        parts.append(f"problems solved in at most {data.max_solution_steps} steps")
    return ", ".join(parts) + f"; answers marked with {'`####`' if data.answer_marker == 'hashes' else '`<answer>`'}"


def _is_sft(run_dir: Path) -> bool:
    return run_dir.name in (SFT_DIR, OLD_SFT_DIR) and (run_dir / SFT_SOURCE_FILE).is_file()


def _sft(run_dir: Path, section: SftSection, method: str) -> str:
    """What the SFT stage trained on and how, from RUN/sft/source.json (train/sft.py writes it); `method`:
    full, lora or qlora (the SFT stage's learning rate depends on it)."""
    folder = run_dir if _is_sft(run_dir) else sft_dir(run_dir)
    try:
        source = json.loads((folder / SFT_SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        source = {}
    return (
        f"{source.get('examples', '?')} examples from `{source.get('source', section.source)}`, supervised (TRL's "
        f"SFTTrainer, loss on the completion), learning rate {section.learning_rate_for(method):g}; GRPO "
        "starts from its weights"
    )


def _reward(spec) -> str:
    kwargs = f" {json.dumps(spec.kwargs)}" if spec.kwargs else ""
    return f"`{spec.name}`{kwargs} ({spec.weight:g})"


def _evaluations(run_dir: Path) -> list[str]:
    """GSM8K results of `grpo eval run/compare` on this run, one row per evaluated model and data set."""
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
        return ["", "## Evaluation", "", f"Not evaluated yet: `grpo eval compare {run_dir}`."]
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


def _load_snippet(run_dir: Path, model_name: str, lora: LoraSection | None, run_name: str) -> list[str]:
    final = run_dir / FINAL_DIR
    if lora is None:
        return [
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f'model = AutoModelForCausalLM.from_pretrained("{final}", dtype="auto")',
            f'tokenizer = AutoTokenizer.from_pretrained("{final}")',
        ]
    base = model_name
    if base.startswith("pkg:") or base.endswith(".gguf"):
        return [
            f"# The base is a .gguf file: merge once with `grpo export {run_dir} --merge merged/{run_name}`,",
            "# then load that plain directory:",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f'model = AutoModelForCausalLM.from_pretrained("merged/{run_name}", dtype="auto")',
            f'tokenizer = AutoTokenizer.from_pretrained("merged/{run_name}")',
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
