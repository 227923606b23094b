"""`grpo.zero_variance_groups: skip`: groups whose completions all scored the same (zero advantage) take no part in
the loss, and with one micro-batch per generation no forward pass either. TRL keeps them (trl issue 3708).

The seam is TRL's private `_calculate_rewards` (to read the gathered rewards, so the decision uses the same
tolerance as preflight) and `_generate_and_score_completions` (to drop or mask the rows it returns); TRL's loss is
untouched. Both are checked when the trainer is built, and the returned keys at the first step: a TRL upgrade that
moves them fails with the version named, never silently."""

from __future__ import annotations

import torch
from trl import GRPOTrainer

from grpo_cli.errors import UserError

# A group whose weighted total reward has a standard deviation at or below this carries no signal. TRL tests exact
# zero (torch.isclose); rewards such as length penalties differ by amounts that teach nothing.
ZERO_STD_TOLERANCE = 1e-3
SEAMS = ("_calculate_rewards", "_generate_and_score_completions")
# Per-row tensors of the generate-and-score output that rows can be dropped from; any other key: mask only.
ROW_KEYS = {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "old_per_token_logps",
            "ref_per_token_logps", "sampling_per_token_logps", "importance_sampling_ratio", "tool_mask"}


def check_seams() -> None:
    """Fail at start-up, naming TRL's version, when the methods this relies on are gone."""
    missing = [name for name in SEAMS if not callable(getattr(GRPOTrainer, name, None))]
    if missing:
        raise UserError(f"grpo.zero_variance_groups=skip needs GRPOTrainer.{missing[0]}, which the installed trl "
                        f"{_trl_version()} does not have; use grpo.zero_variance_groups=keep, or pip install "
                        "'trl>=1.16,<2'", path="grpo.zero_variance_groups")


def zero_variance_groups(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int) -> torch.Tensor:
    """One bool per group (in the gathered order): its weighted total rewards have std <= ZERO_STD_TOLERANCE."""
    totals = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    totals[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan  # rows no reward could judge
    grouped = totals.view(-1, group)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    judged = (~torch.isnan(grouped)).sum(dim=1).clamp(min=1)
    std = ((grouped - mean).nan_to_num(0.0).pow(2).sum(dim=1) / judged).sqrt()
    return std <= ZERO_STD_TOLERANCE


class SkipZeroVarianceTrainer(GRPOTrainer):
    """GRPOTrainer that leaves zero-variance groups out of the loss."""

    def _calculate_rewards(self, *args, **kwargs):
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self._gathered_rewards = rewards_per_func  # every process's rows, in the order advantages are computed
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return output
        if not {"completion_mask", "advantages", "num_items_in_batch"} <= set(output):
            raise UserError(f"trl {_trl_version()} changed what GRPOTrainer.{SEAMS[1]} returns; use "
                            "grpo.zero_variance_groups=keep", path="grpo.zero_variance_groups")
        flat = zero_variance_groups(self._gathered_rewards, self.reward_weights, self.num_generations)
        rows = len(output["advantages"])
        start = self.accelerator.process_index * rows
        keep = (~flat).repeat_interleave(self.num_generations)[start:start + rows].to(output["advantages"].device)
        self._metrics["train"]["zero_variance/groups_skipped"].append(float(flat.sum()))
        self._metrics["train"]["zero_variance/groups"].append(float(flat.numel()))
        if keep.all():
            return output
        if self.args.steps_per_generation == 1 and set(output) - {"num_items_in_batch"} <= ROW_KEYS:
            # One micro-batch: drop the rows, so they cost no forward pass. Keep one (masked) row when none is left,
            # so every process still runs a backward (DDP reduces gradients over all of them).
            index = keep.nonzero(as_tuple=True)[0] if keep.any() else torch.tensor([0], device=keep.device)
            output = {k: (v[index] if k in ROW_KEYS and v is not None else v) for k, v in output.items()}
            keep = keep[index]
        output["completion_mask"] = output["completion_mask"] * keep.unsqueeze(1).to(output["completion_mask"].dtype)
        loss_mask = output["completion_mask"] * output.get("tool_mask", 1)
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        return output


def _trl_version() -> str:
    from importlib.metadata import version

    return version("trl")
