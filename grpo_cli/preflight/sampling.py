"""Reward statistics before training: sample groups from the model as it starts and score them with the recipe's rewards.

GRPO learns only from groups whose rewards differ: a group where every completion scored the same has zero advantage
(TRL's `frac_reward_zero_std`). This measures that share, each reward's spread and failures, and truncation, on a
few prompts of the recipe's own data, with its own sampling settings.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

from grpo_cli.recipe.schema import Recipe
from grpo_cli.tools.loop import tool_summary
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
    tools: dict[str, float] | None = None  # with tools: calls, failures, malformed attempts and turns (tool_summary)


def _std(values: list[float]) -> float:
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def score(funcs: list, prompts: list, completions: list, completion_ids: list, columns: dict) -> tuple:
    """Each reward over the completions, behind training's guard; a reward that fails it (raises, returns the wrong
    count or something that is not a number) is retried one completion at a time, so one bad completion costs one
    value (None), not the batch. NaN and infinity count as None, as in training."""
    from grpo_cli.train.reward_guard import GuardedReward, RewardFailure

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
                    out += guarded(prompts=[prompts[i]], completions=[completions[i]], completion_ids=[completion_ids[i]],
                                   **one)
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
    from rewards import resolve_rewards

    tokenizer = models.load_tokenizer(recipe)
    prepared = data.prepare(recipe.data, tokenizer, seed=recipe.training.seed, tools=_tools_for_lengths(recipe))
    prepared.check_enough(recipe)
    rows = prepared.dataset.shuffle(seed=recipe.training.seed).select(range(min(prompt_count, len(prepared.dataset))))
    model = models.load_model(recipe).eval()
    if torch.cuda.is_available() and model.device.type == "cpu":
        model = model.to("cuda")
    funcs = resolve_rewards(recipe.rewards)
    g, budget = recipe.grpo.num_generations, recipe.grpo.max_completion_length
    per_training_batch = max(1, recipe.generation_batch_per_process // g)  # prompts per generation batch in training
    # On a GPU sample exactly training's batches (no more memory than the run); on a CPU larger batches are faster.
    per_batch = per_training_batch if torch.cuda.is_available() else max(per_training_batch, CPU_SAMPLE_COMPLETIONS // g)
    sample = dict(do_sample=True, temperature=recipe.grpo.temperature, top_p=recipe.grpo.top_p,
                  top_k=recipe.grpo.top_k, max_new_tokens=budget, num_return_sequences=g,
                  pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(recipe.training.seed)
    loop, tool_records = _tool_loop(recipe, model, tokenizer, sample), []

    all_values: list[list[float | None]] = [[] for _ in funcs]
    all_errors: list[str | None] = [None for _ in funcs]
    totals: list[float] = []
    lengths: list[int] = []
    truncated = 0
    batch_shares: list[float] = []
    seconds = 0.0
    columns_all = {k: rows[k] for k in rows.column_names if k != "prompt"}
    batches = -(-len(rows) // per_batch)
    for start in range(0, len(rows), per_batch):
        prompts = rows["prompt"][start:start + per_batch]
        show(f"sampling for the learning signal: batch {start // per_batch + 1}/{batches} "
             f"({len(prompts)} prompts x {g} completions, up to {budget} tokens)", new_phase=True)
        started = time.perf_counter()
        ids, completions, figures = _sample_batch(loop, model, tokenizer, prompts, columns_all, start, g, sample)
        seconds += time.perf_counter() - started
        tool_records += figures
        batch_lengths = [len(seq) for seq in ids]
        lengths += batch_lengths
        truncated += sum(not seq or seq[-1] != tokenizer.eos_token_id for seq in ids)  # cut at the budget
        for chunk in range(0, len(batch_lengths), per_training_batch * g):  # training's batches within this one
            batch_shares.append(max(batch_lengths[chunk:chunk + per_training_batch * g]) / budget)
        repeated_prompts = [p for p in prompts for _ in range(g)]
        columns = {k: [v for v in col[start:start + per_batch] for _ in range(g)] for k, col in columns_all.items()}
        values, errors = score(funcs, repeated_prompts, completions, ids, columns)
        for i, (v, e) in enumerate(zip(values, errors)):
            all_values[i] += v
            all_errors[i] = all_errors[i] or e
        for j in range(len(ids)):
            totals.append(sum(spec.weight * values[i][j] for i, spec in enumerate(recipe.rewards)
                              if values[i][j] is not None))

    groups = [totals[i:i + g] for i in range(0, len(totals), g)]
    flat = sum(_std(group) <= ZERO_STD_TOLERANCE for group in groups)
    stats = []
    for spec, values, error in zip(recipe.rewards, all_values, all_errors):
        ok = [v for v in values if v is not None]
        stats.append(RewardStats(
            spec.name, spec.weight, statistics.fmean(ok) if ok else None, _std(ok) if ok else None,
            min(ok) if ok else None, max(ok) if ok else None, len(values) - len(ok), error))
    return SampledGroups(
        prompts=len(groups), completions=len(totals), zero_variance_share=flat / max(1, len(groups)),
        truncated_share=truncated / max(1, len(lengths)), mean_completion_tokens=statistics.fmean(lengths) if lengths else 0.0,
        batch_length_share=statistics.fmean(batch_shares) if batch_shares else 1.0,
        tokens_per_second=sum(lengths) / seconds if seconds else 0.0, rewards=stats, dataset_rows=len(prepared.dataset),
        tools=tool_summary(tool_records),
    )


def _sample_batch(loop, model, tokenizer, prompts: list, columns: dict, start: int, g: int, sample: dict):
    """`g` sampled completions of each prompt: their token ids, the completions as rewards receive them, and (with
    tools, through the tool loop) each one's tool figures."""
    import torch

    from grpo_cli import data

    if loop is not None:
        examples = [{"index": k, **{c: v[start + k // g] for c, v in columns.items()}, "prompt": prompts[k // g]}
                    for k in range(len(prompts) * g)]
        results = sorted((r for chunk in loop.run(examples, len(examples)) for r in chunk), key=lambda r: r.index)
        return [r.completion_ids for r in results], [r.messages for r in results], \
            [{"tools": r.extra["tools"]} for r in results]
    texts = [data.render_prompt(tokenizer, p) for p in prompts]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    with torch.no_grad():
        out = model.generate(**inputs, **sample)
    ids = [_until_eos(seq, tokenizer) for seq in out[:, inputs["input_ids"].shape[1]:].tolist()]
    decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
    chat = isinstance(prompts[0], list)
    return ids, [[{"role": "assistant", "content": t}] for t in decoded] if chat else decoded, []


def _tools_for_lengths(recipe: Recipe) -> list | None:
    """The tools the template renders into every prompt, so prompt lengths are measured as training measures them."""
    from grpo_cli.tools.registry import guarded_tools

    return guarded_tools(recipe.tools) if recipe.tools else None


def _tool_loop(recipe: Recipe, model, tokenizer, sample: dict):
    """With tools: training's tool loop on a sampler with the recipe's settings (None without tools)."""
    if not recipe.tools and recipe.environment is None:
        return None
    from grpo_cli.tools.loop import ToolLoop
    from grpo_cli.tools.registry import guarded_environment, guarded_tools
    from grpo_cli.tools.template import check_tool_template

    check_tool_template(tokenizer, recipe.model.name)
    environment = guarded_environment(recipe.environment) if recipe.environment is not None else None
    settings = {k: v for k, v in sample.items() if k not in ("max_new_tokens", "num_return_sequences")}
    return ToolLoop(Sampler(model, tokenizer, settings), tokenizer, guarded_tools(recipe.tools), environment,
                    recipe.grpo.max_completion_length, recipe.grpo.max_tool_calling_iterations)


class Sampler:
    """The tool loop's engine for preflight: sampled (not greedy) continuations of token-id contexts, one per row."""

    def __init__(self, model, tokenizer, settings: dict):
        self.model, self.tokenizer, self.settings = model, tokenizer, settings

    def generate(self, contexts: list[list[int]], batch_size: int, budgets: list[int]):
        import torch

        from grpo_cli.eval.generation import Generated

        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        for start in range(0, len(contexts), batch_size):
            rows = contexts[start:start + batch_size]
            width = max(len(r) for r in rows)
            ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.model.device)
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self.model.device)
            with torch.no_grad():
                out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max(budgets[start:start + len(rows)]),
                                          **self.settings)
            items = []
            for k, seq in enumerate(out[:, width:].tolist()):
                seq = _until_eos(seq, self.tokenizer)[: budgets[start + k]]
                stopped = bool(seq) and seq[-1] == eos
                items.append(Generated(start + k, "", len(seq), seq[:-1] if stopped else seq, stopped))
            yield items


def _until_eos(seq: list[int], tokenizer) -> list[int]:
    """The completion's tokens up to and including its end-of-sequence token (padding after it dropped)."""
    eos = tokenizer.eos_token_id
    return seq[: seq.index(eos) + 1] if eos in seq else seq


def default_prompt_count(recipe: Recipe) -> int:
    """At least 8 groups and 64 completions: enough to tell 'most groups flat' from 'some'."""
    return max(8, math.ceil(64 / recipe.grpo.num_generations))
