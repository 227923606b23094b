"""torch.multinomial's own draws, computed in bulk (grpo_cli/generation/torch_draws.py): the same tokens and the same
generator state after them as torch's, for flat and peaked rows, zero weights, unnormalised rows, the default
generator and a given one; torch's own refusals and every other call left to torch."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_cli.generation import torch_draws
from grpo_cli.generation.torch_draws import draw, drawn_in_bulk, one_row


def weights_for(case: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(case)
    rows, vocab = 1 + case % 9, [2, 7, 100, 5000, 49152][case % 5]
    sharpness = [0.1, 1.0, 4.0, 12.0, 40.0][(case // 5) % 5]  # flat rows to near one-hot ones
    weights = torch.softmax(torch.randn(rows, vocab, generator=gen) * sharpness, -1)
    if case % 3 == 0:
        weights[:, 1::3] = 0  # never drawn
    if case % 4 == 0:
        weights *= 7.5  # rows need not sum to 1
    return weights


@pytest.mark.parametrize("case", range(40))
def test_the_same_tokens_and_generator_state_as_torch_multinomial(case):
    weights = weights_for(case)
    ours, torchs = torch.Generator().manual_seed(case), torch.Generator().manual_seed(case)
    torch.rand(case * 7, generator=ours), torch.rand(case * 7, generator=torchs)  # the twister part-way through
    workspaces: dict = {}
    for _ in range(3):  # a workspace kept between draws, as in a sampling loop
        drawn = draw(weights, ours, workspaces)
        assert drawn is not None and drawn.dtype == torch.int64 and drawn.shape == (weights.shape[0], 1)
        assert torch.equal(drawn, torch.multinomial(weights, 1, generator=torchs))
        assert torch.equal(ours.get_state(), torchs.get_state())
    assert (weights.gather(1, drawn) > 0).all()


def test_the_default_generator_moves_as_torchs():
    weights = weights_for(8)
    torch.manual_seed(3)
    ours = draw(weights)
    after_ours = torch.rand(5)
    torch.manual_seed(3)
    assert torch.equal(ours, torch.multinomial(weights, 1)) and torch.equal(after_ours, torch.rand(5))


def test_one_row_draws_as_torch_draws_a_1d_row():
    """grpo eval's seeded sampling: each row with its own generator, torch's tokens and states."""
    weights = weights_for(13)
    ours, torchs = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for row in weights.repeat(3, 1):
        drawn = one_row(row, ours)
        assert drawn.shape == (1,) and torch.equal(drawn, torch.multinomial(row, 1, generator=torchs))
        assert torch.equal(ours.get_state(), torchs.get_state())


def test_draws_follow_the_weights():
    weights = torch.tensor([[1.0, 0.0, 6.0, 3.0, 0.0]]).repeat(20000, 1)
    drawn = draw(weights, torch.Generator().manual_seed(0)).squeeze(1)
    shares = torch.bincount(drawn, minlength=5).double() / 20000
    assert torch.allclose(shares, torch.tensor([0.1, 0.0, 0.6, 0.3, 0.0], dtype=torch.float64), atol=0.012), shares


def test_other_inputs_are_left_to_torch_and_the_generator_is_untouched():
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    for weights in (
        torch.tensor([[0.5, -1.0]]),  # refused by torch
        torch.tensor([[0.5, float("nan")]]),
        torch.zeros(2, 4),
        torch.ones(2, 4, dtype=torch.float64),  # another dtype
        torch.ones(4),  # one row, 1-D
        torch.softmax(torch.randn(50, 4), 0).t(),  # torch draws in the memory order: column-major here
        torch.softmax(torch.randn(3, 50), -1) * 1e-37,  # too small for float32 to bound
    ):
        assert draw(weights, gen) is None and torch.equal(gen.get_state(), state)


def test_a_draw_handed_back_after_the_random_numbers_leaves_the_generator_where_it_was(monkeypatch):
    monkeypatch.setattr(torch_draws, "_ratio", lambda p, bits: float("nan"))
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    assert draw(torch.softmax(torch.randn(3, 50), -1), gen) is None and torch.equal(gen.get_state(), state)


def test_within_the_context_one_sample_rows_are_drawn_here_and_everything_else_is_torchs(monkeypatch):
    original, calls = torch.multinomial, []
    monkeypatch.setattr(torch_draws, "_verified", True)  # the first-use check done
    monkeypatch.setattr(torch_draws, "draw", lambda *args: calls.append(1) or draw(*args))
    weights = torch.softmax(torch.randn(3, 50), -1)
    with drawn_in_bulk():
        assert torch.multinomial is not original
        assert torch.multinomial(weights, num_samples=1).shape == (3, 1) and calls == [1]
        assert torch.multinomial(weights, 2).shape == (3, 2) and calls == [1]  # torch's own
        with pytest.raises(RuntimeError, match="probability tensor"):  # torch's own refusal, word for word
            torch.multinomial(torch.tensor([[0.5, -1.0]]), 1)
    assert torch.multinomial is original


def test_a_torch_that_draws_otherwise_is_left_to_draw_for_itself(monkeypatch):
    """The first-use check: where these draws and torch's disagree, torch draws every token."""
    monkeypatch.setattr(torch_draws, "_verified", None)
    # A torch whose exponentials differ in the last bits (older torch's -log(1 - u)): the draws alone might agree.
    monkeypatch.setattr(torch_draws, "_exponential64", lambda bits: -math.log(1 - (int(bits) & (2**53 - 1)) * 2.0**-53))
    weights = torch.softmax(torch.randn(3, 50), -1)
    with drawn_in_bulk():
        torch.manual_seed(1)
        drawn = torch.multinomial(weights, 1)
    torch.manual_seed(1)
    assert torch_draws._verified is False and torch.equal(drawn, torch.multinomial(weights, 1))


def test_grpo_plan_counts_the_workspace_a_draw_keeps():
    from grpo_cli.plan.phase_terms import DRAW_WORKSPACE_BYTES

    work = torch_draws._Workspace(torch.Size((3, 1000)))
    held = sum(t.numel() * t.element_size() for t in vars(work).values())
    assert held == DRAW_WORKSPACE_BYTES * 3 * 1000
