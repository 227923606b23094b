"""`grpo preflight`: will the recipe fit, how long will it take, can it learn? Measured on this machine, in about a
minute, before the real run. Works in a temporary directory: the recipe's run directory is never touched."""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.plan.memory import GIB, Plan
from grpo_cli.preflight.measure import StepMeasurement
from grpo_cli.preflight.sampling import SampledGroups
from grpo_cli.preflight.warmup_steps import WarmupTiming, time_warmup
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.layout import SAMPLES_FILE

MOSTLY = 0.5  # "most groups", "most completions"


@dataclass
class Advice:
    reason: str
    changes: dict[str, Any] = field(default_factory=dict)  # recipe changes, {"key.path": value}


@dataclass
class Preflight:
    recipe: Recipe
    measured: StepMeasurement
    planned: Plan  # the plan for exactly the steps that ran (same prompt length, same device)
    verdict: Plan  # the plan for the recipe as written, on the GPU
    verdict_smi: float  # bytes expected in nvidia-smi for the recipe as written (measured error applied on CUDA)
    gpu_label: str | None
    groups: SampledGroups
    total_steps: int
    step_s: float
    generation_s: float
    eta_s: float  # at the sampled completion lengths
    eta_worst_s: float  # every completion at the budget
    advice: list[Advice]
    seconds: float
    warmup: WarmupTiming | None = None  # the warm-up's timed steps, when the recipe has one

    @property
    def peak_error_pct(self) -> float:
        return 100 * (self.planned.peak_tensors - self.measured.peak_bytes) / self.measured.peak_bytes

    @property
    def fits(self) -> bool | None:
        return fits_on_gpu(self.verdict, self.verdict_smi)


def fits_on_gpu(verdict: Plan, verdict_smi: float) -> bool | None:
    """The bytes expected in nvidia-smi against the GPU's; None when no GPU was named or found."""
    return None if verdict.gpu_bytes is None else verdict_smi <= verdict.gpu_bytes


def run_preflight(
    recipe: Recipe,
    steps: int,
    prompts: int | None,
    gpu_spec: str | None,
    hours: float,
    show=lambda text, new_phase=False: None,
    own_process: bool = False,
) -> Preflight:
    """Sample groups, run `steps` real steps, plan the same steps, and advise. Checks that need no model (the GPU
    name, the architecture) come first, so a typo is refused before a minute of measuring. `show` hears where it is."""
    from grpo_cli.process.optional_libraries import skip_unused_bitsandbytes

    skip_unused_bitsandbytes(recipe, own_process)  # before torch and the libraries below decide whether it is installed
    import torch

    from grpo_cli.errors import UserError
    from grpo_cli.plan import architectures
    from grpo_cli.plan.gpus import gpu_for
    from grpo_cli.plan.memory import memory_plan
    from grpo_cli.preflight.measure import measure_steps
    from grpo_cli.preflight.sampling import default_prompt_count, sample_groups
    from grpo_cli.tools.guard import EnvironmentFailure

    gpu_label, gpu_bytes = gpu_for(recipe, gpu_spec)
    arch = architectures.resolve(recipe)
    architectures.check_context(recipe, arch)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo-preflight-") as tmp:
        work = Path(tmp)
        isolated = recipe.model_copy(
            update={
                "training": recipe.training.model_copy(update={"output_dir": str(work / "run"), "report_to": ["none"]})
            }
        )
        warmup = time_warmup(isolated, work, steps, show) if recipe.warmup is not None else None
        groups = sample_groups(isolated, prompts or default_prompt_count(recipe), show)  # from the model as it starts
        try:
            measured = measure_steps(isolated, work, steps, show)
        except EnvironmentFailure as failure:  # the run would stop on it too (train/run.py)
            raise UserError(f"{failure}; fix the environment and run the same command again", "environment") from None

    planned = memory_plan(measured.recipe, arch, measured.device)
    if gpu_bytes is None and measured.device == "cuda":
        gpu_label, gpu_bytes = torch.cuda.get_device_name(0), float(torch.cuda.get_device_properties(0).total_memory)
    verdict = memory_plan(recipe, arch, "cuda", gpu_bytes)
    # Measured on a GPU, the plan's error there is known: apply it. On a CPU the CUDA figure stays the plan's.
    correction = measured.peak_bytes / planned.peak_tensors if measured.device == "cuda" else 1.0
    verdict_smi = verdict.peak_smi * correction

    step_s = measured.step_seconds[-1]
    generation_s = min(measured.generation_seconds[-1], step_s)
    total_steps = recipe.total_steps(groups.dataset_rows)
    expected_step, worst_step = expected_step_seconds(recipe, measured, groups, step_s, generation_s)
    eta_s = total_steps * expected_step
    advice = advise(recipe, groups, verdict, verdict_smi, eta_s, total_steps, arch, hours)
    return Preflight(
        recipe,
        measured,
        planned,
        verdict,
        verdict_smi,
        gpu_label,
        groups,
        total_steps,
        step_s,
        generation_s,
        eta_s,
        total_steps * worst_step,
        advice,
        time.perf_counter() - started,
        warmup,
    )


def expected_step_seconds(
    recipe: Recipe, measured: StepMeasurement, groups: SampledGroups, step_s: float, generation_s: float
) -> tuple[float, float]:
    """A step of the run, at the sampled completion lengths and with every completion at the budget, scaled from
    the measured step (every prompt the calibration prompt, every completion at the budget).

    Training scales with sequence length: the run's prompts (the data's longest, as the plan counts them; the
    recipe's limit or the calibration prompt where the data gave none) plus its completions. Generation runs until
    the longest completion of its batch ends, and at least one token: each batch's prompts pass through the model."""
    measured_prompt = measured.recipe.data.max_prompt_length or 0
    prompt = groups.longest_prompt_tokens or recipe.data.max_prompt_length or measured_prompt
    budget = recipe.grpo.max_completion_length
    training_s = (step_s - generation_s) / (measured_prompt + budget)
    share = max(groups.batch_length_share, 1 / budget)
    return (
        generation_s * share + training_s * (prompt + groups.mean_completion_tokens),
        generation_s + training_s * (prompt + budget),
    )


def advise(
    recipe: Recipe,
    groups: SampledGroups,
    verdict: Plan,
    verdict_smi: float,
    eta_s: float,
    total_steps: int,
    arch,
    hours: float,
) -> list[Advice]:
    """Override lines for each figure that calls for one: fit, learning signal, tools, truncation, time."""
    return [
        *_fit_advice(recipe, verdict, verdict_smi, arch),
        *_signal_advice(recipe, groups),
        *_tool_advice(groups.tools, groups.completions),
        *_truncation_advice(recipe, groups),
        *_time_advice(eta_s, total_steps, hours),
    ]


def _fit_advice(recipe: Recipe, verdict: Plan, verdict_smi: float, arch) -> list[Advice]:
    """Up to two changes that make a recipe fit the GPU it does not fit."""
    from grpo_cli.plan.fit import suggest

    if fits_on_gpu(verdict, verdict_smi) is not False:
        return []
    need = f"about {verdict_smi / GIB:.1f} GiB expected, {verdict.gpu_bytes / GIB:.0f} GiB on the GPU"
    fixes = suggest(recipe, arch, "cuda", verdict.gpu_bytes)
    out = [Advice(f"does not fit ({need}): {label}", changes) for label, changes, _ in fixes[:2]]
    if not fixes:
        out.append(Advice(f"does not fit ({need}) and no listed change makes it: a smaller model or more GPUs"))
    return out


def _signal_advice(recipe: Recipe, groups: SampledGroups) -> list[Advice]:
    """When most groups teach nothing (every completion scored alike), and rewards that cannot steer or fail."""
    g, batch = recipe.grpo.num_generations, recipe.training.per_device_train_batch_size
    out: list[Advice] = []
    if groups.zero_variance_share >= MOSTLY:
        share = f"{groups.zero_variance_share:.0%} of groups have the same reward for every completion (no signal)"
        out.append(
            Advice(
                f"{share}: sample more completions per prompt",
                {"grpo.num_generations": 2 * g, "training.per_device_train_batch_size": 2 * batch},
            )
        )
        if recipe.grpo.temperature < 1.0:
            out.append(
                Advice(
                    f"{share}: sample more diversely",
                    {"grpo.temperature": min(1.0, round(recipe.grpo.temperature + 0.2, 2))},
                )
            )
        if (
            recipe.data.answer_format == "gsm8k"
            and recipe.data.answer_column
            and recipe.data.max_solution_steps is None
        ):
            out.append(Advice(f"{share}: start on the easier problems", {"data.max_solution_steps": 2}))
        out.append(
            Advice(
                f"{share}: add a reward that gives partial credit (a format reward such as "
                f"{'hashes_format' if recipe.data.answer_marker == 'hashes' else 'soft_format'}, or "
                "length_target) so completions of one prompt score differently"
            )
        )
    for stats in groups.rewards:
        if stats.constant:
            out.append(
                Advice(
                    f"reward {stats.name} gave {stats.min:g} to all {groups.completions - stats.failed} "
                    "completions it scored: as it stands it cannot steer learning"
                )
            )
        if stats.failed:
            out.append(
                Advice(
                    f"reward {stats.name} failed on {stats.failed} of {groups.completions} completions "
                    f"({stats.error or 'returned None'}); TRL counts those as missing values"
                )
            )
    return out


def _truncation_advice(recipe: Recipe, groups: SampledGroups) -> list[Advice]:
    if groups.truncated_share < MOSTLY:
        return []
    has_length_reward = any(spec.name == "length_target" for spec in recipe.rewards)
    remedy = (
        "give them room, or leave it to the length_target reward to teach stopping"
        if has_length_reward
        else "give them room, or add a length_target reward"
    )
    return [
        Advice(
            f"{groups.truncated_share:.0%} of completions were cut at the "
            f"{recipe.grpo.max_completion_length}-token budget: {remedy}",
            {"grpo.max_completion_length": 2 * recipe.grpo.max_completion_length},
        )
    ]


def _time_advice(eta_s: float, total_steps: int, hours: float) -> list[Advice]:
    if eta_s <= hours * 3600:
        return []
    per_step = eta_s / max(1, total_steps)
    return [
        Advice(
            f"about {eta_s / 3600:.1f} h for {total_steps} steps, over {hours:g} h: stop at what fits",
            {"training.max_steps": max(1, math.floor(hours * 3600 / per_step))},
        )
    ]


def _tool_advice(tools: dict | None, completions: int) -> list[Advice]:
    """GRPO can only reinforce tool calls the model samples: say when it makes none, or only unreadable ones."""
    if tools is None:
        return []
    out: list[Advice] = []
    if tools["calls_per_completion"] == 0:
        tried = tools["completions_with_malformed"]
        what = (
            f"it tried in {tried:.0%} of them, in a form the template's parser does not read (see samples)"
            if tried
            else "it never tried"
        )
        out.append(
            Advice(
                f"no tool was called in {completions} sampled completions ({what}): GRPO cannot reinforce "
                "a call it never samples; ask for the tool in data.system_prompt, sample more diversely, or "
                "teach the call format first (supervised fine-tuning)"
            )
        )
    elif tools["failure_rate"] >= MOSTLY:
        out.append(
            Advice(
                f"{tools['failure_rate']:.0%} of tool calls failed: read the errors the model received in a "
                f"short run's {SAMPLES_FILE} (wrong arguments, timeouts) and fix the tool or its description"
            )
        )
    return out
