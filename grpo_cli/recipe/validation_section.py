"""The recipe's `validation:` section: a held-out slice scored every K optimizer steps inside `grpo train`, so a
reward that climbs while the answers stay wrong shows while the run can still be stopped."""

from __future__ import annotations

from pydantic import Field

from grpo_cli.recipe.section import Section


class ValidationSection(Section):
    """Greedy accuracy of the model being trained on the first problems of what `grpo eval` scores: the `eval:`
    section's data and protocol (chat, lm-eval, or task: the recipe's own held-out split and verifiers)."""

    every_steps: int = Field(
        ge=1,
        description="Validate every this many optimizer steps (also before the first step and after the last).",
    )
    limit: int = Field(64, ge=1, description="Problems in the slice: the first N of eval's split after `offset`.")
    offset: int = Field(
        0,
        ge=0,
        description="Problems of eval's split skipped before the slice: eval.limit validates on rows `grpo eval` "
        "does not test, so nothing is picked on the test rows.",
    )
    batch_size: int | None = Field(None, ge=1, description="Prompts per generation batch; default eval.batch_size.")
    max_new_tokens: int | None = Field(
        None, ge=1, description="Generation budget per problem; default eval.max_new_tokens (or its protocol default)."
    )

    def passes(self, total_steps: int) -> int:
        """How often a run of `total_steps` optimizer steps validates: before the first step, at every K-th, and
        after the last one (once when it is a K-th)."""
        return 1 + total_steps // self.every_steps + (total_steps % self.every_steps > 0)
