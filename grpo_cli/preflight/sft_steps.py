"""The SFT stage in `grpo preflight`: a few real supervised steps on the SFT stage's own examples, timed, so the ETA
covers both stages (the memory side is the plan's: the SFT stage's peak beside GRPO's, plan/memory.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.sft_section import SELF


@dataclass
class SftTiming:
    examples: int  # examples the SFT stage will train on (for `self`: at most one per sampled prompt)
    total_steps: int
    step_s: float  # the last timed step (the first one pays for start-up)
    note: str = ""  # what was timed when it is not the SFT stage's own examples

    @property
    def eta_s(self) -> float:
        return self.total_steps * self.step_s


def time_sft(recipe: Recipe, work: Path, steps: int = 2, show=lambda text, new_phase=False: None) -> SftTiming:
    """`steps` supervised steps (at least 2) of the SFT stage, in `work`, nothing saved."""
    from transformers import TrainerCallback

    from grpo_cli.train.sft import sft_setup, sft_trainer, total_steps
    from grpo_cli.train.sft_examples import reference_examples, training_examples

    section = recipe.sft
    note = ""
    examples = training_examples(recipe.sft, recipe.data, recipe.tools, recipe.training.seed)
    if section.source == SELF:  # `self`: sampling is not timed here; its examples are the model's own, as long as these
        examples = reference_examples(recipe.data, section.count, recipe.training.seed, recipe.tools)
        note = "self: the sampling before it is not timed; steps timed on reference solutions of the same prompts"
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            show(f"timing SFT step {state.global_step + 1}/{max(2, steps)}", new_phase=True)
            times.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            times[-1] = time.perf_counter() - times[-1]

    trainer = sft_trainer(
        section,
        recipe.training,
        work / "sft",
        sft_setup(recipe),
        examples.rows,
        [Clock()],
        max_steps=max(2, steps),
        save_strategy="no",
        report_to=["none"],
        logging_steps=1,
    )
    trainer.train()
    rows = len(trainer.train_dataset)  # for `self` an upper bound: sampling keeps at most one example a prompt
    return SftTiming(rows, total_steps(section, rows), times[-1], note)
