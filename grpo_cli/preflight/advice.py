"""Preflight's advice: a recipe change (or a plain sentence) for each measured figure that calls for one: fit,
learning signal, tools, truncation, time."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.plan.memory import GIB, Plan
from grpo_cli.preflight.constant_policy import ConstantPolicies
from grpo_cli.preflight.sampling import SampledGroups
from grpo_cli.preflight.validation_time import ValidationTiming
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.schema import GRPOSection, Recipe, TrainingSection
from grpo_cli.recipe.user_code import RewardSpec
from grpo_cli.runs.layout import SAMPLES_FILE

MOSTLY = 0.5  # "most groups", "most completions"


@dataclass
class Advice:
    reason: str
    changes: dict[str, Any] = field(default_factory=dict)  # recipe changes, {"key.path": value}


def fits_on_gpu(verdict: Plan, verdict_smi: float) -> bool | None:
    """The bytes expected in nvidia-smi against the GPU's; None when no GPU was named or found."""
    return None if verdict.gpu_bytes is None else verdict_smi <= verdict.gpu_bytes


def advise(
    recipe: Recipe,
    groups: SampledGroups,
    verdict: Plan,
    verdict_smi: float,
    eta_s: float,
    total_steps: int,
    arch,
    hours: float,
    validation: ValidationTiming | None = None,
    constants: ConstantPolicies | None = None,
) -> list[Advice]:
    """Override lines for each figure that calls for one: fit, learning signal, a constant answer that out-earns
    the base model, tools, truncation, time (the steps and the validation passes between them)."""
    from grpo_cli.plan.fit import suggest

    fits = fits_on_gpu(verdict, verdict_smi) is not False
    return [
        *([] if fits else _fit_advice(verdict, verdict_smi, suggest(recipe, arch, "cuda", verdict.gpu_bytes))),
        *_signal_advice(groups, recipe.grpo, recipe.training, recipe.data),
        *([Advice(constants.warning)] if constants is not None and constants.warning else []),
        *_tool_advice(groups.tools, groups.completions),
        *_truncation_advice(groups, recipe.rewards, recipe.grpo.max_completion_length),
        *_time_advice(eta_s + (validation.eta_s if validation else 0.0), total_steps, hours),
    ]


def _fit_advice(verdict: Plan, verdict_smi: float, fixes: list) -> list[Advice]:
    """Up to two changes that make a recipe fit the GPU it does not fit (`fixes`: plan/fit.py's `suggest`)."""
    need = f"about {verdict_smi / GIB:.1f} GiB expected, {verdict.gpu_bytes / GIB:.0f} GiB on the GPU"
    out = [Advice(f"does not fit ({need}): {label}", changes) for label, changes, _ in fixes[:2]]
    if not fixes:
        out.append(Advice(f"does not fit ({need}) and no listed change makes it: a smaller model or more GPUs"))
    return out


def _signal_advice(
    groups: SampledGroups, grpo: GRPOSection, training: TrainingSection, data: DataSection
) -> list[Advice]:
    """When most groups teach nothing (every completion scored alike), and rewards that cannot steer or fail."""
    g, batch = grpo.num_generations, training.per_device_train_batch_size
    out: list[Advice] = []
    if groups.zero_variance_share >= MOSTLY:
        share = f"{groups.zero_variance_share:.0%} of groups have the same reward for every completion (no signal)"
        out.append(
            Advice(
                f"{share}: sample more completions per prompt",
                {"grpo.num_generations": 2 * g, "training.per_device_train_batch_size": 2 * batch},
            )
        )
        if grpo.temperature < 1.0:
            out.append(
                Advice(
                    f"{share}: sample more diversely",
                    {"grpo.temperature": min(1.0, round(grpo.temperature + 0.2, 2))},
                )
            )
        if data.answer_format == "gsm8k" and data.answer_column and data.max_solution_steps is None:
            out.append(Advice(f"{share}: start on the easier problems", {"data.max_solution_steps": 2}))
        out.append(
            Advice(
                f"{share}: add a reward that gives partial credit (a format reward such as "
                f"{'hashes_format' if data.answer_marker == 'hashes' else 'soft_format'}, or "
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


def _truncation_advice(groups: SampledGroups, rewards: list[RewardSpec], budget: int) -> list[Advice]:
    """When most completions ran into the `budget` (grpo.max_completion_length)."""
    if groups.truncated_share < MOSTLY:
        return []
    has_length_reward = any(spec.name == "length_target" for spec in rewards)
    remedy = (
        "give them room, or leave it to the length_target reward to teach stopping"
        if has_length_reward
        else "give them room, or add a length_target reward"
    )
    return [
        Advice(
            f"{groups.truncated_share:.0%} of completions were cut at the {budget}-token budget: {remedy}",
            {"grpo.max_completion_length": 2 * budget},
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
