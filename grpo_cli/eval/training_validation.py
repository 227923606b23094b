"""Validation while training (`validation:`): the first problems of what `grpo eval` scores, generated greedily by
the model in training (no second copy of its weights) and scored by the same scorer, every K optimizer steps.

Built here from the eval section, handed to training as a plain callable (training and evaluation meet only in the
command that starts the run), so the figure beside the reward is the one `grpo eval` would report for the slice.
"""

from __future__ import annotations

from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.eval.suite import EvalSuite, build_suite
from grpo_cli.eval.task import training_overlap
from grpo_cli.generation.transformers_engine import HFGenerator
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.validation_section import ValidationSection
from grpo_cli.runs.validation_curve import PREFIX, SHORTCUT_KEY, SHORTCUT_REASON_KEY, accuracy_key


def held_out_validation(recipe: Recipe, warn=print) -> HeldOutValidation:
    """The validation of a recipe with a `validation:` section; the data's refusals (no usable row, no verifier)
    come here, before the run directory is written. A slice with training prompts in it is `warn`ed about. Reads the
    eval, validation, data, rewards and model sections, and training's seed."""
    settings = recipe.validation
    if settings is None:
        raise ValueError("held_out_validation needs a recipe with a validation: section")
    ev, data, size, offset = recipe.eval, recipe.data, settings.limit, settings.offset
    reach = ev if ev.limit is None or ev.limit >= offset + size else ev.model_copy(update={"limit": offset + size})
    seed = recipe.training.seed
    suite = build_suite(reach, data, recipe.rewards, recipe.model, seed, check_references=False)
    if offset and len(suite.problems) <= offset:
        raise UserError(
            f"eval's split holds {len(suite.problems)} problems, none after the first {offset}; lower it",
            path="validation.offset",
        )
    suite = suite.window(offset, size)
    overlap = training_overlap(data, list(suite.problems), seed)
    if overlap:
        warn(
            f"warning: {overlap} of the {len(suite.problems)} validation problems are also training prompts, so their "
            "accuracy measures memory; validate on a held-out split (eval.split) or file (eval.source)"
        )
    return HeldOutValidation(suite, settings)


class HeldOutValidation:
    """`validate(model, tokenizer) -> {"val/...": number}`: one greedy pass over the suite's problems. The model is
    put in eval mode (no dropout) and back in the mode it was in; greedy decoding draws no random number, so the
    training run continues as it would have without it. `validation`: the slice's own budget and batch size.
    Training sees it as its `Validation` protocol (train/validation_callback.py)."""

    def __init__(self, suite: EvalSuite, validation: ValidationSection):
        self.suite, self.validation = suite, validation
        self.budget = validation.max_new_tokens or suite.budget
        self.batch_size = validation.batch_size or suite.ev.batch_size
        self._prompts: list[str] | None = None

    @property
    def problems(self):
        return self.suite.problems

    @property
    def questions(self) -> list[Any]:
        return [p.question for p in self.suite.problems]

    def first(self, n: int) -> HeldOutValidation:
        """The same validation over its first `n` problems (a new object: this one is unchanged)."""
        return HeldOutValidation(self.suite.first(n), self.validation)

    def __call__(self, model, tokenizer) -> dict[str, Any]:
        max_length = getattr(model.config, "max_position_embeddings", None)
        generator = HFGenerator(model, tokenizer, self.budget, self.suite.stops, max_length, inference_mode=False)
        was_training = model.training
        model.eval()
        try:
            records = []
            for batch in generator.generate(self.prompts(tokenizer), self.batch_size):
                records += [self._scored(self.suite.problems[item.index], item) for item in batch]
        finally:
            model.train(was_training)
        tokens = sum(r["new_tokens"] for r in records)
        return validation_metrics(self.suite.summary(records, 0.0, len(records), tokens, budget=self.budget))

    def prompts(self, tokenizer) -> list[str]:
        """The prompts `grpo eval` shows for these problems, rendered once with the training tokenizer."""
        if self._prompts is None:
            self._prompts = self.suite.prompts(tokenizer)
        return self._prompts

    def _scored(self, problem, item) -> dict[str, Any]:
        verdict = self.suite.verdict(problem, item.text)
        return {"gold": problem.gold, "completion": item.text, **verdict, "new_tokens": item.new_tokens}


def validation_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """An evaluation summary as flat metrics.jsonl keys, the protocol's first filter (or verifier) first; under the
    task protocol also the shortcut report's figures, its flag's kinds and reasons."""
    row: dict[str, Any] = {f"{PREFIX}problems": summary["problems"]}
    for name, figures in summary["filters"].items():
        row[accuracy_key(name)] = figures["accuracy"]
        row[f"{PREFIX}{name}/correct"] = figures["correct"]
        if "accuracy_well_formed" in figures:
            row[f"{PREFIX}{name}/accuracy_well_formed"] = figures["accuracy_well_formed"]
    if summary["format_rate"] is not None:  # a task without a format reward has no format rate
        row[f"{PREFIX}format_rate"] = summary["format_rate"]
    row[f"{PREFIX}mean_new_tokens"] = round(summary["mean_new_tokens"], 2)
    row[f"{PREFIX}cut_rate"] = summary["cut_rate"]
    if "shortcut" in summary:  # the task protocol's shortcut report, flat
        top = summary["answer_distribution"]["top"]
        row[f"{PREFIX}top_answer"] = top[0]["answer"] if top else None
        row[f"{PREFIX}top_answer_share"] = top[0]["share"] if top else 0.0
        row[f"{PREFIX}majority_baseline"] = summary["majority_baseline"]["accuracy"]
        if summary["balanced_accuracy"] is not None:
            row[f"{PREFIX}balanced_accuracy"] = summary["balanced_accuracy"]
        row[SHORTCUT_KEY] = summary["shortcut"]["kinds"]  # [] when nothing is flagged
        if summary["shortcut"]["flag"]:
            row[SHORTCUT_REASON_KEY] = "; ".join(summary["shortcut"]["reasons"])
    return row
