"""The vLLM importance-sampling weights grpo computes from the loss's forward pass (train/vllm_correction.py): TRL's
four modes, on numbers whose answer is plain. That they equal TRL's own weights on a real run: test_vllm_cpu.py."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from grpo_cli.train import vllm_correction

LN2, LN4 = math.log(2.0), math.log(4.0)


@pytest.mark.parametrize(
    "mode, expected",
    [
        # trainer/vLLM probability ratios per token: 2, 4, 1 (padding) -> sequence ratio 8, above clip_max 3
        ("token_truncate", [[2.0, 3.0, 1.0]]),
        ("token_mask", [[2.0, 0.0, 1.0]]),
        ("sequence_truncate", [[3.0]]),
        ("sequence_mask", [[0.0]]),
    ],
)
def test_weights_follow_trls_modes_and_ignore_padding(mode, expected):
    trainer = SimpleNamespace(
        vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_clip_min=None,
        vllm_importance_sampling_clip_max=3.0,
    )
    trainer_logps = torch.tensor([[LN2 - 1.0, LN4 - 1.0, 5.0]])
    sampling_logps = torch.tensor([[-1.0, -1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding: its weight is 1 whatever the log-probs say
    weights = vllm_correction.ratio(trainer, trainer_logps, sampling_logps, mask)
    assert torch.allclose(weights, torch.tensor(expected), atol=1e-6)


def test_a_token_vllm_could_not_score_counts_as_agreeing():
    trainer = SimpleNamespace(
        vllm_importance_sampling_mode="sequence_truncate",
        vllm_importance_sampling_clip_min=None,
        vllm_importance_sampling_clip_max=3.0,
    )
    weights = vllm_correction.ratio(
        trainer, torch.tensor([[LN2, 0.3]]), torch.tensor([[0.0, float("nan")]]), torch.ones(1, 2)
    )
    assert torch.allclose(weights, torch.tensor([[2.0]]))


def test_diagnostics_span_every_micro_batch_of_a_generation():
    """Min and max over the whole generation batch, as TRL logs them, not an average of per-micro-batch extremes."""
    diagnostics = vllm_correction.Diagnostics()
    mask = torch.ones(2, 1)
    diagnostics.add(torch.tensor([[0.1], [0.0]]), torch.zeros(2, 1), mask, torch.tensor([[0.5], [1.0]]), True)
    diagnostics.add(torch.tensor([[-0.4], [0.0]]), torch.zeros(2, 1), mask, torch.tensor([[2.5], [1.0]]), True)
    metrics = {key: [] for key in ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max")}
    metrics.update({f"sampling/importance_sampling_ratio/{k}": [] for k in ("min", "mean", "max")})
    diagnostics.flush(metrics, lambda t: t, torch.device("cpu"))
    assert metrics["sampling/importance_sampling_ratio/min"] == [0.5]
    assert metrics["sampling/importance_sampling_ratio/max"] == [2.5]
    assert metrics["sampling/importance_sampling_ratio/mean"] == [pytest.approx(1.25)]
    assert metrics["sampling/sampling_logp_difference/mean"] == [pytest.approx(0.125)]
    assert metrics["sampling/sampling_logp_difference/max"] == [pytest.approx(0.4)]
    assert diagnostics.ratio_count == 0, "flushing starts the next generation batch afresh"


def test_diagnostics_leave_out_rows_the_loss_does_not_see():
    """A skipped flat group's rows have no scored token; their sequence weight (exp 0 = 1) is no measurement."""
    diagnostics = vllm_correction.Diagnostics()
    mask = torch.tensor([[1.0], [0.0]])
    diagnostics.add(torch.tensor([[0.2], [0.9]]), torch.zeros(2, 1), mask, torch.tensor([[0.5], [1.0]]), True)
    assert (diagnostics.ratio_count, diagnostics.ratio_max) == (1, 0.5)
    assert (diagnostics.delta_count, diagnostics.delta_max) == (1, pytest.approx(0.2))
