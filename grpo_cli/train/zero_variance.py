"""`grpo.zero_variance_groups`: groups whose completions all scored the same (zero advantage) teach nothing; TRL keeps
them (trl issue 3708). `skip`: they take no part in the loss, and with one micro-batch per generation no forward
pass either. `resample`: fresh prompts are sampled, up to `grpo.zero_variance_rounds` extra rounds, and their
informative groups take the flat groups' places (DAPO's dynamic sampling); what is still flat at the bound is skipped.

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


def check_seams() -> None:
    """Fail at start-up, naming TRL's version, when the methods this relies on are gone."""
    missing = [name for name in SEAMS if not callable(getattr(GRPOTrainer, name, None))]
    if missing:
        raise UserError(
            f"grpo.zero_variance_groups=skip needs GRPOTrainer.{missing[0]}, which the installed trl "
            f"{_trl_version()} does not have; use grpo.zero_variance_groups=keep, or pip install "
            "'trl>=1.16,<2'",
            path="grpo.zero_variance_groups",
        )


def zero_variance_groups(rewards_per_func: torch.Tensor, weights: torch.Tensor, group: int) -> torch.Tensor:
    """One bool per group (in the gathered order): its weighted total rewards have std <= ZERO_STD_TOLERANCE."""
    totals = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    totals[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan  # rows no reward could judge
    grouped = totals.view(-1, group)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    judged = (~torch.isnan(grouped)).sum(dim=1).clamp(min=1)
    std = ((grouped - mean).nan_to_num(0.0).pow(2).sum(dim=1) / judged).sqrt()
    return std <= ZERO_STD_TOLERANCE


class ZeroVarianceTrainer(GRPOTrainer):
    """GRPOTrainer that skips or resamples zero-variance groups (`zero_variance_mode`: skip | resample)."""

    def __init__(self, *args, zero_variance_mode: str = "skip", zero_variance_rounds: int = 2, **kwargs):
        super().__init__(*args, **kwargs)
        self.zero_variance_mode = zero_variance_mode
        self.zero_variance_rounds = zero_variance_rounds

    def _calculate_rewards(self, *args, **kwargs):
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self._gathered_rewards = rewards_per_func  # every process's rows, in the order advantages are computed
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return output
        if not {"completion_mask", "advantages", "num_items_in_batch"} <= set(output):
            raise UserError(
                f"trl {_trl_version()} changed what GRPOTrainer.{SEAMS[1]} returns; use grpo.zero_variance_groups=keep",
                path="grpo.zero_variance_groups",
            )
        keep, flat_groups = self._informative_rows(output)
        rounds = 0
        while (
            self.zero_variance_mode == "resample"
            and not keep.all()
            and rounds < self.zero_variance_rounds
            and set(output) - {"num_items_in_batch"} <= ROW_KEYS
        ):
            rounds += 1
            output, keep = self._replace_flat_groups(output, keep)
        if self.zero_variance_mode == "resample" and not keep.all() and rounds == self.zero_variance_rounds:
            print(
                f"zero-variance groups: {int((~keep).sum()) // self.num_generations} still flat after "
                f"{rounds} extra generation round(s) (grpo.zero_variance_rounds); skipping them",
                flush=True,
            )
        self._metrics["train"]["zero_variance/groups_flat"].append(float(flat_groups))
        self._metrics["train"]["zero_variance/groups_skipped"].append(float((~keep).sum()) / self.num_generations)
        self._metrics["train"]["zero_variance/extra_rounds"].append(float(rounds))
        return output if keep.all() else self._skip(output, keep)

    def _informative_rows(self, output) -> tuple[torch.Tensor, int]:
        """One bool per local row (its group has reward variance), and how many groups were flat in all processes."""
        flat = zero_variance_groups(self._gathered_rewards, self.reward_weights, self.num_generations)
        rows = len(output["advantages"])
        start = self.accelerator.process_index * rows
        keep = (~flat).repeat_interleave(self.num_generations)[start : start + rows]
        return keep.to(output["advantages"].device), int(flat.sum())

    def _replace_flat_groups(self, output, keep):
        """Generate groups for as many fresh prompts as there are flat groups; their informative groups replace
        flat ones (one process only: the recipe refuses resample with several)."""
        g = self.num_generations
        flat_rows = (~keep).nonzero(as_tuple=True)[0]
        prompts = torch.randint(len(self.train_dataset), (len(flat_rows) // g,)).tolist()
        fresh = super()._generate_and_score_completions([self.train_dataset[i] for i in prompts for _ in range(g)])
        fresh_keep, _ = self._informative_rows(fresh)
        take = fresh_keep.nonzero(as_tuple=True)[0]
        replaced = flat_rows[: len(take)]
        output = _merge_rows(output, fresh, replaced, take, self.processing_class.pad_token_id)
        keep = keep.clone()
        keep[replaced] = True
        return output, keep

    def _skip(self, output, keep):
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


def _trl_version() -> str:
    from importlib.metadata import version

    return version("trl")
