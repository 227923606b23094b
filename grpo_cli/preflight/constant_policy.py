"""Constant policies before training: what giving one of the most common reference answers to every training prompt
would earn under the recipe's verifier rewards, against what the base model earns.

When a constant answer earns more than the model as it starts, GRPO can raise the reward by converging on that
answer instead of learning the task: on yes/no questions, answering `no` to everything scores the share of `no`
references. The constant completion is scored by the recipe's own reward functions, called as training calls them
(the chat form when the data is chat, behind the same guard), so a user's verifier is judged as it will judge.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from statistics import fmean

from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.user_code import RewardSpec

CONSTANT_ANSWERS = 3  # the most common reference answers tried
CONSTANT_ROWS = 512  # training rows each constant is scored on: enough for two decimals, cheap for a user's reward


@dataclass
class ConstantPolicy:
    answer: str  # the reference answer as the data writes it
    completion: str  # the constant completion that earned `reward` (the bare answer, or the answer marked)
    share: float  # of the scored rows whose reference answer it is, read as the first verifier reads answers
    reward: float | None  # mean weighted verifier reward over the rows (None: every verifier failed on it)


@dataclass
class ConstantPolicies:
    rows: int  # training rows scored
    base_reward: float | None  # the base model's mean weighted verifier reward on the sampled completions
    policies: list[ConstantPolicy] = field(default_factory=list)

    @property
    def best(self) -> ConstantPolicy | None:
        scored = [p for p in self.policies if p.reward is not None]
        return max(scored, key=lambda p: p.reward) if scored else None

    @property
    def warning(self) -> str | None:
        """One line when a constant answer earns more than the base model, as the line prints them (two decimals: a
        constant that scores one row in 500 beside a base model that scores none is no shortcut); None otherwise."""
        best = self.best
        if best is None or self.base_reward is None or round(best.reward, 2) <= round(self.base_reward, 2):
            return None
        marked = "" if best.completion == best.answer else f" (as `{best.completion.replace(chr(10), '')}`)"
        return (
            f"answering `{best.answer}`{marked} to everything earns {best.reward:.2f}; the base model earns "
            f"{self.base_reward:.2f} (mean verifier reward): GRPO can climb by giving one answer; a `validation:` "
            "section flags it while training, `grpo eval run RUN --protocol task` after"
        )


def verifier_reward(rewards: list[RewardSpec], means: list[float | None]) -> float | None:
    """The weighted sum of the verifier rewards' means (`means` per reward, in the recipe's order); None when a
    verifier has no mean (it failed on everything)."""
    from grpo_cli.eval.task import role_of

    chosen = [(spec.weight, mean) for spec, mean in zip(rewards, means) if role_of(spec) == "verifier"]
    if not chosen or any(mean is None for _, mean in chosen):
        return None
    return sum(weight * mean for weight, mean in chosen)


def constant_completions(answer: str, marker: str) -> list[str]:
    """The constant completions tried for one answer: bare, and marked as the recipe's data asks (`<answer>` or
    `####`); the better of them counts."""
    marked = f"#### {answer}" if marker == "hashes" else f"<answer>\n{answer}\n</answer>"
    return [answer, marked]


def constant_policies(
    data: DataSection,
    rewards: list[RewardSpec],
    funcs: list,
    seed: int,
    base_reward: float | None,
    rows: int = CONSTANT_ROWS,
) -> ConstantPolicies | None:
    """Score the CONSTANT_ANSWERS most common reference answers of the training data (`data`, shuffled with the
    training seed) as constant completions with the verifiers among `rewards` (`funcs`: their callables, as
    model_rewards/build.reward_functions gives them); None without reference answers or without a verifier reward."""
    from grpo_cli.audit.run import training_examples
    from grpo_cli.eval.shortcuts import read_reference, reading_of
    from grpo_cli.eval.task import role_of
    from grpo_cli.preflight.sampling import score

    verifiers = [spec for spec in rewards if role_of(spec) == "verifier"]
    if not data.answer_column or not verifiers:
        return None
    examples, _ = training_examples(data, seed, rows)
    if not examples:
        return None
    reading = reading_of(verifiers[0].name)
    keys = [read_reference(e["answer"], reading) for e in examples]
    written = {}  # each key's first form as the data writes it
    for key, example in zip(keys, examples):
        written.setdefault(key, example["answer"])
    counts = Counter(key for key in keys if key is not None)
    chosen = [(i, f) for i, (spec, f) in enumerate(zip(rewards, funcs)) if role_of(spec) == "verifier"]
    n = len(examples)
    prompts = [e["prompt"] for e in examples]
    columns = {k: [e[k] for e in examples] for k in examples[0] if k != "prompt"}
    result = ConstantPolicies(n, base_reward)
    for key, count in counts.most_common(CONSTANT_ANSWERS):
        answer, best = written[key], None
        for text in constant_completions(answer, data.answer_marker):
            completions = [[{"role": "assistant", "content": text}] if data.chat else text for _ in range(n)]
            values, _ = score([f for _, f in chosen], prompts, completions, [[] for _ in range(n)], columns)
            means: list[float | None] = [None] * len(rewards)
            for (i, _), scored in zip(chosen, values):
                ok = [v for v in scored if v is not None]
                means[i] = fmean(ok) if ok else None
            reward = verifier_reward(rewards, means)
            if reward is not None and (best is None or reward > best.reward):
                best = ConstantPolicy(answer, text, count / n, reward)
        result.policies.append(best or ConstantPolicy(answer, answer, count / n, None))
    return result
