"""The run directory: what a run writes, and the rule that an existing run is resumed or left alone."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from grpo_cli.errors import UserError
from grpo_cli.recipe.schema import Recipe

RECIPE_FILE = "recipe.yaml"
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
FINAL_DIR = "final"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoints in step order."""
    found = [p for p in run_dir.glob("checkpoint-*") if p.is_dir() and _CHECKPOINT.match(p.name)]
    return sorted(found, key=lambda p: int(_CHECKPOINT.match(p.name).group(1)))


def prepare_run_dir(recipe: Recipe, resume: bool) -> Path | None:
    """Create the run directory, or find the checkpoint to resume from. Never overwrites a previous run."""
    run_dir = recipe.output_dir
    existing = run_dir.exists() and any(run_dir.iterdir())
    if resume:
        found = checkpoints(run_dir) if run_dir.exists() else []
        if not found:
            raise UserError(
                f"nothing to resume in {run_dir}: no checkpoint-* folder; run without --resume to start",
                path="training.output_dir",
            )
        return found[-1]
    if existing:
        raise UserError(
            f"{run_dir} already holds a run; continue it with --resume, or choose another directory "
            f"(training.output_dir=runs/new_name or name=new_name)",
            path="training.output_dir",
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_resolved_recipe(recipe, run_dir / RECIPE_FILE)
    return None


def write_resolved_recipe(recipe: Recipe, path: Path) -> None:
    """The recipe with every default and override filled in; name and output_dir are written out so it reloads
    as the same run from anywhere."""
    resolved = recipe.model_dump(mode="json")
    resolved["name"] = recipe.run_name
    resolved["training"]["output_dir"] = str(recipe.output_dir)
    path.write_text(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True), encoding="utf-8")
