"""`grpo plan --solve KEY`: the largest value of one size in the recipe that still fits, found by searching the plan.

The plan grows with each of these sizes, so the search doubles the value until it no longer fits, then bisects the
gap: a few dozen plans, each a formula. Every value tried is applied to the validated recipe and validated like the
file, so the answer is one `grpo train` accepts; where the recipe's rules tie the key to another, the other moves
with it and is named in the answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.plan import architectures
from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.fit import Changes, PlanResult
from grpo_cli.plan.memory import Plan, limit_prompt_tokens, memory_plan
from grpo_cli.recipe.model_section import LoraSection
from grpo_cli.recipe.schema import Recipe

GENERATIONS = "grpo.num_generations"
COMPLETION = "grpo.max_completion_length"
BATCH = "training.per_device_train_batch_size"
RANK = "lora.r"
PROMPT = "data.max_prompt_length"
SOLVABLE = (GENERATIONS, COMPLETION, BATCH, RANK, PROMPT)

# Where the search gives up on a size the plan never outgrows: far beyond any GPU's memory for the sizes above.
SEARCH_CAP = 2**20


@dataclass
class Trial:
    """One value of the key, with the other changes it needs; its plan, or why the recipe's rules refuse it."""

    value: int
    changes: Changes
    plan: Plan | None = None
    refused: str = ""  # the recipe's own problem line when it refuses the value (beyond the model's context, ...)

    @property
    def fits(self) -> bool:
        return self.plan is not None and bool(self.plan.fits)


@dataclass
class Solution:
    key: str
    current: int  # the recipe's value
    current_peak: float  # its expected peak, on the same basis as the search
    budget: float
    device: str  # cuda: the peaks are nvidia-smi's; cpu: the process's RSS
    found: Trial | None  # the largest value that fits; None: not even the smallest one does
    next: Trial | None  # the value after it (does not fit, or is refused); None: the search stopped at SEARCH_CAP
    basis: str  # the prompt length every plan of the search was sized at, in words
    note: str = ""  # why another key moves with this one, and how
    limit: str = ""  # with `found` and no `next`: why no larger value was tried

    @property
    def changed_keys(self) -> set[str]:
        """The keys the answer sets: this one, and any that move with it."""
        trial = self.found or self.next
        return set(trial.changes) if trial else {self.key}


def solve(recipe: Recipe, key: str, result: PlanResult) -> Solution:
    """The largest value of `key` whose plan fits the budget `grpo plan` checked the recipe against (`result`)."""
    _check_key(key, recipe.lora, recipe.trl)
    plan = result.plan
    if plan.gpu_bytes is None:
        raise UserError(
            f"--solve {key} needs the memory to fit: add --gpu 24GB (or a name such as 'RTX 4090'), or hardware.gpu "
            "in the recipe"
        )
    arch, device, budget = plan.arch, plan.device, plan.gpu_bytes
    # The data's longest prompt sets the verdict for every size but the prompt limit itself: that one is searched at
    # the limit, the bound for any data the recipe accepts (the data's own figure does not grow past its longest).
    prompt_tokens = result.data.longest_prompt if result.data and key != PROMPT else None
    if prompt_tokens:
        basis = (
            f"planned at this data's longest prompt ({prompt_tokens} tokens; TRL pads a batch to its longest prompt), "
            "completions at their full budget"
        )
    elif key == PROMPT:
        basis = "planned at the prompt limit itself, the bound for any data the recipe accepts"
    else:
        basis = f"{result.data_note} ({limit_prompt_tokens(recipe.data)} prompt tokens)"
    b, fixed = recipe.training.per_device_train_batch_size, recipe.trl.get("generation_batch_size")
    processes, steps = recipe.num_processes, recipe.steps_per_generation
    value_at, changes_for, note = _candidates(key, recipe.grpo.num_generations, b, processes, steps, fixed)
    trials: dict[int, Trial] = {}

    def trial(index: int) -> Trial | None:
        value = value_at(index)
        if value is None:
            return None
        if value not in trials:
            trials[value] = _try(recipe, arch, device, budget, prompt_tokens, value, changes_for(value))
        return trials[value]

    def fits(index: int) -> bool:
        t = trial(index)
        return t is not None and t.fits

    section, name = key.split(".")
    current = limit_prompt_tokens(recipe.data) if key == PROMPT else getattr(getattr(recipe, section), name)
    current_plan = memory_plan(recipe, arch, device, budget, prompt_tokens)
    last = _largest(fits)
    found, after = (trial(last), trial(last + 1)) if last else (None, trial(1))
    limit = ""
    if found is not None and after is None:
        limit = (
            "no larger micro-batch divides each process's share of trl.generation_batch_size"
            if key == BATCH and fixed
            else f"the search stops at {SEARCH_CAP}"
        )
    return Solution(key, current, current_plan.expected, budget, device, found, after, basis, note, limit)


def _divisors(n: int) -> list[int]:
    """The divisors of n up to SEARCH_CAP, in order: pairs up to its square root, so a huge generation batch costs
    milliseconds, not a count to n."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({v for d in small for v in (d, n // d) if v <= SEARCH_CAP})


def _largest(fits: Callable[[int], bool]) -> int:
    """The largest index that fits (0: not even the first), for a fit that only fails from some index on: doubling
    to an index that does not fit, then bisecting the gap."""
    if not fits(1):
        return 0
    good, bad = 1, 2
    while fits(bad):
        good, bad = bad, bad * 2
    while bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return good


def _check_key(key: str, lora: LoraSection | None, trl: dict[str, Any]) -> None:
    from grpo_cli.recipe.validation import is_schema_field

    allowed = f"--solve searches only {', '.join(SOLVABLE)}"
    if key not in SOLVABLE:
        what = "not a size it can search" if is_schema_field(tuple(key.split("."))) else "not a recipe field"
        raise UserError(f"--solve {key}: {what}; {allowed}")
    if key == RANK and lora is None:
        raise UserError(
            f"--solve {key}: the recipe has no `lora:` section, so its plan does not depend on a rank; {allowed}"
        )
    if key == RANK and lora.adapter:
        raise UserError(f"--solve {key}: the rank is the starting adapter's (lora.adapter); {allowed}")
    if key == GENERATIONS and trl.get("generation_batch_size"):
        raise UserError(
            f"--solve {key}: trl.generation_batch_size fixes the completions generated at once, so the plan does not "
            f"depend on the group size; solve {BATCH}, or remove trl.generation_batch_size"
        )


def _candidates(
    key: str, g: int, b: int, processes: int, steps_per_generation: int, fixed: int | None
) -> tuple[Callable[[int], int | None], Callable[[int], Changes], str]:
    """The values the recipe's rules allow, in increasing order (index 1 the smallest; None past the last), the
    changes each one makes, and a note naming what else moves and why: for groups of g completions, micro-batches of
    b, `processes`, `steps_per_generation` and trl.generation_batch_size (`fixed`; None: TRL derives it)."""
    batch = processes * steps_per_generation  # completions generated = b x batch

    def single(value: int) -> Changes:
        return {key: value}

    def progression(first: int, step: int) -> Callable[[int], int | None]:
        return lambda index: value if (value := first + (index - 1) * step) <= SEARCH_CAP else None

    if key == GENERATIONS:
        # per_device_train_batch_size counts completions, and the plan depends on the completions, not on how they
        # are grouped: the group grows with the prompts per generation batch kept, so the batch grows with it.
        step = g // math.gcd(b, g)
        prompts = b * batch // g  # the completions generated at once: no trl.generation_batch_size (_check_key)
        note = (
            f"{BATCH} counts completions, so it grows with the group (the same {prompts} prompt"
            f"{'s' if prompts > 1 else ''} per generation batch)"
        )
        return progression(step * math.ceil(2 / step), step), lambda v: {key: v, BATCH: b * v // g}, note
    if key == BATCH:
        if fixed:  # the generation batch stays; a micro-batch must divide each process's share of it
            share = int(fixed) // processes
            divisors = _divisors(share)
            return lambda index: divisors[index - 1] if index <= len(divisors) else None, single, ""
        step = g // math.gcd(batch, g)
        note = (
            f"in steps of {step}: the generation batch ({BATCH} x {processes} process(es) x "
            f"steps_per_generation {steps_per_generation}) must hold whole groups of {g}"
            if step > 1
            else ""
        )
        return progression(step, step), single, note
    return progression(1, 1), single, ""


def _try(
    recipe: Recipe,
    arch: Architecture,
    device: str,
    budget: float,
    prompt_tokens: int | None,
    value: int,
    changes: Changes,
) -> Trial:
    from grpo_cli.recipe.validation import with_changes

    try:
        changed = with_changes(recipe, changes)
        architectures.check_context(changed.data, changed.grpo, arch)
    except UserError as exc:
        # the trial's values are the search's, not overrides the user typed: no `command line:` before the reason
        return Trial(value, changes, refused=str(replace(exc.problems[0], source=None, line=None)))
    return Trial(value, changes, memory_plan(changed, arch, device, budget, prompt_tokens))
