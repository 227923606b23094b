"""`grpo preflight`: will the recipe fit, how long will it take, can it learn? Measured on this machine, in about a
minute, before the real run. Works in a temporary directory: the recipe's run directory is never touched."""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.plan.measure import StepMeasurement
from grpo_cli.plan.memory import GIB, Plan
from grpo_cli.plan.signal import Signal
from grpo_cli.recipe.schema import Recipe

MOSTLY = 0.5  # "most groups", "most completions"


@dataclass
class Advice:
    reason: str
    overrides: list[str] = field(default_factory=list)


@dataclass
class Preflight:
    recipe: Recipe
    measured: StepMeasurement
    planned: Plan  # the plan for exactly the steps that ran (same prompt length, same device)
    verdict: Plan  # the plan for the recipe as written, on the GPU
    verdict_smi: float  # bytes expected in nvidia-smi for the recipe as written (measured error applied on CUDA)
    gpu_label: str | None
    signal: Signal
    total_steps: int
    step_s: float
    generation_s: float
    eta_s: float  # at the sampled completion lengths
    eta_worst_s: float  # every completion at the budget
    advice: list[Advice]
    seconds: float

    @property
    def peak_error_pct(self) -> float:
        return 100 * (self.planned.peak_tensors - self.measured.peak_bytes) / self.measured.peak_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.verdict.gpu_bytes is None else self.verdict_smi <= self.verdict.gpu_bytes


def run_preflight(recipe: Recipe, steps: int, prompts: int, gpu_spec: str | None, hours: float) -> Preflight:
    import torch

    from grpo_cli.plan import architectures
    from grpo_cli.plan.gpus import gpu_memory_bytes
    from grpo_cli.plan.measure import measure_steps
    from grpo_cli.plan.memory import memory_plan
    from grpo_cli.plan.signal import measure_signal

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo-preflight-") as tmp:
        work = Path(tmp)
        isolated = recipe.model_copy(update={"training": recipe.training.model_copy(
            update={"output_dir": str(work / "run"), "report_to": ["none"]})})
        signal = measure_signal(isolated, prompts)  # first, from the model as it starts
        measured = measure_steps(isolated, work, steps)

    arch = architectures.resolve(recipe)
    planned = memory_plan(measured.recipe, arch, measured.device)
    hardware = recipe.hardware
    spec = gpu_spec or hardware.gpu or (f"{hardware.gpu_memory_gb}GB" if hardware.gpu_memory_gb else None)
    gpu_label, gpu_bytes = gpu_memory_bytes(spec) if spec else (None, None)
    if gpu_bytes is None and measured.device == "cuda":
        gpu_label, gpu_bytes = torch.cuda.get_device_name(0), float(torch.cuda.get_device_properties(0).total_memory)
    verdict = memory_plan(recipe, arch, "cuda", gpu_bytes)
    # Measured on a GPU, the plan's error there is known: apply it. On a CPU the CUDA figure stays the plan's.
    correction = measured.peak_bytes / planned.peak_tensors if measured.device == "cuda" else 1.0
    verdict_smi = verdict.peak_smi * correction

    step_s = measured.step_seconds[-1]
    generation_s = min(measured.generation_seconds[-1], step_s)
    prompt = measured.recipe.data.max_prompt_length or 0
    budget = recipe.grpo.max_completion_length
    # Generation runs until the longest completion of its batch ends; training scales with sequence length.
    expected_step = (generation_s * signal.batch_length_share
                     + (step_s - generation_s) * (prompt + signal.mean_completion_tokens) / (prompt + budget))
    total_steps = recipe.training.max_steps if recipe.training.max_steps > 0 else recipe.optimizer_steps(signal.dataset_rows)
    result = Preflight(recipe, measured, planned, verdict, verdict_smi, gpu_label, signal, total_steps, step_s,
                       generation_s, total_steps * expected_step, total_steps * step_s, [], 0.0)
    result.advice = advise(result, arch, hours)
    result.seconds = time.perf_counter() - started
    return result


def advise(result: Preflight, arch, hours: float) -> list[Advice]:
    """Override lines for each figure that calls for one."""
    from grpo_cli.plan.memory import suggest

    recipe, signal = result.recipe, result.signal
    g, batch = recipe.grpo.num_generations, recipe.training.per_device_train_batch_size
    out: list[Advice] = []
    if result.fits is False:
        need = f"about {result.verdict_smi / GIB:.1f} GiB expected, {result.verdict.gpu_bytes / GIB:.0f} GiB on the GPU"
        fixes = suggest(recipe, arch, "cuda", result.verdict.gpu_bytes)
        out += [Advice(f"does not fit ({need}): {label}", overrides) for label, overrides, _ in fixes[:2]]
        if not fixes:
            out.append(Advice(f"does not fit ({need}) and no listed change makes it: a smaller model or more GPUs"))
    if signal.zero_variance_share >= MOSTLY:
        share = f"{signal.zero_variance_share:.0%} of groups have the same reward for every completion (no signal)"
        out.append(Advice(f"{share}: sample more completions per prompt",
                          [f"grpo.num_generations={2 * g}", f"training.per_device_train_batch_size={2 * batch}"]))
        if recipe.grpo.temperature < 1.0:
            out.append(Advice(f"{share}: sample more diversely",
                              [f"grpo.temperature={min(1.0, round(recipe.grpo.temperature + 0.2, 2))}"]))
        if recipe.data.answer_format == "gsm8k" and recipe.data.answer_column and recipe.data.max_solution_steps is None:
            out.append(Advice(f"{share}: start on the easier problems", ["data.max_solution_steps=2"]))
        out.append(Advice(f"{share}: add a reward that gives partial credit (a format reward such as "
                          f"{'hashes_format' if recipe.data.answer_marker == 'hashes' else 'soft_format'}, or "
                          "length_target) so completions of one prompt score differently"))
    for stats in signal.rewards:
        if stats.constant:
            out.append(Advice(f"reward {stats.name} gave {stats.min:g} to all {signal.completions - stats.failed} "
                              "completions it scored: as it stands it cannot steer learning"))
        if stats.failed:
            out.append(Advice(f"reward {stats.name} failed on {stats.failed} of {signal.completions} completions "
                              f"({stats.error or 'returned None'}); TRL counts those as missing values"))
    if signal.truncated_share >= MOSTLY:
        has_length_reward = any(spec.name == "length_target" for spec in recipe.rewards)
        remedy = ("give them room, or leave it to the length_target reward to teach stopping" if has_length_reward
                  else "give them room, or add a length_target reward")
        out.append(Advice(f"{signal.truncated_share:.0%} of completions were cut at the "
                          f"{recipe.grpo.max_completion_length}-token budget: {remedy}",
                          [f"grpo.max_completion_length={2 * recipe.grpo.max_completion_length}"]))
    if result.eta_s > hours * 3600:
        per_step = result.eta_s / max(1, result.total_steps)
        out.append(Advice(f"about {result.eta_s / 3600:.1f} h for {result.total_steps} steps, over {hours:g} h: "
                          f"stop at what fits", [f"training.max_steps={max(1, math.floor(hours * 3600 / per_step))}"]))
    return out


def preflight_json(result: Preflight) -> dict[str, Any]:
    s = result.signal
    return {
        "device": result.measured.device,
        "measured_peak_gib": round(result.measured.peak_bytes / GIB, 4),
        "measured_reserved_gib": None if result.measured.reserved_bytes is None
        else round(result.measured.reserved_bytes / GIB, 4),
        "planned_peak_gib": round(result.planned.peak_tensors / GIB, 4),
        "peak_error_pct": round(result.peak_error_pct, 2),
        "gpu": result.gpu_label,
        "gpu_gib": None if result.verdict.gpu_bytes is None else round(result.verdict.gpu_bytes / GIB, 2),
        "expected_nvidia_smi_gib": round(result.verdict_smi / GIB, 4),
        "fits": result.fits,
        "step_s": round(result.step_s, 3),
        "generation_s": round(result.generation_s, 3),
        "training_s": round(result.step_s - result.generation_s, 3),
        "generation_tokens_per_s": round(s.tokens_per_second, 1),
        "total_steps": result.total_steps,
        "eta_s": round(result.eta_s, 1),
        "eta_worst_s": round(result.eta_worst_s, 1),
        "prompts": s.prompts,
        "completions": s.completions,
        "zero_variance_share": round(s.zero_variance_share, 4),
        "truncated_share": round(s.truncated_share, 4),
        "mean_completion_tokens": round(s.mean_completion_tokens, 1),
        "rewards": [{"name": r.name, "weight": r.weight, "mean": r.mean, "std": r.std, "min": r.min, "max": r.max,
                     "failed": r.failed, "error": r.error} for r in s.rewards],
        "advice": [{"reason": a.reason, "overrides": a.overrides} for a in result.advice],
        "seconds": round(result.seconds, 1),
    }


def print_preflight(console, result: Preflight, command: str) -> None:
    from rich.table import Table

    m, s = result.measured, result.signal
    kind = "torch.cuda.max_memory_allocated" if m.device == "cuda" else "live tensors on this CPU"
    console.print(f"[bold]fit[/]  measured peak {m.peak_bytes / GIB:.2f} GiB ({kind}) vs plan "
                  f"{result.planned.peak_tensors / GIB:.2f} GiB: plan error {result.peak_error_pct:+.1f}%")
    source = "measured, plan error applied" if m.device == "cuda" else "planned; not measured on a GPU here"
    if result.fits is None:
        console.print(f"     expected in nvidia-smi on a GPU: {result.verdict_smi / GIB:.2f} GiB ({source}); "
                      "no GPU given: add --gpu 24GB or a name")
    else:
        verdict = "[green]fits[/]" if result.fits else "[red]does not fit[/]"
        console.print(f"     {verdict} {result.gpu_label} ({result.verdict.gpu_bytes / GIB:.0f} GiB): "
                      f"{result.verdict_smi / GIB:.2f} GiB expected in nvidia-smi ({source})")
    console.print(f"[bold]time[/] {result.step_s:.1f} s a step at full length (generation {result.generation_s:.1f} s, "
                  f"training {result.step_s - result.generation_s:.1f} s); generation {s.tokens_per_second:.0f} tokens/s")
    console.print(f"     {result.total_steps} steps: about {_duration(result.eta_s)} at the sampled lengths, "
                  f"at most {_duration(result.eta_worst_s)}")
    console.print(f"[bold]signal[/] {s.prompts} prompts x {result.recipe.grpo.num_generations} completions: "
                  f"{s.zero_variance_share:.0%} of groups without reward variance, {s.truncated_share:.0%} cut at the "
                  f"budget, mean length {s.mean_completion_tokens:.0f} tokens")
    table = Table(box=None, pad_edge=False)
    for column in ("reward", "weight", "mean", "std", "min", "max", "failed"):
        table.add_column(column, justify="left" if column == "reward" else "right")
    for r in s.rewards:
        table.add_row(r.name, f"{r.weight:g}", *(("-" if v is None else f"{v:.3f}") for v in (r.mean, r.std, r.min, r.max)),
                      str(r.failed))
    console.print(table)
    if not result.advice:
        console.print("[green]no advice[/]: nothing measured calls for a change")
    for a in result.advice:
        line = f"  {command} {' '.join(a.overrides)}" if a.overrides else ""
        console.print(f"[yellow]advice[/] {a.reason}" + (f"\n{line}" if line else ""), soft_wrap=True)
    console.print(f"[dim]preflight took {result.seconds:.0f} s; nothing was written to {result.recipe.output_dir}[/]")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
