"""Sampling a token by its cumulative probability (grpo_cli/train/categorical_sampling.py): the categorical
distribution torch.multinomial samples, one uniform draw per row, torch's own refusals kept."""

from __future__ import annotations

import pytest
import torch

from grpo_cli.train.categorical_sampling import inverse_cdf, one_draw_per_row


def test_draws_follow_the_weights_and_never_a_zero_weight_entry():
    weights = torch.tensor([[1.0, 0.0, 6.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0, 2.0]]).repeat(20000, 1)
    drawn = inverse_cdf(weights, torch.Generator().manual_seed(0)).squeeze(1)
    assert drawn.shape == (40000,) and drawn.dtype == torch.int64
    shares = torch.bincount(drawn[0::2], minlength=5).double() / 20000
    assert torch.allclose(shares, torch.tensor([0.1, 0.0, 0.6, 0.3, 0.0], dtype=torch.float64), atol=0.012), shares
    assert (drawn[1::2] == 4).all()


def test_the_tail_of_a_large_vocabulary_keeps_its_mass():
    """Half the mass on the last entry of 151,936 after 151,935 tiny ones: a float32 running sum would lose it."""
    weights = torch.full((4000, 151936), 1.0 / 151935)
    weights[:, -1] = 1.0
    drawn = inverse_cdf(weights, torch.Generator().manual_seed(1)).squeeze(1)
    assert abs((drawn == 151935).double().mean().item() - 0.5) < 0.03


def test_within_the_context_one_sample_rows_take_one_draw_and_everything_else_is_torchs():
    original = torch.multinomial
    weights = torch.softmax(torch.randn(3, 50), -1)
    with one_draw_per_row():
        assert torch.multinomial is not original
        assert torch.multinomial(weights, num_samples=1).shape == (3, 1)
        assert torch.multinomial(weights, 2).shape == (3, 2)  # torch's own
        with pytest.raises(RuntimeError, match="probability tensor"):  # torch's own refusal, word for word
            torch.multinomial(torch.tensor([[0.5, -1.0]]), 1)
        with pytest.raises(RuntimeError):
            torch.multinomial(torch.zeros(1, 4), 1)
    assert torch.multinomial is original
