"""Read by the type checker only (`mypy`, pyproject.toml): every engine is a Generator (generation/base.py), the
recipe's tool entries are the entries tools/ reads (tools/registry.py), and the held-out validation is the Validation
training holds (train/validation_callback.py). A member renamed or retyped on one side fails
CI's `mypy` step; nothing here runs."""

from __future__ import annotations

from grpo_cli.eval.training_validation import HeldOutValidation
from grpo_cli.generation.base import Generator
from grpo_cli.generation.continuous import ContinuousGenerator
from grpo_cli.generation.policy_sampler import PolicySampler
from grpo_cli.generation.transformers_engine import HFGenerator
from grpo_cli.generation.vllm_engine import VLLMGenerator
from grpo_cli.recipe.user_code import EnvironmentSpec, ToolSpec
from grpo_cli.tools.registry import EnvironmentEntry, ToolEntry
from grpo_cli.train.validation_callback import Validation


def engines_are_generators(
    transformers: HFGenerator, continuous: ContinuousGenerator, vllm: VLLMGenerator, policy: PolicySampler
) -> list[Generator]:
    return [transformers, continuous, vllm, policy]


def specs_are_entries(tool: ToolSpec, environment: EnvironmentSpec) -> tuple[ToolEntry, EnvironmentEntry]:
    return tool, environment


def held_out_is_a_validation(held_out: HeldOutValidation) -> Validation:
    return held_out
