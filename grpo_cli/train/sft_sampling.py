"""SFT examples from the model itself (rejection sampling): k completions per training prompt, sampled as GRPO
samples them; a completion is kept when the recipe's reward scores it right, with the asked answer marker added
where the model left it out, so the SFT stage teaches the format in the model's own words."""

from __future__ import annotations

from grpo_cli.errors import UserError
from grpo_cli.generation.policy_sampler import PolicySampler, with_end
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.sft_section import SELF
from grpo_cli.recipe.user_code import RewardSpec
from grpo_cli.train.frozen_weights import AUTOCAST_DTYPES
from grpo_cli.train.sft_examples import SftExamples, as_completion, with_marker
from rewards.answers import marked_answer

# Completions per `generate` call: one batch's KV cache stays small beside the model.
SAMPLE_BATCH = 32


def sampled_examples(recipe: Recipe, model, tokenizer, mixed: str, echo=print) -> SftExamples:
    """At most one kept completion per prompt (the first right one), for the first sft.count training prompts."""
    import torch

    from grpo_cli.data import select_rows

    section, data = recipe.sft, recipe.data
    rows, _ = select_rows(data, recipe.training.seed)
    rows = rows[: section.count] if section.count else rows
    questions = [row[data.prompt_column] for row in rows]  # text, or a conversation's turns
    golds = [_gold(row[data.answer_column], data) for row in rows]
    reward = _reward(recipe.rewards, section.reward, recipe.model)
    k = section.samples_per_prompt
    per_call = max(1, SAMPLE_BATCH // k)
    kept, marked = [], 0
    sampler = PolicySampler(
        model, tokenizer, recipe.grpo, recipe.grpo.max_completion_length, AUTOCAST_DTYPES.get(mixed)
    )
    torch.manual_seed(recipe.training.seed)
    was_training = model.training
    model.eval()
    for start in range(0, len(questions), per_call):
        chunk = list(range(start, min(start + per_call, len(questions))))
        echo(f"sft: sampling prompts {start + 1}-{chunk[-1] + 1} of {len(questions)} ({k} completions each)")
        prompts = [_prompt(questions[i], data) for i in chunk]
        ids, texts = _generate(sampler, prompts, k)
        columns = {"answer": [golds[i] for i in chunk], "question": [questions[i] for i in chunk]}
        scores = _score(reward, prompts, texts, ids, columns, k, data.chat)
        for n, prompt in enumerate(prompts):
            right = [texts[n * k + j] for j in range(k) if _kept(scores[n * k + j], section.min_reward)]
            if not right:
                continue
            text = right[0]
            if marked_answer(text, data.answer_marker) is None:
                text, marked = with_marker(text, golds[chunk[n]], data), marked + 1
            kept.append({"prompt": prompt, "completion": as_completion(text, data.chat)})
    model.train(was_training)
    source = {
        "source": SELF,
        "prompts": len(questions),
        "per_prompt": k,
        "samples": len(questions) * k,
        "kept": len(kept),
        "marked": marked,
        "reward": section.reward,
        "min_reward": section.min_reward,
    }
    if not kept:
        raise UserError(
            f"none of {len(questions) * k} completions sampled for {len(questions)} prompts scored "
            f"{section.reward} >= {section.min_reward:g}: the model cannot teach itself here; use "
            "sft.source: reference or a file of examples, or raise sft.samples_per_prompt",
            path="sft.source",
        )
    return SftExamples(kept, source)


def _gold(raw, data) -> str:
    from grpo_cli.data import gold_answer

    return gold_answer(raw, data.answer_format)


def _prompt(question: str, data):
    from grpo_cli.data import build_prompt

    return build_prompt(question, data.system_prompt, data.chat)


def _reward(rewards: list[RewardSpec], name: str, model: ModelSection):
    """The reward named `name` (sft.reward) of `rewards`, behind the same guard as in training (time limit, bad
    return values); `model`: the policy's section, which a judge may be."""
    from grpo_cli.model_rewards.build import reward_functions
    from grpo_cli.reward_guard import GuardedReward

    index = next(i for i, s in enumerate(rewards) if s.name == name)
    spec = rewards[index]
    return GuardedReward(reward_functions(rewards, model)[index], spec.timeout_s, label=spec.name)


def _generate(sampler: PolicySampler, prompts: list, k: int):
    """`k` sampled completions of each prompt, each prompt's together: token ids (up to the end of sequence) and
    text."""
    from grpo_cli.chat_templates import render_prompt

    texts = [render_prompt(sampler.tokenizer, p) for p in prompts for _ in range(k)]
    items = [item for batch in sampler.generate(texts, len(texts)) for item in batch]
    return [with_end(item, sampler.tokenizer.eos_token_id) for item in items], [item.text for item in items]


def _score(reward, prompts: list, texts: list, ids: list, columns: dict, k: int, chat: bool) -> list:
    """The reward's score of every completion, with the dataset columns GRPO would pass it (answer, question)."""
    from grpo_cli.reward_guard import RewardFailure

    try:
        return reward(
            prompts=[p for p in prompts for _ in range(k)],
            completions=[as_completion(t, chat) for t in texts],
            completion_ids=ids,
            **{name: [v for v in values for _ in range(k)] for name, values in columns.items()},
        )
    except RewardFailure as failure:
        raise UserError(f"{failure} (while sampling the SFT stage's examples)", path="sft.reward") from None


def _kept(score, threshold: float) -> bool:
    return score is not None and score >= threshold
