"""Sampled decoding for `grpo eval --samples N --temperature T`: temperature and top-p draws, each completion from a
torch generator of its own, seeded from the evaluation's seed, the problem's index and the sample's number.

A completion therefore depends on its seed and not on which rows shared its batch, on the batch size or on where an
interrupted evaluation resumed (up to float rounding between batch shapes, as for greedy completions). The
transformers engines draw here; vLLM draws with its own per-request seed (vllm_engine.py), so the engines give
different samples of the same distribution.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from grpo_cli.errors import UserError
from grpo_cli.recipe.eval_section import EvalSection


@dataclass(frozen=True)
class Sampling:
    samples: int  # completions per problem
    temperature: float
    top_p: float
    seed: int

    def settings(self) -> dict[str, float | int]:
        """What settings.json records: an evaluation continues only with the same sampling."""
        return {"samples": self.samples, "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}

    def seed_of(self, index: int, sample: int) -> int:
        """The seed of one completion: problem `index` (its place in the split), sample number `sample`."""
        digest = hashlib.sha256(f"{self.seed}:{index}:{sample}".encode()).digest()
        return int.from_bytes(digest[:8], "little") >> 1  # below 2**63: a seed torch and vLLM both take


def sampling_of(ev: EvalSection) -> Sampling | None:
    """The evaluation's sampling, or None for greedy decoding (no temperature: today's one completion per problem)."""
    if ev.temperature is None:
        return None
    return Sampling(ev.samples or 1, ev.temperature, 1.0 if ev.top_p is None else ev.top_p, ev.seed or 0)


# A problem's N completions are held together until all are scored, and written as one line of predictions.jsonl;
# every prompt and seed is built before the first batch. Far past any N the figures need (pass@k's estimator is
# unbiased at any N), and small enough that the largest split's prompts fit in memory.
MAX_SAMPLES = 1024


def check_sampling(ev: EvalSection, uses_tools: bool) -> None:
    """Refusals before anything loads or is written, each naming the flag and the fix."""
    if (ev.samples or 1) > MAX_SAMPLES:
        raise UserError(
            f"--samples {ev.samples} (eval.samples) is more than the {MAX_SAMPLES} completions per problem an "
            f"evaluation holds; give --samples {MAX_SAMPLES} or fewer"
        )
    if ev.temperature is None and (ev.samples or 1) > 1:
        raise UserError(
            f"--samples {ev.samples} needs --temperature above 0 (eval.temperature): greedy decoding would write "
            f"the same completion {ev.samples} times; add e.g. --temperature 1.0, or leave out --samples"
        )
    if ev.temperature is None and ev.top_p not in (None, 1.0):
        raise UserError(f"--top-p {ev.top_p} applies to sampling only: add --temperature, or leave out --top-p")
    if ev.temperature is not None and uses_tools:
        raise UserError(
            "--temperature/--samples: the tool loop evaluates greedily only; leave out --samples and --temperature "
            "for this recipe"
        )


def draw(logits, sampling: Sampling, generators: list):
    """One token per row of `logits` (rows, vocabulary), row k drawn with `generators[k]`."""
    import torch

    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        ranked, order = probs.sort(dim=-1, descending=True)
        above = ranked.cumsum(-1) - ranked  # the mass ranked above each token: the first one is always kept
        ranked = ranked.masked_fill(above >= sampling.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, ranked)
    return torch.cat([torch.multinomial(row, 1, generator=g) for row, g in zip(probs, generators)])


def generator_for(seed: int, device):
    import torch

    return torch.Generator(device=device).manual_seed(seed)


class RowSampler:
    """A logits processor for transformers' `generate` run greedily: it draws each row's token with that row's own
    generator and leaves only that token possible, so greedy search picks it."""

    def __init__(self, sampling: Sampling, seeds: list[int]):
        self.sampling, self.seeds = sampling, seeds
        self.generators: list | None = None

    def __call__(self, input_ids, scores):
        if self.generators is None:
            self.generators = [generator_for(seed, scores.device) for seed in self.seeds]
        tokens = draw(scores, self.sampling, self.generators)
        chosen = scores.new_full(scores.shape, float("-inf"))
        return chosen.scatter(1, tokens[:, None], 0.0)
