"""`grpo.zero_variance_groups`: groups whose completions all scored the same (zero advantage) teach nothing; TRL keeps
them (trl issue 3708). `skip`: they take no part in the loss, and with one micro-batch per generation no forward
pass either. `resample`: fresh prompts are sampled, up to `grpo.zero_variance_rounds` extra rounds, and their
informative groups take the flat groups' places (DAPO's dynamic sampling); what is still flat at the bound is skipped.

The trainer class (recipe_trainer.py) reads the gathered rewards in TRL's private `_calculate_rewards` (so the
decision uses the same tolerance as preflight) and hands what `_generate_and_score_completions` returns to the
functions here, which drop or mask rows; TRL's loss is untouched. Both names are checked before the trainer is
built (libraries/seams.py), and the returned keys at every step: a TRL upgrade that moves them fails with the version
named, never silently."""

from __future__ import annotations

import torch

from grpo_cli.errors import UserError
from grpo_cli.libraries.seams import trl_version

# A group whose weighted total reward has a standard deviation at or below this carries no signal. TRL tests exact
# zero (torch.isclose); rewards such as length penalties differ by amounts that teach nothing.
ZERO_STD_TOLERANCE = 1e-3
# Per-row tensors of the generate-and-score output that rows can be dropped from; any other key: mask only.
ROW_KEYS = {
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "advantages",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
}


def zero_variance_groups(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int) -> torch.Tensor:
    """One bool per group (in the gathered order): its weighted total rewards have std <= ZERO_STD_TOLERANCE."""
    totals = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    totals[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan  # rows no reward could judge
    grouped = totals.view(-1, group)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    judged = (~torch.isnan(grouped)).sum(dim=1).clamp(min=1)
    std = ((grouped - mean).nan_to_num(0.0).pow(2).sum(dim=1) / judged).sqrt()
    return std <= ZERO_STD_TOLERANCE


def check_output(output: dict) -> None:
    """The keys this relies on, in what TRL's generate-and-score returned (checked at every step: it costs nothing)."""
    if not {"completion_mask", "advantages", "num_items_in_batch"} <= set(output):
        raise UserError(
            f"trl {trl_version()} changed what GRPOTrainer._generate_and_score_completions returns; "
            "use grpo.zero_variance_groups=keep",
            path="grpo.zero_variance_groups",
        )


def can_replace_rows(output: dict) -> bool:
    """Every per-row tensor of the output is one this module knows how to drop or merge rows of."""
    return set(output) - {"num_items_in_batch"} <= ROW_KEYS


def informative_rows(
    gathered_rewards: torch.Tensor, weights: torch.Tensor, group: int, rows: int, process_index: int, device
) -> tuple[torch.Tensor, int]:
    """One bool per local row (its group has reward variance), and how many groups were flat in all processes."""
    flat = zero_variance_groups(gathered_rewards, weights, group)
    start = process_index * rows
    keep = (~flat).repeat_interleave(group)[start : start + rows]
    return keep.to(device), int(flat.sum())


def skip_rows(output: dict, keep: torch.Tensor, one_micro_batch: bool, gather) -> dict:
    """The output with flat groups out of the loss. With one micro-batch per generation the rows are dropped, so they
    cost no forward pass; one (masked) row stays when none is left, so every process still runs a backward (DDP
    reduces gradients over all of them). `gather`: the accelerator's, to count the loss tokens of all processes."""
    if one_micro_batch and can_replace_rows(output):
        index = keep.nonzero(as_tuple=True)[0] if keep.any() else torch.tensor([0], device=keep.device)
        output = {k: (v[index] if k in ROW_KEYS and v is not None else v) for k, v in output.items()}
        keep = keep[index]
    output["completion_mask"] = output["completion_mask"] * keep.unsqueeze(1).to(output["completion_mask"].dtype)
    loss_mask = output["completion_mask"] * output.get("tool_mask", 1)
    output["num_items_in_batch"] = gather(loss_mask.sum()).sum()
    return output


def replace_rows(output: dict, fresh: dict, keep: torch.Tensor, fresh_keep: torch.Tensor, pad_id: int):
    """Fresh informative rows in place of flat ones: the merged output and the new keep mask."""
    flat_rows = (~keep).nonzero(as_tuple=True)[0]
    take = fresh_keep.nonzero(as_tuple=True)[0]
    replaced = flat_rows[: len(take)]
    output = _merge_rows(output, fresh, replaced, take, pad_id)
    keep = keep.clone()
    keep[replaced] = True
    return output, keep


# How each per-row tensor is padded when rows of two generation rounds are put together: prompts are left-padded,
# completions (and per-token values) right-padded.
_LEFT = {"prompt_ids", "prompt_mask"}
_PAD = {"prompt_mask": 0, "completion_mask": 0, "tool_mask": 1, "importance_sampling_ratio": 1.0}


def _merge_rows(output: dict, fresh: dict, rows: torch.Tensor, take: torch.Tensor, pad_id: int) -> dict:
    """`output` with its `rows` replaced by `fresh`'s rows `take`, every tensor padded to the longer of the two."""
    merged = dict(output)
    for key in ROW_KEYS & set(output) & set(fresh):
        a, b = output[key], fresh[key]
        if a is None or b is None:
            continue
        if a.dim() > 1 and a.size(1) != b.size(1):
            width = max(a.size(1), b.size(1))
            value = pad_id if key in ("prompt_ids", "completion_ids") else _PAD.get(key, 0)
            a, b = (_pad(x, width, value, left=key in _LEFT) for x in (a, b))
        a = a.clone()
        a[rows] = b[take].to(a.dtype)
        merged[key] = a
    loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
    merged["num_items_in_batch"] = loss_mask.sum()
    return merged


def _pad(x: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    extra = width - x.size(1)
    if extra <= 0:
        return x
    filler = torch.full((x.size(0), extra, *x.shape[2:]), value, dtype=x.dtype, device=x.device)
    return torch.cat([filler, x] if left else [x, filler], dim=1)
