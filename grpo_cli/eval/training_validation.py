"""Validation while training (`validation:`): the first problems of what `grpo eval` scores, generated greedily by
the model in training (no second copy of its weights) and scored by the same scorer, every K optimizer steps.

Built here from the eval section, handed to training as a plain callable (training and evaluation meet only in the
command that starts the run), so the figure beside the reward is the one `grpo eval` would report for the slice.
"""

from __future__ import annotations

from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.eval.evaluate import LM_EVAL_STOPS, max_new_tokens
from grpo_cli.eval.problems import Problem, chat_prompts, fewshot_pool, lm_eval_prompts, load_problems
from grpo_cli.eval.scoring import FILTERS, score, summarize
from grpo_cli.eval.task import TaskScorer, check_task, load_task_problems, training_overlap
from grpo_cli.generation.transformers_engine import HFGenerator
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.eval_section import EvalSection
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.validation_section import ValidationSection
from grpo_cli.runs.validation_curve import PREFIX, SHORTCUT_KEY, SHORTCUT_REASON_KEY, accuracy_key


def held_out_validation(recipe: Recipe, warn=print) -> HeldOutValidation:
    """The validation of a recipe with a `validation:` section; the data's refusals (no usable row, no verifier)
    come here, before the run directory is written. A slice with training prompts in it is `warn`ed about. Reads the
    eval, validation, data, rewards and model sections, and training's seed."""
    ev, data, size, offset = recipe.eval, recipe.data, recipe.validation.limit, recipe.validation.offset
    reach = ev if ev.limit is None or ev.limit >= offset + size else ev.model_copy(update={"limit": offset + size})
    scorer = None
    if ev.protocol == "task":
        check_task(data, recipe.rewards)
        problems, _ = load_task_problems(reach, data)
        scorer = TaskScorer(data, recipe.rewards, recipe.model)  # an unknown reward is refused here
    else:
        problems, _ = load_problems(reach)
    if offset and len(problems) <= offset:
        raise UserError(
            f"eval's split holds {len(problems)} problems, none after the first {offset}; lower it",
            path="validation.offset",
        )
    problems = problems[offset : offset + size]
    overlap = training_overlap(data, problems, recipe.training.seed)
    if overlap:
        warn(
            f"warning: {overlap} of the {len(problems)} validation problems are also training prompts, so their "
            "accuracy measures memory; validate on a held-out split (eval.split) or file (eval.source)"
        )
    pool = fewshot_pool(ev) if ev.protocol == "lm-eval" and ev.num_fewshot else []
    return HeldOutValidation(ev, data, recipe.validation, problems, scorer, pool)


class HeldOutValidation:
    """`validate(model, tokenizer) -> {"val/...": number}`: one greedy pass over the slice. The model is put in eval
    mode (no dropout) and back in the mode it was in; greedy decoding draws no random number, so the training run
    continues as it would have without it. `ev`, `data`: what `grpo eval` would score with and how it prompts;
    `validation`: the slice's own budget and batch size."""

    def __init__(
        self,
        ev: EvalSection,
        data: DataSection,
        validation: ValidationSection,
        problems: list[Problem],
        scorer: TaskScorer | None,
        pool: list[dict],
    ):
        self.ev, self.data, self.problems, self.scorer, self.pool = ev, data, problems, scorer, pool
        self.budget = validation.max_new_tokens or max_new_tokens(ev)
        self.batch_size = validation.batch_size or ev.batch_size
        self.names = self.scorer.names if self.scorer else list(FILTERS)
        self._prompts: list[str] | None = None

    def __call__(self, model, tokenizer) -> dict[str, float]:
        ev = self.ev
        stops = LM_EVAL_STOPS if ev.protocol == "lm-eval" else []
        max_length = getattr(model.config, "max_position_embeddings", None)
        generator = HFGenerator(model, tokenizer, self.budget, stops, max_length, inference_mode=False)
        was_training = model.training
        model.eval()
        try:
            records = []
            for batch in generator.generate(self.prompts(tokenizer), self.batch_size):
                records += [self._scored(self.problems[item.index], item.text, item.new_tokens) for item in batch]
        finally:
            model.train(was_training)
        tokens = sum(r["new_tokens"] for r in records)
        summary = summarize(records, 0.0, len(records), tokens, self.budget, self.names)
        if self.scorer:  # the task protocol: the shortcut report `grpo eval` gives (eval/shortcuts.py)
            summary.update(self.scorer.report(records))
        return validation_metrics(summary)

    def prompts(self, tokenizer) -> list[str]:
        """The prompts `grpo eval` shows for these problems, rendered once with the training tokenizer."""
        if self._prompts is None:
            ev = self.ev
            if ev.protocol == "lm-eval":
                self._prompts = lm_eval_prompts(self.problems, self.pool, ev.num_fewshot, ev.fewshot_seed)
            else:
                self._prompts = chat_prompts(self.problems, self.data, tokenizer)
        return self._prompts

    def _scored(self, problem: Problem, text: str, new_tokens: int) -> dict[str, Any]:
        if self.scorer:
            verdict = self.scorer.score(text, problem)
        else:
            verdict = score(self.ev.protocol, text, problem, self.data.answer_marker)
        return {"gold": problem.gold, "completion": text, **verdict, "new_tokens": new_tokens}


def validation_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """An evaluation summary as flat metrics.jsonl keys, the protocol's first filter (or verifier) first; under the
    task protocol also the shortcut report's figures, its flag's kinds and reasons."""
    row: dict[str, float] = {f"{PREFIX}problems": summary["problems"]}
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
