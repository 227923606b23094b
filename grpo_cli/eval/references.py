"""The recipe's verifiers on its own reference answers, before training and before a task evaluation.

Each of the first rows' reference answers is written as a model would answer it in the asked format (bare, and
marked as the data section asks) and scored by each verifier reward as training calls it. A verifier that passes
none of them cannot tell a right answer from a wrong one: a number check on word answers, a reference in a form the
verifier does not read (data.answer_format), a user's check that reads another column. Every reward it gives would
be noise, so the run is refused in one line before any model loads.
"""

from __future__ import annotations

from typing import Any

from grpo_cli.audit.probes import answer_forms
from grpo_cli.errors import UserError
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.user_code import RewardSpec

REFERENCE_ROWS = 64  # references checked: one pass among them is enough, and a slow user verifier stays cheap


def training_references(data: DataSection, seed: int) -> list[dict[str, Any]]:
    """The first REFERENCE_ROWS training examples (prompt, question, answer), as training prepares them with the
    training `seed`."""
    from grpo_cli.audit.run import training_examples

    return training_examples(data, seed, REFERENCE_ROWS)[0]


def problem_references(data: DataSection, problems: list) -> list[dict[str, Any]]:
    """The first REFERENCE_ROWS problems of a task evaluation as examples, prompted as evaluation prompts them."""
    from grpo_cli.data import build_prompt

    return [
        {"prompt": build_prompt(p.question, data.system_prompt, data.chat), "question": p.question, "answer": p.gold}
        for p in problems[:REFERENCE_ROWS]
    ]


def check_references(
    data: DataSection, rewards: list[RewardSpec], verifiers: list[int], examples: list[dict[str, Any]], source: str
) -> None:
    """Refuse in one line when one of the `verifiers` (indices into `rewards`) passes none of the `examples`'
    reference answers (the first REFERENCE_ROWS), each written in every form of `answer_forms`. Reward models and
    judges are left out: they load with the policy."""
    from rewards import resolve_reward

    examples = [e for e in examples[:REFERENCE_ROWS] if e.get("answer")]
    if not data.answer_column or not examples:
        return
    for index in verifiers:
        spec = rewards[index]
        if getattr(spec, "model", None) is not None or getattr(spec, "judge", None) is not None:
            continue
        error = _first_error(resolve_reward(spec.name, spec.kwargs), spec, examples, data)
        if error is None:
            continue
        first = " or ".join(f"`{form}`" for form in answer_forms(examples[0]["answer"], data)).replace("\n", " ")
        raise UserError(
            f"`{spec.name}` passes none of the first {len(examples)} reference answers of {source} written as "
            f"answers (the first as {first}{error}): it cannot tell a right answer from a wrong one; use a verifier "
            "that reads answers like these (normalized_match or exact_match for words, correctness for numbers) or "
            "check data.answer_column and data.answer_format",
            path=f"rewards[{index}]",
        )


def _first_error(func, spec, examples: list[dict[str, Any]], data) -> str | None:
    """None when some reference passes `spec` in some form; else what to add to the refusal (a failure's words)."""
    from grpo_cli.reward_guard import GuardedReward, RewardFailure

    guarded = GuardedReward(func, spec.timeout_s, warn=lambda line: None, label=spec.name)
    columns = {key: [e[key] for e in examples] for key in examples[0] if key != "prompt"}
    failure = ""
    for form in range(len(answer_forms("", data))):
        texts = [answer_forms(e["answer"], data)[form] for e in examples]
        completions = [[{"role": "assistant", "content": t}] if data.chat else t for t in texts]
        try:
            prompts, ids = [e["prompt"] for e in examples], [[] for _ in examples]
            scores = guarded(prompts=prompts, completions=completions, completion_ids=ids, **columns)
        except RewardFailure as exc:  # a check that fails on a reference fails on a right answer: noted, not raised
            failure = failure or f"; {exc}"
            continue
        if any(score is not None and score >= spec.pass_score for score in scores):
            return None
    return failure
