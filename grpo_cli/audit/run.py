"""The reward audit: what the recipe's rewards pay known-good and known-bad replies and trivial strategies, on the
training data's own prompts and reference answers, before any weight loads. `grpo audit` prints it, `grpo
preflight` opens with it and `grpo train` says one line when it finds something. Needs the data, rewards and model
sections (the model only for its tokenizer, when one is cached, and for `--models`); no torch unless a reward
model or judge is audited."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpo_cli.audit.findings import Finding, ProbeRow, findings, good_totals, probe_rows
from grpo_cli.audit.probes import build_probes
from grpo_cli.audit.scoring import AuditedReward, score_probes
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.user_code import RewardSpec

AUDIT_ROWS = 200  # training prompts probed: a share of prompts to the percent, cheap for a user's slow reward
MODEL_ROWS = 32  # with reward models or judges scored: each probe is a forward pass per batch on their weights
TRAIN_ROWS = 64  # at the start of `grpo train`: enough to see a finding, a fraction of a second on the built-ins


@dataclass
class Audit:
    prompts: int  # training examples probed
    rewards: list[AuditedReward]
    rows: list[ProbeRow] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    good_mean: float = 0.0  # what a right answer earns on average (the weighted total)
    tokens: str = "words"  # how completion lengths were counted: the model's tokenizer, or whitespace words

    @property
    def not_audited(self) -> list[str]:
        return [r.label for r in self.rewards if not r.audited]

    def best_rule(self) -> ProbeRow | None:
        rules = [r for r in self.rows if r.scored.probe.category == "rule" and r.prompts]
        return max(rules, key=lambda r: r.right_share or 0.0) if rules else None

    def summary_line(self) -> str | None:
        """One line for `grpo train` and preflight when something was found; None otherwise."""
        if not self.findings:
            return None
        named = [
            f"{f.kind.replace('_', ' ')}"
            + (f" ({', '.join(f.probes[:3])}{', ...' if len(f.probes) > 3 else ''})" if f.probes else "")
            for f in self.findings
        ]
        return f"reward audit: {len(named)} finding(s): {'; '.join(named)}"


def audit_rewards(
    data: DataSection,
    rewards: list[RewardSpec],
    model: ModelSection,
    seed: int,
    budget: int,
    with_models: bool = False,
    rows: int = AUDIT_ROWS,
) -> Audit:
    """Probe the rewards on the first `rows` training examples (shuffled with the training `seed`), each reply cut to
    the completion `budget` in tokens (grpo.max_completion_length) as training cuts it. Reward models and judges are
    scored only `with_models` (they load weights); otherwise they are listed as not audited."""
    examples, solutions = training_examples(data, seed, rows)
    audited = audited_rewards(rewards, model, with_models)
    encode, tokens = encoder(model, budget)
    if not examples:
        return Audit(0, audited, tokens=tokens)
    scored = score_probes(build_probes(examples, solutions, data), examples, audited, data.chat, encode)
    good = good_totals(scored)
    table = probe_rows(scored, good)
    return Audit(len(examples), audited, table, findings(table, audited, good), sum(good) / len(good), tokens)


def training_examples(data: DataSection, seed: int, rows: int) -> tuple[list[dict[str, Any]], list[str | None]]:
    """The first `rows` training examples as training prepares them (prompt, question, answer), and each one's
    worked reference solution where the data writes one (GSM8K's answer column)."""
    from grpo_cli.data import select_rows, to_example

    if not data.answer_column:
        return [], []
    raw, _ = select_rows(data, seed=seed)
    raw = raw[:rows]
    examples = [to_example(row, data) for row in raw]
    solutions = [str(row.get(data.answer_column)) if data.answer_format == "gsm8k" else None for row in raw]
    return examples, solutions


def audited_rewards(rewards: list[RewardSpec], model: ModelSection, with_models: bool) -> list[AuditedReward]:
    """Each reward of the recipe as the audit calls it; a reward model or judge without `with_models` is kept with
    no function, so the table still shows it."""
    from rewards import resolve_reward

    out = []
    for spec in rewards:
        is_model = spec.model is not None or spec.judge is not None
        if is_model and not with_models:
            func = None
        elif is_model:
            from grpo_cli.model_rewards.build import reward_functions

            func = reward_functions([spec], model)[0]
        else:
            func = resolve_reward(spec.name, spec.kwargs)
        out.append(AuditedReward(spec.name, spec.weight, func, spec.timeout_s, is_model=is_model))
    return out


def encoder(model: ModelSection, budget: int):
    """Replies as training hands them to the rewards: at most `budget` tokens, with their token ids. The model's
    tokenizer when it loads without torch (plan/light_tokenizer.py), else whitespace words stand in for tokens."""
    from grpo_cli.plan.light_tokenizer import light_tokenizer

    tokenizer = light_tokenizer(model)
    if tokenizer is None:

        def by_words(texts: list[str]) -> tuple[list[str], list[list[int]]]:
            words = [t.split() for t in texts]
            cut = [t if len(w) <= budget else " ".join(w[:budget]) for t, w in zip(texts, words)]
            return cut, [list(range(min(len(w), budget))) for w in words]

        return by_words, "words"

    def by_tokens(texts: list[str]) -> tuple[list[str], list[list[int]]]:
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        cut = [t if len(i) <= budget else tokenizer.decode(i[:budget]) for t, i in zip(texts, ids)]
        return cut, [i[:budget] for i in ids]

    return by_tokens, "tokens"


def start_lines(data: DataSection, rewards: list[RewardSpec], model: ModelSection, seed: int, budget: int) -> list[str]:
    """`grpo train`'s line when the audit (on TRAIN_ROWS prompts, the models left out) finds something."""
    if not rewards or not data.answer_column:
        return []
    line = audit_rewards(data, rewards, model, seed, budget, rows=TRAIN_ROWS).summary_line()
    return [f"{line} (`grpo audit` on this recipe prints the table)"] if line else []
