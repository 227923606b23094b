"""One evaluation, built once from the eval, data and rewards sections: its problems (and how many rows could not be
scored), the stops and token budget, the prompts each protocol shows a tokenizer, the verdict on one completion and
the summary of scored records. `grpo eval`, validation while training, the checkpoint curve and preflight's timing of
validation all read a suite; none builds problems, prompts or verdicts of its own. A suite generates nothing and is
never changed: `first(n)` and `window(...)` return new ones."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from grpo_cli.eval.problems import Problem, chat_prompts, fewshot_pool, lm_eval_prompts, load_problems
from grpo_cli.eval.sampled import summarize_sampled
from grpo_cli.eval.scoring import FILTERS, score, summarize
from grpo_cli.eval.task import TaskScorer, task_problems
from grpo_cli.generation.sampling import Sampling
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.eval_section import EvalSection
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.user_code import RewardSpec

LM_EVAL_STOPS = ("Question:", "</s>", "<|im_end|>")  # gsm8k.yaml `until`; the tokenizer's EOS is added
DEFAULT_MAX_NEW_TOKENS = {"chat": 512, "lm-eval": 256, "task": 512}


def max_new_tokens(ev: EvalSection) -> int:
    return ev.max_new_tokens or DEFAULT_MAX_NEW_TOKENS[ev.protocol]


@dataclass(frozen=True)
class EvalSuite:
    """`problems` in the split's order; `unscorable`: rows of the split left out; `scorer`: the task protocol's
    verifiers and format rewards (None: GSM8K's filters); `pool`: lm-eval's few-shot examples."""

    ev: EvalSection
    data: DataSection
    problems: tuple[Problem, ...]
    unscorable: int = 0
    scorer: TaskScorer | None = None
    pool: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    @property
    def budget(self) -> int:
        return max_new_tokens(self.ev)

    @property
    def stops(self) -> list[str]:
        return list(LM_EVAL_STOPS) if self.ev.protocol == "lm-eval" else []

    @property
    def names(self) -> list[str]:
        """The figures of merit: the task's verifiers, else GSM8K's filters."""
        return self.scorer.names if self.scorer else list(FILTERS)

    def prompts(self, tokenizer, problems: list[Problem] | tuple[Problem, ...] | None = None) -> list[str]:
        """What the protocol shows the model for each problem (all of the suite's by default): lm-eval's few-shot
        context, drawn as its sampler draws from the pool, else the training prompt through `tokenizer`'s template."""
        problems = self.problems if problems is None else problems
        if self.ev.protocol == "lm-eval":
            return lm_eval_prompts(list(problems), list(self.pool), self.ev.num_fewshot, self.ev.fewshot_seed)
        return chat_prompts(list(problems), self.data, tokenizer)

    def verdict(self, problem: Problem, completion: str) -> dict[str, Any]:
        """The extracted answers, whether each is right and whether the format was followed: by the task's scorer,
        else by the protocol's filters reading the answer marked as data.answer_marker says."""
        if self.scorer:
            return self.scorer.score(completion, problem)
        return score(self.ev.protocol, completion, problem, self.data.answer_marker)

    def report(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The task's answers, majority baseline and shortcut flag (eval/shortcuts.py); nothing for GSM8K."""
        return self.scorer.report(records) if self.scorer else {}

    def summary(
        self,
        records: list[dict[str, Any]],
        wall_s: float,
        new_problems: int,
        new_tokens: int,
        sampling: Sampling | None = None,
        budget: int | None = None,
    ) -> dict[str, Any]:
        """Accuracy with intervals (sampled: mean@N, pass@N, maj@N), format, lengths and (task) the shortcut report
        of `records`; the session's throughput from the `new_problems` generated in `wall_s` seconds."""
        budget = budget or self.budget
        if sampling is not None:
            base = summarize_sampled(
                records, sampling, self.ev.protocol, self.names, wall_s, new_problems, new_tokens, budget
            )
        else:
            base = summarize(records, wall_s, new_problems, new_tokens, budget, self.names)
        return base | self.report(records)

    def first(self, n: int) -> EvalSuite:
        return self.window(0, n)

    def window(self, offset: int, size: int) -> EvalSuite:
        """Problems offset .. offset + size - 1 of this suite, as a new suite."""
        return replace(self, problems=self.problems[offset : offset + size])


def build_suite(
    ev: EvalSection,
    data: DataSection,
    rewards: list[RewardSpec],
    model: ModelSection,
    seed: int,
    note=None,
    check_references: bool = True,
) -> EvalSuite:
    """The suite `ev` describes; every refusal (data, rewards, few-shot source) comes here, before any file is
    written or weight loaded. Under the task protocol `model` is the policy a judge may be, `seed` training's (the
    overlap with training prompts is `note`d), and the verifiers are first run on the reference answers unless
    `check_references` is off."""
    scorer = None
    if ev.protocol == "task":
        problems, unscorable, scorer = task_problems(ev, data, rewards, model, seed, note, check_references)
    else:
        problems, unscorable = load_problems(ev)
    pool = fewshot_pool(ev) if ev.protocol == "lm-eval" and ev.num_fewshot else []
    return EvalSuite(ev, data, tuple(problems), unscorable, scorer, tuple(pool))
