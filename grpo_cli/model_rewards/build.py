"""A recipe's rewards as callables, in order: functions from the reward registry, reward models and judges from
here; and the step where training hands the models their trainer (the policy a judge may be, the device)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo_cli.model_rewards.scorer import ModelReward, RewardModel
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.user_code import RewardSpec


def reward_functions(rewards: list[RewardSpec], model: ModelSection) -> list[Callable[..., Any]]:
    """One callable with TRL's reward signature per entry of `rewards:`. Models load later: as training starts
    (`bind_model_rewards`), else at their first call. `model`: the policy's section, which a judge may be and whose
    dtype reward models default to."""
    from grpo_cli.model_rewards.judge import Judge
    from rewards import resolve_reward

    out: list[Callable[..., Any]] = []
    for index, spec in enumerate(rewards):
        if spec.judge is not None:
            out.append(Judge(spec, index, model))
        elif spec.model is not None:
            out.append(RewardModel(spec, index, model))
        else:
            out.append(resolve_reward(spec.name, spec.kwargs))
    return out


def model_rewards(funcs: list) -> list[ModelReward]:
    """The rewards among `funcs` that are models, behind their guards."""
    from grpo_cli.reward_guard import GuardedReward

    found = []
    for func in funcs:
        while isinstance(func, GuardedReward):
            func = func.func
        if isinstance(func, ModelReward):
            found.append(func)
    return found


def bind_model_rewards(trainer) -> None:
    """Load each reward model and judge where the trainer trains, and give a `policy` judge the trainer's model."""
    for reward in model_rewards(trainer.reward_funcs):
        reward.bind(trainer)
