"""A recipe's tools and environment as every command uses them: training, `grpo eval`, `grpo preflight` and the
plan's prompt lengths all take them from here, so each sees the same guarded functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from grpo_cli.tools.registry import EnvironmentEntry, ToolEntry, guarded_environment, guarded_tools


def prompt_tools(tools: Sequence[ToolEntry]) -> list[Callable[..., Any]] | None:
    """The tools the chat template renders into every prompt (None without tools): prompt lengths count them."""
    return guarded_tools(tools) if tools else None


def recipe_tools(
    tools: Sequence[ToolEntry],
    environment: EnvironmentEntry | None,
    model_name: str,
    tokenizer,
    warn: Callable[[str], None] = print,
):
    """The recipe's tools and environment factory, each behind its guard, once the chat template of `model_name`'s
    `tokenizer` is known to carry tool calls; (None, None) for a recipe with neither. `warn`: where an environment's
    warnings go."""
    if not tools and environment is None:
        return None, None
    from grpo_cli.tools.template import check_tool_template

    check_tool_template(tokenizer, model_name)
    guarded = guarded_environment(environment, warn) if environment is not None else None
    return guarded_tools(tools), guarded
