"""Notes printed under a plan: what its lengths include, or leave out, that a user may not expect (tool use sharing
the completion budget, validation generating beside training)."""

from __future__ import annotations

from grpo_cli.recipe.eval_section import EvalSection
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.validation_section import ValidationSection


def budget_notes(recipe: Recipe) -> list[str]:
    """What the plan's lengths include, or leave out, that a user may not expect: tool use, validation."""
    generated, completion = recipe.generation_batch_per_process, recipe.grpo.max_completion_length
    notes = _validation_note(recipe.validation, recipe.eval, recipe.training.max_steps, generated, completion)
    if not (recipe.tools or recipe.environment):
        return notes
    turns = recipe.grpo.max_tool_calling_iterations
    return notes + [
        f"tools: the model's turns and the tool results share grpo.max_completion_length "
        f"({completion} tokens; TRL drops a result that would overflow it), so the peak "
        f"above covers tool use at {'up to ' + str(turns) if turns else 'any number of'} tool-calling turns; the "
        "tool descriptions rendered into the prompt count against data.max_prompt_length"
    ]


def _validation_note(
    v: ValidationSection | None, evaluation: EvalSection, steps: int, generated: int, completion: int
) -> list[str]:
    """Validation while training (`steps`: training.max_steps): how much it generates beside training, and whether
    its batch can outgrow the generation phase the plan sizes, `generated` completions of `completion` tokens a
    process (it runs on the same model, outside any step)."""
    if v is None:
        return []
    budget = v.max_new_tokens or evaluation.max_new_tokens
    batch = min(v.batch_size or evaluation.batch_size, v.limit)
    count = v.passes(steps)
    times = f"{count} times over {steps} steps" if steps > 0 else f"every {v.every_steps} steps"
    note = (
        f"validation: {v.limit} held-out problems greedily, {times} (also before the first step and after the "
        f"last), each up to {budget if budget else 'eval.max_new_tokens (its protocol default)'} new tokens, "
        f"{batch} at a time; its time is printed and left out of the step times"
    )
    if budget and batch * budget > generated * completion:
        note += (
            f"; {batch} x {budget} tokens outgrow the generation batch planned above ({generated} x {completion}): "
            "lower validation.batch_size if memory is tight"
        )
    return [note]
