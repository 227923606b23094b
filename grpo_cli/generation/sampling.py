"""Seeded sampling: temperature and top-p draws, each completion from a torch generator of its own, seeded from the
evaluation's seed, the problem's index and the sample's number.

A completion therefore depends on its seed and not on which rows shared its batch, on the batch size or on where an
interrupted evaluation resumed (up to float rounding between batch shapes, as for greedy completions). The
transformers engines draw here; vLLM draws with its own per-request seed (vllm_engine.py), so the engines give
different samples of the same distribution.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


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


def draw(logits, sampling: Sampling, generators: list):
    """One token per row of `logits` (rows, vocabulary), row k drawn with `generators[k]`."""
    import torch

    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        ranked, order = probs.sort(dim=-1, descending=True)
        above = ranked.cumsum(-1) - ranked  # the mass ranked above each token: the first one is always kept
        ranked = ranked.masked_fill(above >= sampling.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, ranked)
    from grpo_cli.generation.torch_draws import one_row

    return torch.cat([one_row(row, g) for row, g in zip(probs, generators)])  # torch.multinomial's own draws


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
