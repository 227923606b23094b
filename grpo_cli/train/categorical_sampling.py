"""A sampled token by its cumulative probability: one uniform draw per row instead of one per vocabulary entry.

For one sample per row `torch.multinomial` draws an exponential for every vocabulary entry and takes argmax(p / q). On
a CPU that costs about 16 ns an entry: with Qwen2.5's 151,936 entries and 16 rows, 38 ms at every decode step, a
quarter of the 0.5B model's sampling time in a training step (benchmarks/train_overhead.txt). Inverting the
cumulative distribution draws one uniform per row and finds where it falls: the same categorical distribution,
summed in float64 so the tail keeps its mass, from another stream of random numbers.

Used while sampling under mixed precision on a CPU (merged_generation.py): there the completions differ from plain
TRL's anyway (bf16 products), while a float32 run keeps torch's own draws and samples exactly what plain TRL samples
at the same seed, which benchmarks/train_overhead.py checks.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from grpo_cli.libraries import seams


@contextmanager
def one_draw_per_row():
    """Within: `torch.multinomial`, as transformers' sampling loop calls it (one sample from each row of weights),
    draws by the inverse cumulative distribution; every other call goes to torch's own."""
    original = torch.multinomial

    def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
        if num_samples == 1 and out is None and input.dim() == 2 and input.is_floating_point():
            drawn = inverse_cdf(input, generator)
            if drawn is not None:
                return drawn
        return original(input, num_samples, replacement, generator=generator, out=out)

    with seams.torch_multinomial(multinomial):
        yield


def inverse_cdf(weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor | None:
    """One index per row of non-negative `weights`, each with probability weight / row total: [rows, 1] int64. None
    for rows torch.multinomial refuses (a negative, infinite or NaN weight, or none above zero), so that it says so."""
    cdf = weights.double().cumsum(-1)
    total = cdf[:, -1:]
    if not (torch.isfinite(total).all() and (total > 0).all()) or weights.min() < 0:
        return None
    u = torch.rand(total.shape, dtype=torch.float64, device=weights.device, generator=generator) * total
    # The first entry whose cumulative weight exceeds u: entries of zero weight span nothing and are never drawn.
    return torch.searchsorted(cdf, u, right=True).clamp_(max=weights.size(-1) - 1)
