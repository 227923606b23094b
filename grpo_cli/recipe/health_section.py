"""The recipe's `training.health:` section: the thresholds of the health watch (grpo_cli/runs/health.py) and the
kinds of trouble that stop a run. Every signature and its fix: docs/health.md."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grpo_cli.recipe.section import Section

# What `halt_on` can name: each signature belongs to one kind (runs/health.py's SIGNATURES).
HaltKind = Literal["nan", "no_signal", "collapse", "gaming", "divergence", "tools"]


class HealthSection(Section):
    """When a signature sounds: each must hold over `window` logged steps (a NaN or a gradient spike at once)."""

    window: int = Field(5, ge=2, description="Logged steps a signature must hold; also the span of its averages.")
    flat_share: float = Field(
        0.9, gt=0.0, le=1.0, description="no_signal: at least this share of groups scored alike, every step."
    )
    entropy_drop: float = Field(
        0.2, gt=0.0, lt=1.0, description="entropy_collapse: entropy under this share of the first window's."
    )
    length_drop: float = Field(
        0.3, gt=0.0, lt=1.0, description="length_collapse: mean completion length under this share of the first's."
    )
    cut_share: float = Field(
        0.5, gt=0.0, le=1.0, description="cut_at_limit: at least this share of completions cut at the budget."
    )
    reward_rise: float = Field(
        0.25,
        gt=0.0,
        description="reward_saturated: the reward rose by this share of its start while validation did not.",
    )
    reward_fall: float = Field(
        0.3, gt=0.0, description="reward_falling: three windows falling, the last this share below the first."
    )
    kl_max: float = Field(1.0, gt=0.0, description="kl_runaway: the KL to the reference above this, every step.")
    grad_spike: float = Field(10.0, gt=1.0, description="grad_spike: gradient norm above this times its median.")
    dominance: float = Field(
        0.9, gt=0.5, le=1.0, description="one_reward_dominates: a lesser-weighted reward's share of the spread."
    )
    tool_failures: float = Field(0.5, gt=0.0, le=1.0, description="tools_failing: this share of tool calls failed.")
    halt_on: list[HaltKind] = Field(
        default_factory=lambda: ["nan"],  # after a NaN the next step fails on non-finite weights anyway
        description="Stop the run (exit 3; a checkpoint saved but after a NaN) when a signature of these kinds sounds.",
    )
