"""The health watch over a finished run, for `grpo report` and the model card: a grpo run directory (its
metrics.jsonl, read with the thresholds, group count and reward weights of its recipe.yaml) or a plain TRL run (the
`log_history` of its trainer_state.json), through the same rules a run applies while it trains (runs/health.py)."""

from __future__ import annotations

import json
from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.recipe.health_section import HealthSection
from grpo_cli.recipe.user_code import RewardSpec
from grpo_cli.runs.health import Alarm, diagnose
from grpo_cli.runs.layout import METRICS_FILE, RECIPE_FILE, TRAINER_STATE_FILE


def is_trl_run(run_dir: Path) -> bool:
    """A folder TRL wrote (an output or checkpoint folder) and grpo did not: trainer_state.json, no metrics.jsonl."""
    return not (run_dir / METRICS_FILE).exists() and (run_dir / TRAINER_STATE_FILE).is_file()


def trainer_state_rows(run_dir: Path) -> list[dict]:
    """The logged GRPO steps of a TRL run: `log_history` entries with a step and a loss or reward (NaN kept)."""
    path = run_dir / TRAINER_STATE_FILE
    try:
        history = json.loads(path.read_text(encoding="utf-8")).get("log_history")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        raise UserError(f"{path} is not a trainer state TRL wrote: {exc}") from None
    if not isinstance(history, list):
        raise UserError(f"{path} has no log_history list: is it a trainer_state.json TRL wrote?")
    rows = [
        entry
        for entry in history
        if isinstance(entry, dict) and isinstance(entry.get("step"), int) and ("loss" in entry or "reward" in entry)
    ]
    if not rows:
        raise UserError(f"{path} holds no logged step with a loss or a reward")
    return rows


def run_alarms(run_dir: Path, rows: list[dict]) -> list[Alarm]:
    """The alarms of a finished run's records, with its recipe's settings when it has one grpo can read."""
    return diagnose(rows, **_watch_args(run_dir))


def _watch_args(run_dir: Path) -> dict:
    from grpo_cli.recipe.validation import load_recipe

    if not (run_dir / RECIPE_FILE).is_file():
        return {}
    try:
        recipe = load_recipe(run_dir / RECIPE_FILE, scope="export")
    except (UserError, ValueError, OSError):  # a recipe this grpo no longer reads: the default thresholds
        return {}
    return watch_args(
        recipe.training.health, recipe.rewards, recipe.generation_batch_size // recipe.grpo.num_generations
    )


def watch_args(settings: HealthSection, rewards: list[RewardSpec], groups_per_step: int) -> dict:
    """HealthWatch's arguments for a grpo run: its thresholds, groups per step, and each reward's weight under the
    name TRL logs it by (a `file.py:function` reward's function name)."""
    weights = {spec.name.split(":")[-1].rsplit("/", 1)[-1]: spec.weight for spec in rewards}
    return {"settings": settings, "groups_per_step": groups_per_step, "weights": weights}
