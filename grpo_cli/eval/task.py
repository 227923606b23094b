"""`grpo eval` on the recipe's own task (eval.protocol: task): the recipe's data section applied to a held-out split,
each completion scored by the recipe's rewards as training called them: the verifiers (rewards that check the answer)
give accuracy, the format rewards the format rate; shaping rewards are left out. Training reward is not task
accuracy (a format learned, answers not): this is the figure that says which happened."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from grpo_cli.data import build_prompt, gold_answer, select_rows
from grpo_cli.errors import UserError
from grpo_cli.eval.problems import GENERATED_TEST_SEED, Problem
from grpo_cli.eval.references import check_references, problem_references
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.eval_section import EvalSection
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.user_code import RewardSpec

# What a built-in reward is to evaluation when the recipe does not say (`role:`). Answer checks are verifiers;
# rewards on the form are formats; everything else (length, proximity, partial credit) shapes training only.
BUILTIN_VERIFIERS = {"correctness", "marked_correctness", "math_correctness", "exact_match", "normalized_match"}
BUILTIN_FORMATS = {"strict_format", "soft_format", "think_format", "hashes_format", "answer_tag"}


def role_of(spec) -> str:
    if spec.role is not None:
        return spec.role
    if spec.name in BUILTIN_VERIFIERS:
        return "verifier"
    return "format" if spec.name in BUILTIN_FORMATS else "shaping"


def check_task(data: DataSection, rewards: list[RewardSpec]) -> None:
    """A task evaluation needs reference answers and at least one reward that checks them."""
    if not data.answer_column:
        raise UserError(
            "evaluating the task needs the reference answers: set data.answer_column to the column that holds them",
            path="data.answer_column",
        )
    for index, spec in enumerate(rewards):
        if spec.role == "verifier" and spec.name in BUILTIN_FORMATS:
            raise UserError(
                f"`{spec.name}` checks the form of an answer, not whether it is right: it cannot be a verifier; "
                "set its role: format",
                path=f"rewards[{index}].role",
            )
    if not any(role_of(spec) == "verifier" for spec in rewards):
        names = ", ".join(f"`{s.name}`" for s in rewards) or "none"
        raise UserError(
            f"no reward checks the answer (rewards: {names}): add `correctness`, or mark your answer check "
            "`role: verifier`",
            path="rewards",
        )


def task_problems(
    ev: EvalSection,
    data: DataSection,
    rewards: list[RewardSpec],
    model: ModelSection,
    seed: int,
    note=None,
    references: bool = True,
) -> tuple[list[Problem], int, TaskScorer]:
    """The held-out problems, how many rows were unusable, and their scorer (TaskScorer); refusals come before any
    file. `seed`: training's, which drew the training prompts the overlap is counted on (and `note`d); `references`:
    run the verifiers on the reference answers first."""
    check_task(data, rewards)
    problems, unscorable = load_task_problems(ev, data)
    scorer = TaskScorer(data, rewards, model)  # an unknown reward is refused here
    if references:
        verifiers = [index for index, spec in enumerate(rewards) if role_of(spec) == "verifier"]
        check_references(data, rewards, verifiers, problem_references(data, problems), ev.task_data(data)[0])
    overlap = training_overlap(data, problems, seed)
    if overlap and note:
        note(
            f"warning: {overlap} of the {len(problems)} evaluated prompts are also training prompts; "
            "evaluate a held-out split (eval.split) or file (eval.source)"
        )
    return problems, unscorable, scorer


def load_task_problems(ev: EvalSection, data: DataSection) -> tuple[list[Problem], int]:
    """The first eval.limit usable rows of the held-out split, in its order, prepared as training prepares rows; and
    how many rows were left out as unusable. The source is eval.source when the recipe sets it, else the training
    data's own (EvalSection.task_data)."""
    source, config = ev.task_data(data)
    held_out = data.model_copy(
        update={
            "source": source,
            "config": config,
            "split": ev.split,
            "limit": ev.limit,
            "shuffle_seed": None,
            "max_solution_steps": None,  # the whole held-out split, not the training band
        }
    )
    try:
        rows, unusable = select_rows(held_out, seed=GENERATED_TEST_SEED)
    except UserError as exc:  # the same data errors, under the key that chose this data
        raise UserError(
            [replace(q, path="eval.source") if q.path == "data.source" else q for q in exc.problems]
        ) from None
    column, answers = held_out.prompt_column, held_out.answer_column
    problems = [
        Problem(i, row[column], str(row[answers]), gold_answer(row[answers], held_out.answer_format))
        for i, row in enumerate(rows)
    ]
    return problems, sum(unusable.values())


def task_settings(ev: EvalSection, data: DataSection, rewards: list[RewardSpec]) -> dict[str, Any]:
    """What makes two task evaluations the same one: the data as prepared and the rewards that score it."""
    source, config = ev.task_data(data)
    return {
        "source": source,
        "config": config,
        "prompt_column": data.prompt_column,
        "answer_column": data.answer_column,
        "answer_format": data.answer_format,
        "scorers": [
            {"name": s.name, "kwargs": s.kwargs, "role": role_of(s), "pass_score": s.pass_score}
            for s in rewards
            if role_of(s) != "shaping"
        ],
    }


def training_overlap(data: DataSection, problems: list[Problem], seed: int) -> int:
    """How many evaluated prompts are also training prompts (the same text, training's rows drawn with its `seed`):
    an evaluation on them measures memory, not the task."""
    rows, _ = select_rows(data, seed=seed)
    seen = {_text(row[data.prompt_column]) for row in rows}
    return sum(_text(p.question) in seen for p in problems)


def _text(question: Any) -> str:
    """A question as comparable text: a conversation's turns as JSON."""
    return question if isinstance(question, str) else json.dumps(question, sort_keys=True)


class TaskScorer:
    """Scores one completion with the recipe's verifier and format rewards, each behind the training guard. `model`:
    the recipe's model section, the policy a judge may be and the default dtype of reward models."""

    def __init__(self, data: DataSection, rewards: list[RewardSpec], model: ModelSection):
        from grpo_cli.model_rewards.build import reward_functions
        from grpo_cli.reward_guard import GuardedReward

        self.data = data
        self.verifiers: list[tuple[str, Any, float]] = []
        self.formats: list[tuple[str, Any, float]] = []
        for spec, func in zip(rewards, reward_functions(rewards, model)):
            role = role_of(spec)
            if role == "shaping":
                continue
            group = self.verifiers if role == "verifier" else self.formats
            label = spec.name if all(spec.name != name for name, _, _ in group) else f"{spec.name}#{len(group) + 1}"
            group.append((label, GuardedReward(func, spec.timeout_s, label=spec.name), spec.pass_score))

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.verifiers]

    def report(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The shortcut report of scored records, read and judged by the first verifier (eval/shortcuts.py): on
        answers that are words or classes, a constant answer can score."""
        from grpo_cli.eval.shortcuts import shortcut_report

        return shortcut_report(records, self.names[0])

    def score(self, completion: str, problem: Problem) -> dict[str, Any]:
        from grpo_cli.reward_guard import RewardFailure

        prompt = build_prompt(problem.question, self.data.system_prompt, self.data.chat)
        columns = {
            "prompts": [prompt],
            "completions": [[{"role": "assistant", "content": completion}]] if self.data.chat else [completion],
            "completion_ids": None,
            "answer": [problem.gold],
            "question": [problem.question],
        }
        try:
            scores = {name: func(**columns)[0] for name, func, _ in self.verifiers + self.formats}
        except RewardFailure as exc:
            raise UserError(f"problem {problem.index}: {exc}", path="rewards") from None
        passed = {
            name: scores[name] is not None and scores[name] >= threshold
            for name, _, threshold in self.verifiers + self.formats
        }
        return {
            "extracted": {name: scores[name] for name, _, _ in self.verifiers},
            "correct": {name: passed[name] for name, _, _ in self.verifiers},
            # None: the recipe has no format reward, so there is no format rate to report
            "formatted": all(passed[name] for name, _, _ in self.formats) if self.formats else None,
        }
