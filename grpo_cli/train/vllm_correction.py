"""TRL's vLLM importance-sampling correction, on-policy, without the extra forward pass TRL spends on it.

vLLM's log-probs and the trainer's differ (other kernels, often another precision), so TRL weights each completion's
loss by exp(trainer log-prob - vLLM log-prob), per token or per sequence, truncated or masked outside
[clip_min, clip_max]. For the trainer's side TRL 1.16 runs one more no-grad forward pass over the whole generation
batch, always. On-policy (one optimisation pass per generation, generation aligned with the optimizer step) those
log-probs are exactly the ones the loss's own forward pass computes a moment later (TRL's loss already falls back to
them for the policy ratio), so the pass is spent for nothing (TRL issue 5412); what it cost here:
benchmarks/vllm_correction_pass.md.

Here that case takes the ratio from the loss forward's detached log-probs, with TRL's formula, and logs TRL's
diagnostics (`sampling/...`) once per generation batch, as TRL does. Anything off-policy (num_iterations > 1,
generation not aligned with the optimizer step) or with Liger's fused loss (which never exposes the log-probs) is
left to TRL unchanged.
"""

from __future__ import annotations

import math

import torch

RATIO_KEY = "importance_sampling_ratio"


def applies(trainer) -> bool:
    """Whether the trainer's correction can come from the loss forward: vLLM with the correction on, on-policy."""
    args = trainer.args
    return bool(
        trainer.use_vllm
        and trainer.vllm_importance_sampling_correction
        and trainer.num_iterations == 1
        and args.gradient_accumulation_steps % args.steps_per_generation == 0  # TRL's test, with num_iterations 1
        and not args.use_liger_kernel
    )


def ratio(trainer, trainer_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """TRL's correction weights (grpo_trainer.py, `_generate_and_score_completions`, TRL 1.16): (B, T) per token,
    (B, 1) per sequence. Tokens vLLM could not score (NaN) count as agreeing."""
    diff = torch.nan_to_num((trainer_logps - sampling_logps) * mask, nan=0.0)
    mode = trainer.vllm_importance_sampling_mode
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    weights = torch.exp(diff)
    low, high = trainer.vllm_importance_sampling_clip_min, trainer.vllm_importance_sampling_clip_max
    if mode.endswith("truncate"):
        return torch.clamp(weights, min=low, max=high)
    outside = (weights < (-math.inf if low is None else low)) | (weights > (math.inf if high is None else high))
    return weights.masked_fill(outside, 0.0)


class Diagnostics:
    """TRL's `sampling/...` figures over one generation batch, gathered from its micro-batches: the mean and max
    |log-prob difference| over scored tokens, and min/mean/max of the weights (per sequence, or per scored token), all
    over the rows the loss sees."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.delta_sum, self.delta_count, self.delta_max = 0.0, 0, 0.0
        self.ratio_sum, self.ratio_count = 0.0, 0
        self.ratio_min, self.ratio_max = math.inf, -math.inf

    def add(self, trainer_logps, sampling_logps, mask, weights, per_sequence: bool) -> None:
        delta = (trainer_logps - sampling_logps).abs()
        delta = delta[mask.bool() & ~torch.isnan(delta)]
        # Rows the loss does not see (flat groups grpo skipped: their mask is zero) would count as ratio 1.
        flat = weights[mask.sum(-1) > 0].flatten() if per_sequence else weights[mask.bool()]
        if delta.numel():
            self.delta_sum += delta.sum().item()
            self.delta_count += delta.numel()
            self.delta_max = max(self.delta_max, delta.max().item())
        if flat.numel():
            self.ratio_sum += flat.sum().item()
            self.ratio_count += flat.numel()
            self.ratio_min = min(self.ratio_min, flat.min().item())
            self.ratio_max = max(self.ratio_max, flat.max().item())

    def flush(self, metrics: dict, gather, device) -> None:
        """Append this process's figures, gathered as TRL gathers them (an empty process counts 0, as TRL's does)."""
        mean_delta = self.delta_sum / self.delta_count if self.delta_count else 0.0
        if self.ratio_count:
            low, mean, high = self.ratio_min, self.ratio_sum / self.ratio_count, self.ratio_max
        else:
            low = mean = high = 0.0
        mine = torch.tensor([mean_delta, self.delta_max, low, mean, high], device=device)
        every = gather(mine.unsqueeze(0)).view(-1, 5)
        metrics["sampling/sampling_logp_difference/mean"].append(every[:, 0].mean().item())
        metrics["sampling/sampling_logp_difference/max"].append(every[:, 1].max().item())
        metrics["sampling/importance_sampling_ratio/min"].append(every[:, 2].min().item())
        metrics["sampling/importance_sampling_ratio/mean"].append(every[:, 3].mean().item())
        metrics["sampling/importance_sampling_ratio/max"].append(every[:, 4].max().item())
        self.reset()


def attach(trainer, inputs: dict, per_token_logps: torch.Tensor, diagnostics: Diagnostics) -> None:
    """Put the correction weights for this micro-batch into `inputs`, where TRL's loss reads them, and log the
    diagnostics after the generation batch's last micro-batch (or at once in evaluation, which has no
    accumulation)."""
    mask = inputs["completion_mask"]
    if "tool_mask" in inputs:
        mask = mask * inputs["tool_mask"]
    logps = per_token_logps.detach()
    sampling = inputs["sampling_per_token_logps"]
    weights = ratio(trainer, logps, sampling, mask)
    inputs[RATIO_KEY] = weights
    diagnostics.add(logps, sampling, mask, weights, trainer.vllm_importance_sampling_mode.startswith("sequence"))
    training = trainer.model.training
    last = trainer._step % trainer.args.steps_per_generation == trainer.args.steps_per_generation - 1
    if last or not training:
        mode = "train" if training else "eval"
        diagnostics.flush(trainer._metrics[mode], trainer.accelerator.gather, logps.device)
