"""`grpo eval --samples N --temperature T`: the evaluation's sampling (generation/sampling.py draws it) and the
refusals that come before anything loads."""

from __future__ import annotations

from grpo_cli.errors import UserError
from grpo_cli.generation.sampling import Sampling
from grpo_cli.recipe.eval_section import EvalSection


def sampling_of(ev: EvalSection) -> Sampling | None:
    """The evaluation's sampling, or None for greedy decoding (no temperature: today's one completion per problem)."""
    if ev.temperature is None:
        return None
    return Sampling(ev.samples or 1, ev.temperature, 1.0 if ev.top_p is None else ev.top_p, ev.seed or 0)


# A problem's N completions are held together until all are scored, and written as one line of predictions.jsonl;
# every prompt and seed is built before the first batch. Far past any N the figures need (pass@k's estimator is
# unbiased at any N), and small enough that the largest split's prompts fit in memory.
MAX_SAMPLES = 1024


def check_sampling(ev: EvalSection, uses_tools: bool) -> None:
    """Refusals before anything loads or is written, each naming the flag and the fix."""
    if (ev.samples or 1) > MAX_SAMPLES:
        raise UserError(
            f"--samples {ev.samples} (eval.samples) is more than the {MAX_SAMPLES} completions per problem an "
            f"evaluation holds; give --samples {MAX_SAMPLES} or fewer"
        )
    if ev.temperature is None and (ev.samples or 1) > 1:
        raise UserError(
            f"--samples {ev.samples} needs --temperature above 0 (eval.temperature): greedy decoding would write "
            f"the same completion {ev.samples} times; add e.g. --temperature 1.0, or leave out --samples"
        )
    if ev.temperature is None and ev.top_p not in (None, 1.0):
        raise UserError(f"eval.top_p {ev.top_p} applies to sampling only: add --temperature, or leave out eval.top_p")
    if ev.temperature is not None and uses_tools:
        raise UserError(
            "--temperature/--samples: the tool loop evaluates greedily only; leave out --samples and --temperature "
            "for this recipe"
        )
