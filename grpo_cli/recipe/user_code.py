"""Recipe entries that name user code: rewards, tools and an environment. Each is a built-in name,
`package.module:function` or `path/to/file.py:function`, and runs behind a guard with an optional time limit."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from grpo_cli.recipe.section import Section


class RewardSpec(Section):
    name: str = Field(
        min_length=1, description="Built-in name, `package.module:function`, or `path/to/file.py:function`."
    )
    weight: float = 1.0
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Arguments for parameterised rewards.")
    timeout_s: float | None = Field(
        None, gt=0.0, description="Stop the run (with a checkpoint) when one call takes longer."
    )
    role: Literal["verifier", "format", "shaping"] | None = Field(
        None,
        description="What `grpo eval` (eval.protocol: task) does with it: verifier = checks the answer (accuracy), "
        "format = checks the form (format rate), shaping = nothing. Default by name: the built-in answer checks are "
        "verifiers, the built-in *_format rewards formats, everything else shaping.",
    )
    pass_score: float = Field(1.0, description="A score at or above this counts as right (verifier) or well-formed.")


class ToolSpec(Section):
    name: str = Field(
        min_length=1,
        description="Built-in (calculator), `package.module:function`, or "
        "`path/to/file.py:function`, with type hints and a docstring (TRL's tool contract).",
    )
    timeout_s: float = Field(10.0, gt=0.0, description="A call that takes longer fails; the model is told so.")
    max_result_chars: int = Field(2000, ge=1, description="A longer result is cut before the model reads it.")


class EnvironmentSpec(Section):
    name: str = Field(
        min_length=1,
        description="`package.module:Class` or `path/to/file.py:Class` with "
        "reset(**row) [-> prompt text]; its public methods are tools, an optional get_reward() a reward.",
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Arguments for the class.")
    timeout_s: float = Field(10.0, gt=0.0, description="Time limit of each method call.")
    max_result_chars: int = Field(2000, ge=1, description="A longer tool result is cut before the model reads it.")
