"""Rendering a memory plan: a table for people, JSON for scripts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from grpo_cli.plan.fit import PlanResult
from grpo_cli.plan.memory import GIB, Plan
from grpo_cli.plan.solve import SEARCH_CAP, Solution, Trial
from grpo_cli.recipe.validation import is_schema_field
from grpo_cli.recipe.yaml_source import format_override

# The plan's worst under-estimate of torch's peak over the lent GPUs' 33 rows (-1.9%, benchmarks/gpu/replan.txt),
# rounded up: less spare than this is "close". nvidia-smi can show far more (48% on one row): the allocator's cache
# of freed blocks, which torch empties and retries before it raises out-of-memory, so it does not decide what fits.
CUDA_UNDER_ESTIMATE = 0.03
CLOSE_NOTE = (
    f"on lent GPUs this plan was up to {CUDA_UNDER_ESTIMATE:.0%} under torch's real peak (docs/plan.md); "
    "`grpo preflight` measures it in two steps"
)


def override_args(changes: dict[str, Any]) -> list[str]:
    """Recipe changes as the `key.path=value` arguments a user adds to the command line. A key that is not a schema
    field (a field renamed without its suggestion) is a bug: it raises instead of printing advice that cannot work."""
    for key in changes:
        if not is_schema_field(tuple(key.split("."))):
            raise KeyError(f"`{key}` is not a recipe field")
    return [format_override(key, value) for key, value in changes.items()]


def basis_lines(result: PlanResult) -> list[str]:
    """Which prompt length the peak was planned at, and the other figure beside it."""
    plan, bound, data = result.plan, result.bound, result.data
    what = "expected peak RSS" if plan.device == "cpu" else "expected in nvidia-smi"
    budget = f"completions at the full {plan.completion_tokens}-token budget"
    if data is None:
        return [f"{result.data_note}; {budget}"]
    return [
        f"planned for this data: its longest prompt is {data.longest_prompt} tokens ({data.prompts} prompts left "
        f"after the recipe's filters; TRL pads a batch to its longest prompt), {budget}",
        f"the verdict uses this figure; at the recipe's limits ({bound.prompt_tokens} prompt tokens), the bound for "
        f"any data it accepts, the {what} would be {bound.expected / GIB:.2f} GiB",
    ]


def plan_json(result: PlanResult, notes: list[str] = ()) -> dict[str, Any]:
    plan, bound, data = result.plan, result.bound, result.data
    return {
        "model": plan.arch.name,
        "params": plan.arch.params,
        "device": plan.device,
        "terms": [
            {"name": t.name, "phase": t.phase, "gib": round(t.bytes / GIB, 4), "formula": t.formula} for t in plan.terms
        ],
        "static_gib": round(plan.static / GIB, 4),
        "generation_phase_gib": round(plan.generation / GIB, 4),
        "training_phase_gib": round(plan.training / GIB, 4),
        "sft_phase_gib": round(plan.sft / GIB, 4),
        "sft_peak_tensors_gib": round(plan.sft_peak / GIB, 4),
        "peak_tensors_gib": round(plan.peak_tensors / GIB, 4),
        "peak_nvidia_smi_gib": round(plan.peak_smi / GIB, 4),
        "peak_rss_gib": round(plan.peak_rss / GIB, 4),
        "gguf_conversion_peak_rss_gib": None if (first := first_load_peak(plan)) is None else round(first / GIB, 4),
        "gpu": result.gpu_label,
        "gpu_gib": None if plan.gpu_bytes is None else round(plan.gpu_bytes / GIB, 2),
        "fits": plan.fits,
        "planned_for": "data" if data else "limits",
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.completion_tokens,
        "data": None if data is None else {"longest_prompt_tokens": data.longest_prompt, "prompts": data.prompts},
        "data_note": result.data_note,
        "limits": {
            "prompt_tokens": bound.prompt_tokens,
            "peak_tensors_gib": round(bound.peak_tensors / GIB, 4),
            "peak_nvidia_smi_gib": round(bound.peak_smi / GIB, 4),
            "peak_rss_gib": round(bound.peak_rss / GIB, 4),
            "fits": bound.fits,
        },
        "suggestions": [
            {"change": label, "overrides": override_args(o), "peak_expected_gib": round(peak / GIB, 3)}
            for label, o, peak in result.suggestions
        ],
        "notes": list(notes),
    }


def print_plan(console: Console, result: PlanResult, command: str, notes: list[str] = ()) -> None:
    """`command` is the user's `grpo train ...` line (recipe and overrides) the suggestions extend."""
    plan, suggestions, gpu_label = result.plan, result.suggestions, result.gpu_label
    arch = plan.arch
    console.print(
        f"[bold]{arch.name}[/]: {arch.params / 1e9:.2f} B parameters, {arch.num_layers} layers, "
        f"hidden {arch.hidden_size}, vocab {arch.vocab_size}" + (" (tied)" if arch.tie_word_embeddings else "")
    )
    table = Table(box=None, pad_edge=False)
    table.add_column("term")
    table.add_column("phase")
    table.add_column("GiB", justify="right")
    table.add_column("how it is computed", overflow="fold")
    for t in plan.terms:
        style = "dim" if t.phase == "comparison" else ""
        table.add_row(t.name, t.phase, f"{t.bytes / GIB:.3f}", t.formula, style=style)
    console.print(table)
    which = "generation" if plan.generation >= plan.training else "training"
    console.print(
        f"peak = static {plan.static / GIB:.2f} + max(generation {plan.generation / GIB:.2f}, "
        f"training {plan.training / GIB:.2f}) -> the {which} phase sets the peak"
    )
    for line in sft_lines(plan):
        console.print(line, highlight=False, soft_wrap=True)
    for note in [*basis_lines(result), *notes]:
        console.print(note, soft_wrap=True, highlight=False)
    if plan.device == "cpu":
        console.print(f"[bold]peak tensors[/] (live tensor bytes): {plan.peak_tensors / GIB:.2f} GiB")
        console.print(
            f"[bold]expected peak RSS[/] of the process (+ runtime and allocator): {plan.peak_rss / GIB:.2f} GiB"
        )
        first = first_load_peak(plan)
        if first is not None:
            short = (
                ""
                if plan.gpu_bytes is None or first <= plan.gpu_bytes
                else f", more than the {plan.gpu_bytes / GIB:.1f} GiB given"
            )
            console.print(
                f"first load converts the .gguf once, in a separate process before the run: peak RSS about "
                f"{first / GIB:.2f} GiB{short}"
            )
    else:
        console.print(f"[bold]peak tensors[/] (torch.cuda.max_memory_allocated): {plan.peak_tensors / GIB:.2f} GiB")
        console.print(
            f"[bold]expected in nvidia-smi[/] (+ allocator slack and CUDA context): {plan.peak_smi / GIB:.2f} GiB"
        )
    if plan.gpu_bytes is None:
        console.print("no GPU given: add --gpu 24GB (or a name such as 'RTX 4090'), or hardware.gpu in the recipe")
        return
    if plan.fits:
        console.print(
            f"[green]fits[/] {_gpu(gpu_label, plan)} with {(plan.gpu_bytes - plan.expected) / GIB:.1f} GiB to spare"
        )
        if plan.device != "cpu" and plan.gpu_bytes < plan.expected * (1 + CUDA_UNDER_ESTIMATE):
            console.print(f"[yellow]close:[/] {CLOSE_NOTE}")
        return
    console.print(
        f"[red]does not fit[/] {_gpu(gpu_label, plan)}: {(plan.expected - plan.gpu_bytes) / GIB:.1f} GiB short"
    )
    if not suggestions:
        console.print("no single change in the list makes it fit; consider a smaller model or more GPUs")
    for label, changes, peak in suggestions:
        console.print(
            f"  {label}: {peak / GIB:.2f} GiB  ->  {command} {' '.join(override_args(changes))}", soft_wrap=True
        )


def sft_lines(plan: Plan) -> list[str]:
    """The SFT stage's peak beside GRPO's: the larger one is the plan's peak, and so decides the fit."""
    if not plan.sft:
        return []
    grpo = plan.static + max(plan.generation, plan.training)
    which = "the SFT stage" if plan.sft_peak > grpo else "GRPO"
    return [
        f"SFT (supervised steps before GRPO, no generation, no reference model): tensors peak at "
        f"{plan.sft_peak / GIB:.2f} GiB, GRPO's at {grpo / GIB:.2f} GiB -> {which} sets the peak"
    ]


def first_load_peak(plan: Plan) -> float | None:
    """A model given as a .gguf file not converted yet: the peak RSS of its one-time conversion; else None."""
    from grpo_cli.errors import UserError
    from grpo_cli.gguf import converted_dir
    from grpo_cli.plan.gguf_header import GGUFError, conversion_peak_bytes
    from grpo_cli.recipe.sources import model_location

    try:
        location = Path(model_location(plan.arch.name))
        if location.suffix != ".gguf" or not location.is_file() or (converted_dir(location) / "config.json").exists():
            return None
        return conversion_peak_bytes(location)
    except (UserError, GGUFError, OSError):
        return None


def _gpu(label: str | None, plan: Plan) -> str:
    size = f"{plan.gpu_bytes / GIB:.0f} GiB"
    return size if label is None or "GiB" in label else f"{label} ({size})"


def solve_lines(solution: Solution, result: PlanResult, command: str) -> list[str]:
    """`grpo plan --solve`: the largest value that fits with its peak, the next value's, and the line to train it.
    When not even the smallest value fits, that alone, in one line."""
    s, found, after = solution, solution.found, solution.next
    budget = result.gpu_label if s.device == "cpu" else _gpu(result.gpu_label, result.plan)
    what = "expected peak RSS" if s.device == "cpu" else "expected in nvidia-smi"
    if found is None:
        if after is None:  # the recipe's other sizes put even the smallest allowed value past the search
            return [f"{s.key}: no value up to {SEARCH_CAP} is allowed with the recipe's other sizes; lower them"]
        if after.plan is None:
            return [f"{s.key}: not even the smallest value can be planned: {after.refused}"]
        return [
            f"{s.key}: not even the smallest value fits {budget}: {_with(after)} needs {after.plan.expected / GIB:.3f} "
            f"GiB ({what})"
        ]
    others = [f"{k}={v}" for k, v in found.changes.items() if k != s.key]
    lines = [
        f"{s.key}: at most {found.value} fits {budget}" + (f", with {' '.join(others)}" if others else ""),
        f"  {s.key}={found.value}: {found.plan.expected / GIB:.3f} GiB {what}, "
        f"{_amount(s.budget - found.plan.expected)} to spare",
    ]
    if after is None:
        lines.append(f"  no larger value tried: {s.limit}")
    elif after.plan is None:
        lines.append(f"  {s.key}={after.value}: refused: {after.refused}")
    else:
        lines.append(
            f"  {s.key}={after.value}: {after.plan.expected / GIB:.3f} GiB, does not fit "
            f"({_amount(after.plan.expected - s.budget)} over)"
            + (f", with {' '.join(f'{k}={v}' for k, v in after.changes.items() if k != s.key)}" if others else "")
        )
    lines.append(f"  the recipe's {s.current}: {s.current_peak / GIB:.3f} GiB")
    lines += [note for note in (s.note, s.basis) if note]
    if s.device != "cpu" and s.budget < found.plan.expected * (1 + CUDA_UNDER_ESTIMATE):
        lines.append(f"close: {CLOSE_NOTE}")
    lines.append(f"  ->  {command} {' '.join(override_args(found.changes))}")
    return lines


def _amount(size: float) -> str:
    """A margin near the budget, in MiB below a GiB: the search leaves a few MiB between fitting and not."""
    return f"{size / GIB:.2f} GiB" if size >= GIB else f"{size / 2**20:.0f} MiB"


def _with(trial: Trial) -> str:
    return " ".join(f"{k}={v}" for k, v in trial.changes.items())


def solve_json(solution: Solution) -> dict[str, Any]:
    s, found, after = solution, solution.found, solution.next

    def gib(trial: Trial | None) -> float | None:
        return None if trial is None or trial.plan is None else round(trial.plan.expected / GIB, 4)

    return {
        "key": s.key,
        "value": None if found is None else found.value,
        "peak_gib": gib(found),
        "next_value": None if after is None else after.value,
        "next_peak_gib": gib(after),
        "next_refused": after.refused if after is not None and after.refused else None,
        "budget_gib": round(s.budget / GIB, 4),
        "peak": "peak_rss" if s.device == "cpu" else "peak_nvidia_smi",
        "overrides": [] if found is None else override_args(found.changes),
        "next_overrides": [] if after is None else override_args(after.changes),
        "current_value": s.current,
        "current_peak_gib": round(s.current_peak / GIB, 4),
        "basis": s.basis,
        "note": s.note,
        "limit": s.limit,
    }
