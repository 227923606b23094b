"""Reward statistics before training: sample groups from the model as it starts and score them with the recipe's
rewards.

GRPO learns only from groups whose rewards differ: a group where every completion scored the same has zero advantage
(TRL's `frac_reward_zero_std`). This measures that share, each reward's spread and failures, and truncation, on a
few prompts of the recipe's own data, with its own sampling settings. The completions are drawn as training samples
them (generation/policy_sampler.py), plainly or (with tools) through training's tool loop.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

from grpo_cli.generation.policy_sampler import PolicySampler, with_end
from grpo_cli.generation.tool_loop import tool_summary
from grpo_cli.recipe.schema import GRPOSection, Recipe
from grpo_cli.tools.wiring import prompt_tools, recipe_tools
from grpo_cli.train.zero_variance import ZERO_STD_TOLERANCE  # the one training skips by

# Completions per `generate` call when sampling on a CPU.
CPU_SAMPLE_COMPLETIONS = 64


@dataclass
class RewardStats:
    name: str
    weight: float
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    failed: int  # completions it raised on or returned None for
    error: str | None = None  # the first exception, as "Type: message"

    @property
    def constant(self) -> bool:
        return self.min is not None and self.min == self.max


@dataclass
class SampledGroups:
    prompts: int
    completions: int
    zero_variance_share: float
    truncated_share: float
    mean_completion_tokens: float
    # Mean over generation batches of the longest completion / the budget: generation runs until the longest ends.
    batch_length_share: float
    tokens_per_second: float
    rewards: list[RewardStats] = field(default_factory=list)
    dataset_rows: int = 0
    # Tokens of the data's longest prompt, measured as the plan measures them (plan/data_lengths.py).
    longest_prompt_tokens: int = 0
    tools: dict[str, float] | None = None  # with tools: calls, failures, malformed attempts and turns (tool_summary)


def _std(values: list[float]) -> float:
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def score(funcs: list, prompts: list, completions: list, completion_ids: list, columns: dict) -> tuple:
    """Each reward over the completions, behind training's guard; a reward that fails it (raises, returns the wrong
    count or something that is not a number) is retried one completion at a time, so one bad completion costs one
    value (None), not the batch. NaN and infinity count as None, as in training."""
    from grpo_cli.reward_guard import GuardedReward, RewardFailure

    values: list[list[float | None]] = []
    errors: list[str | None] = []
    for func in funcs:
        guarded, error = GuardedReward(func, warn=lambda line: None), None
        try:
            out = guarded(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns)
        except RewardFailure:  # the user's code: find which completions it fails on
            out = []
            for i in range(len(completions)):
                one = {k: [v[i]] for k, v in columns.items()}
                try:
                    out += guarded(
                        prompts=[prompts[i]], completions=[completions[i]], completion_ids=[completion_ids[i]], **one
                    )
                except RewardFailure as exc:
                    error = error or str(exc)[:300]
                    out.append(None)
        values.append(out)
        errors.append(error)
    return values, errors


def sample_groups(recipe: Recipe, prompt_count: int, show=lambda text, new_phase=False: None) -> SampledGroups:
    """Sample `num_generations` completions for each of `prompt_count` prompts of the recipe's data and score them."""
    import torch

    from grpo_cli import data, models
    from grpo_cli.model_rewards.build import reward_functions

    tokenizer = models.load_tokenizer(recipe.model)
    prepared = data.prepare(recipe.data, tokenizer, seed=recipe.training.seed, tools=prompt_tools(recipe.tools))
    prepared.check_enough(recipe.generation_batch_size, recipe.grpo.num_generations, recipe.total_steps)
    rows = prepared.dataset.shuffle(seed=recipe.training.seed).select(range(min(prompt_count, len(prepared.dataset))))
    model = models.load_model(recipe.model, recipe.quantization).eval()
    if torch.cuda.is_available() and model.device.type == "cpu":
        model = model.to("cuda")
    funcs = reward_functions(recipe.rewards, recipe.model)
    g, budget = recipe.grpo.num_generations, recipe.grpo.max_completion_length
    per_training_batch = max(1, recipe.generation_batch_per_process // g)  # prompts per generation batch in training
    # On a GPU sample exactly training's batches (no more memory than the run); on a CPU larger batches are faster.
    per_batch = (
        per_training_batch if torch.cuda.is_available() else max(per_training_batch, CPU_SAMPLE_COMPLETIONS // g)
    )
    sampler = PolicySampler(model, tokenizer, recipe.grpo, budget)
    torch.manual_seed(recipe.training.seed)
    tools = recipe_tools(recipe.tools, recipe.environment, recipe.model.name, tokenizer)
    loop = tool_loop(sampler, recipe.grpo, *tools)
    tally = _Tally(funcs, recipe.rewards, tokenizer.eos_token_id, budget, per_training_batch * g)
    columns_all = {k: rows[k] for k in rows.column_names if k != "prompt"}
    batches = -(-len(rows) // per_batch)
    for start in range(0, len(rows), per_batch):
        prompts = rows["prompt"][start : start + per_batch]
        show(
            f"sampling for the learning signal: batch {start // per_batch + 1}/{batches} "
            f"({len(prompts)} prompts x {g} completions, up to {budget} tokens)",
            new_phase=True,
        )
        started = time.perf_counter()
        ids, completions, figures = sample_batch(loop, sampler, prompts, columns_all, start, g)
        tally.seconds += time.perf_counter() - started
        columns = {k: [v for v in col[start : start + per_batch] for _ in range(g)] for k, col in columns_all.items()}
        tally.add(ids, completions, figures, [p for p in prompts for _ in range(g)], columns)
    return tally.summary(g, len(prepared.dataset), max(prepared.prompt_lengths, default=0))


class _Tally:
    """What the sampled batches add up to: each reward's values and first error, each completion's weighted total,
    lengths, truncation, and time spent generating."""

    def __init__(self, funcs: list, specs: list, eos_id: int, budget: int, training_batch: int):
        self.funcs, self.specs, self.eos_id, self.budget, self.training_batch = (
            funcs,
            specs,
            eos_id,
            budget,
            training_batch,
        )
        self.values: list[list[float | None]] = [[] for _ in funcs]
        self.errors: list[str | None] = [None for _ in funcs]
        self.totals: list[float] = []
        self.lengths: list[int] = []
        self.truncated = 0
        self.batch_shares: list[float] = []
        self.seconds = 0.0
        self.tool_records: list[dict] = []

    def add(self, ids: list, completions: list, figures: list, prompts: list, columns: dict) -> None:
        """One sampled batch: `ids` and `completions` per completion, `prompts` and `columns` repeated to match."""
        self.tool_records += figures
        batch_lengths = [len(seq) for seq in ids]
        self.lengths += batch_lengths
        self.truncated += sum(not seq or seq[-1] != self.eos_id for seq in ids)  # cut at the budget
        for chunk in range(0, len(batch_lengths), self.training_batch):  # training's batches within this one
            self.batch_shares.append(max(batch_lengths[chunk : chunk + self.training_batch]) / self.budget)
        values, errors = score(self.funcs, prompts, completions, ids, columns)
        for i, (v, e) in enumerate(zip(values, errors)):
            self.values[i] += v
            self.errors[i] = self.errors[i] or e
        for j in range(len(ids)):
            self.totals.append(
                sum(spec.weight * values[i][j] for i, spec in enumerate(self.specs) if values[i][j] is not None)
            )

    def summary(self, g: int, dataset_rows: int, longest_prompt: int) -> SampledGroups:
        groups = [self.totals[i : i + g] for i in range(0, len(self.totals), g)]
        flat = sum(_std(group) <= ZERO_STD_TOLERANCE for group in groups)
        stats = []
        for spec, values, error in zip(self.specs, self.values, self.errors):
            ok = [v for v in values if v is not None]
            stats.append(
                RewardStats(
                    spec.name,
                    spec.weight,
                    statistics.fmean(ok) if ok else None,
                    _std(ok) if ok else None,
                    min(ok) if ok else None,
                    max(ok) if ok else None,
                    len(values) - len(ok),
                    error,
                )
            )
        lengths = self.lengths
        return SampledGroups(
            prompts=len(groups),
            completions=len(self.totals),
            zero_variance_share=flat / max(1, len(groups)),
            truncated_share=self.truncated / max(1, len(lengths)),
            mean_completion_tokens=statistics.fmean(lengths) if lengths else 0.0,
            batch_length_share=statistics.fmean(self.batch_shares) if self.batch_shares else 1.0,
            tokens_per_second=sum(lengths) / self.seconds if self.seconds else 0.0,
            rewards=stats,
            dataset_rows=dataset_rows,
            longest_prompt_tokens=longest_prompt,
            tools=tool_summary(self.tool_records),
        )


def default_prompt_count(num_generations: int) -> int:
    """At least 8 groups and 64 completions: enough to tell 'most groups flat' from 'some'."""
    return max(8, math.ceil(64 / num_generations))


def sample_batch(loop, sampler: PolicySampler, prompts: list, columns: dict, start: int, g: int):
    """`g` sampled completions of each prompt: their token ids, the completions as rewards receive them, and (with
    tools, through the tool loop) each one's tool figures."""
    from grpo_cli.chat_templates import render_prompt

    if loop is not None:
        examples = [
            {"index": k, **{c: v[start + k // g] for c, v in columns.items()}, "prompt": prompts[k // g]}
            for k in range(len(prompts) * g)
        ]
        results = sorted((r for chunk in loop.run(examples, len(examples)) for r in chunk), key=lambda r: r.index)
        return (
            [r.completion_ids for r in results],
            [r.messages for r in results],
            [{"tools": r.extra["tools"]} for r in results],
        )
    # Each prompt g times in place: the draws `generate(num_return_sequences=g)` makes.
    texts = [render_prompt(sampler.tokenizer, p) for p in prompts for _ in range(g)]
    items = [item for batch in sampler.generate(texts, len(texts)) for item in batch]
    ids = [with_end(item, sampler.tokenizer.eos_token_id) for item in items]
    chat = isinstance(prompts[0], list)
    decoded = [item.text for item in items]
    return ids, [[{"role": "assistant", "content": t}] for t in decoded] if chat else decoded, []


def tool_loop(sampler: PolicySampler, grpo: GRPOSection, tools, environment):
    """With tools: training's tool loop on the sampler, with the recipe's guarded `tools` and `environment`
    (tools/wiring.recipe_tools); None without tools."""
    if tools is None and environment is None:
        return None
    from grpo_cli.generation.tool_loop import ToolLoop

    return ToolLoop(
        sampler, sampler.tokenizer, tools, environment, grpo.max_completion_length, grpo.max_tool_calling_iterations
    )
