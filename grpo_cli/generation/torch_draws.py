"""torch.multinomial's own draws on a CPU, without its cost of one exponential per vocabulary entry.

For one sample from each row of float32 weights p, torch.multinomial fills q with an exponential per entry, one at a
time (q = -log1p(-u), u from the low 53 bits of a 64-bit draw of the CPU generator's Mersenne Twister), and returns
argmax(p / q). That costs about 16 ns an entry, at every decode step for every row (benchmarks/torch_draws.txt: 16
rows of Qwen2.5's 151,936 entries). Here the same 64-bit draws come from `random_` on an int64 tensor (it keeps
those 53 bits, at a fraction of the cost). Since q >= u, p / u bounds an
entry's ratio from above, so only the few entries whose bound reaches the likeliest entry's ratio can win, and only
those become exponentials, as torch makes them (log1p in double, rounded to float32, p / q in float32, the first
maximum). The tokens, and the generator's state after them, are torch's: a run samples what it sampled before
(tests/test_torch_draws.py). A check at first use (the exponentials bit for bit, then a few draws) hands every draw
back to torch if this torch makes them otherwise. Not thread-safe: one sampling loop at a time, as grpo samples.
Used by `grpo train`'s sampling on a CPU (`drawn_in_bulk`, train/recipe_trainer.py) and by grpo eval's seeded
sampling, row by row (`one_row`, sampling.py).
"""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager

import numpy as np
import torch

from grpo_cli.libraries import seams

_TOP = 2.0**-21  # the weight of the lowest of u's top 21 bits
_HIGH_WORD = 1 if sys.byteorder == "little" else 0  # of the two 32-bit words of an int64
_verified: bool | None = None  # the first-use check's answer
_TORCH_MULTINOMIAL = torch.multinomial  # torch's own, whatever a context later puts in its place
_ROW_WORKSPACES: dict = {}  # for one-row draws (grpo eval's seeded sampling): one shape, a few MB
_SMALLEST_FLOOR = 2.0**-100  # below it the bound's float32 products near denormals and round by more than it allows


@contextmanager
def drawn_in_bulk():
    """Within: `torch.multinomial`, as transformers' sampling loop calls it (one sample from each row of float32
    weights), returns torch's own draws computed here; every other call, and any this torch would draw otherwise, goes
    to torch's own."""
    original = torch.multinomial
    workspaces: dict[torch.Size, _Workspace] = {}

    def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
        drawn = _checked_draw(input, generator, workspaces) if num_samples == 1 and out is None else None
        if drawn is not None:
            return drawn
        return original(input, num_samples, replacement, generator=generator, out=out)

    with seams.torch_multinomial(multinomial):
        yield


class _Workspace:
    """The tensors one shape of weights needs (21 bytes an entry: 51 MB for 16 rows of 151,936), kept from one decode
    step to the next: fresh ones cost about as much in page faults as the arithmetic on them."""

    def __init__(self, shape: torch.Size):
        self.draws = torch.empty(shape, dtype=torch.int64)
        self.top = torch.empty(shape, dtype=torch.int32)
        self.bound = torch.empty(shape, dtype=torch.float32)
        self.scratch = torch.empty(shape, dtype=torch.float32)
        self.reach = torch.empty(shape, dtype=torch.bool)


def draw(weights: torch.Tensor, generator: torch.Generator | None = None, workspaces: dict | None = None):
    """torch.multinomial(weights, 1, generator=generator) for 2-D float32 CPU `weights`, the generator advanced the
    same way: [rows, 1] int64. None, with the generator untouched, where torch must answer (other inputs, a weight
    torch refuses, a draw of exactly 0, weights so small that float32 cannot bound them). `workspaces` keeps the
    tensors of the last shape drawn from call to call."""
    if weights.dim() != 2 or weights.dtype != torch.float32 or weights.device.type != "cpu" or weights.numel() == 0:
        return None
    if not weights.is_contiguous() or not _acceptable(weights):
        return None  # torch fills its exponentials in the weights' memory order: row-major only here
    generator = generator if generator is not None else torch.default_generator
    p = weights.detach()
    work = workspaces.get(p.shape) if workspaces is not None else None
    if work is None:
        work = _Workspace(p.shape)
        if workspaces is not None:
            workspaces.clear()  # one shape at a time: sampling draws the same shape at every step
            workspaces[p.shape] = work
    before = generator.get_state()
    work.draws.random_(generator=generator)  # torch's 64-bit draws: the generator moves as torch.multinomial's
    # top: bits 32..52 of each draw, the top 21 of u's 53, so that u >= top * 2**-21 and p / q <= p / (top * 2**-21).
    high_words = work.draws.view(torch.int32)[..., _HIGH_WORD::2]
    torch.bitwise_and(high_words, 0x1FFFFF, out=work.top)
    torch.add(work.top, 1, out=work.scratch)  # (top + 1) * 2**-21 > u: p / (top + 1) ranks entries near p / u
    torch.div(p, work.scratch, out=work.bound)
    bits, weight = work.draws.numpy(), p.numpy()
    # Each row's floor: the better ratio of two likely winners, its likeliest entry and the best p / (top + 1).
    likely = zip(p.max(-1).indices.tolist(), work.bound.max(-1).indices.tolist())
    floors = [
        max(_ratio(weight[r, j], bits[r, j]), _ratio(weight[r, k], bits[r, k])) for r, (j, k) in enumerate(likely)
    ]
    if not all(_SMALLEST_FLOOR < floor < math.inf for floor in floors):  # a draw of exactly 0 (2**-53 an entry)
        generator.set_state(before)
        return None
    # The entries whose bound reaches their row's floor, with room for two float32 roundings: only they can win.
    scale = torch.tensor(floors, dtype=torch.float32).mul_((1 - 1e-6) * _TOP).unsqueeze(1)
    torch.mul(work.top, scale, out=work.scratch)
    torch.ge(p, work.scratch, out=work.reach)
    best: dict[int, tuple[float, int]] = {}
    for r, i in torch.nonzero(work.reach).tolist():  # row-major: a tie keeps the first index, as torch.argmax
        ratio = _ratio(weight[r, i], bits[r, i])
        if math.isnan(ratio):  # a zero weight met a draw of exactly 0: torch.argmax would take the NaN
            generator.set_state(before)
            return None
        if r not in best or ratio > best[r][0]:
            best[r] = (ratio, i)
    if len(best) != p.shape[0]:  # each row's floor entry is among them (above); never leave a row undrawn regardless
        generator.set_state(before)
        return None
    return torch.tensor([best[r][1] for r in range(p.shape[0])], dtype=torch.int64).unsqueeze(1)


def _ratio(p: np.float32, draw: np.int64) -> float:
    """p / q in float32, with q the exponential torch makes from `draw`."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float32(p) / _exponential(draw))


def _exponential(draw) -> np.float32:
    """torch's float32 exponential from a 64-bit draw: its double one, rounded."""
    return np.float32(_exponential64(draw))


def _exponential64(draw) -> float:
    """torch's exponential in double from a 64-bit draw: u from its low 53 bits, -log1p(-u) (libm's, as torch's)."""
    u = (int(draw) & ((1 << 53) - 1)) * 2.0**-53
    return -math.log1p(-u)


def _acceptable(weights: torch.Tensor) -> bool:
    """What torch.multinomial accepts: finite, non-negative, some weight in each row."""
    return bool(((weights.max() < math.inf) & (weights.min() >= 0) & (weights.sum(-1) > 0).all()).item())


def one_row(weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """torch.multinomial(weights, 1, generator=generator) for one row of weights: [1] int64, drawn in bulk where that
    gives torch's draw (grpo eval's seeded sampling draws each row with the row's own generator)."""
    drawn = _checked_draw(weights.unsqueeze(0), generator, _ROW_WORKSPACES)
    return drawn[0] if drawn is not None else _TORCH_MULTINOMIAL(weights, 1, generator=generator)


def _checked_draw(weights, generator, workspaces) -> torch.Tensor | None:
    """draw(), where this process's first-use check passed; None (torch draws) otherwise."""
    return draw(weights, generator, workspaces) if _verified_here() else None


def _verified_here() -> bool:
    """Once a process: torch's exponentials are the ones made here from its 64-bit draws, bit for bit, and a few
    draws agree, tokens and the generator's state after."""
    global _verified
    if _verified is None:
        # In double, where a formula or a log1p that differs in the last bit shows (float32 rounding hides most).
        exponentials = torch.empty(4096, dtype=torch.float64).exponential_(generator=torch.Generator().manual_seed(2))
        draws = torch.empty(4096, dtype=torch.int64).random_(generator=torch.Generator().manual_seed(2))
        made_here = np.array([_exponential64(value) for value in draws.tolist()])
        weights = torch.softmax(torch.randn(4, 3000, generator=torch.Generator().manual_seed(0)) * 4, -1)
        ours, theirs = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
        drawn = draw(weights, ours)
        _verified = (
            np.array_equal(exponentials.numpy(), made_here)
            and drawn is not None
            and torch.equal(drawn, _TORCH_MULTINOMIAL(weights, 1, generator=theirs))
            and torch.equal(ours.get_state(), theirs.get_state())
        )
    return _verified
