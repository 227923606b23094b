"""What `grpo eval` evaluates and where its results go: a model and optional adapter, a run's trained model or one of
its checkpoints, and the default output folder of each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.recipe.eval_section import EvalSection
from grpo_cli.runs.layout import EVAL_DIR, FINAL_DIR, is_checkpoint
from grpo_cli.runs.weight_files import unloadable_weights


@dataclass(frozen=True)
class Target:
    """What is evaluated: a model (hub id, directory, .gguf) and optionally a LoRA adapter on top of it."""

    label: str
    model: str
    adapter: str | None = None


def default_output(ev: EvalSection, target: Target, run_dir: Path | None = None) -> Path:
    """RUN/eval/<protocol>-<data>[-checkpoint-N] for a run (base/ and trained/ beneath), else
    evals/<model>[-<adapter>]-<...>."""
    tag = f"{ev.protocol}-{Path(ev.source).stem if Path(ev.source).suffix else ev.split}"
    if run_dir is not None and is_checkpoint(run_dir):
        return run_dir.parent / EVAL_DIR / f"{tag}-{run_dir.name}"
    if run_dir is not None:
        return run_dir / EVAL_DIR / tag
    adapter = f"-{_slug(target.adapter)}" if target.adapter else ""
    return Path("evals") / f"{_slug(target.model)}{adapter}-{tag}"


def _slug(name: str) -> str:
    """A folder name from a hub id or a path: `Qwen/Qwen2.5-0.5B` -> `Qwen2.5-0.5B`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name.rstrip("/")).name.removesuffix(".gguf")) or "model"


def run_target(run_dir: Path, base_model: str) -> Target:
    """The trained model of a finished run (its LoRA adapter on `base_model`, the recipe's model.name, or its full
    weights), or of one of its checkpoints when `run_dir` is RUN/checkpoint-N."""
    from grpo_cli.models import is_lora_adapter

    weights = run_dir if is_checkpoint(run_dir) else run_dir / FINAL_DIR
    unloadable = unloadable_weights(weights)
    if unloadable is not None:
        file, why = unloadable
        raise UserError(
            f"{file} {why}; restore it, or evaluate a whole checkpoint with "
            f"grpo eval run {run_dir.parent if is_checkpoint(run_dir) else run_dir}/checkpoint-N"
        )
    if is_lora_adapter(weights):
        return Target("trained", base_model, str(weights))
    if (weights / "config.json").exists():
        return Target("trained", str(weights))
    if weights == run_dir:
        raise UserError(f"{run_dir} holds neither a LoRA adapter nor full model weights")
    raise UserError(
        f"{run_dir} has no finished model in {weights}: finish it with `grpo train RECIPE --resume`, "
        f"or evaluate a checkpoint with grpo eval run {run_dir}/checkpoint-N"
    )
