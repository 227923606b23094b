"""Whole checkpoints and the rule that an existing run is resumed or left alone."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.layout import (
    CHECKPOINT,
    FINAL_DIR,
    METRICS_FILE,
    OWN_NAMES,
    RECIPE_FILE,
    SAMPLES_FILE,
    TRAINER_STATE_FILE,
    checkpoints,
    sft_dir,
)
from grpo_cli.runs.saved_recipe import (
    as_written,
    differences,
    record_changes,
    refuse_shape_change,
    resolved_recipe,
    saved_recipe,
    write_resolved,
)
from grpo_cli.runs.weight_files import cut_short_weights


def checkpoint_problem(folder: Path) -> str | None:
    """Why a checkpoint cannot be resumed from (an interrupted save, a damaged file), or None when it is whole."""
    # The Trainer writes trainer_state.json after the weights, optimizer and RNG states: without it the save stopped.
    state = folder / TRAINER_STATE_FILE
    if not state.is_file():
        return "no trainer_state.json (its save was interrupted)"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "trainer_state.json is cut short or damaged"
    weights = [
        p
        for p in folder.iterdir()
        if p.suffix in (".safetensors", ".bin")
        and p.name != "training_args.bin"
        and not p.name.startswith(("optimizer", "scheduler", "rng_state"))
    ]
    if not weights and not any(folder.glob("global_step*")):
        return "no model weights"
    damaged = cut_short_weights(folder)
    if damaged is not None:
        return f"{damaged.name} is cut short or damaged"
    if not (folder / "optimizer.pt").is_file() and not any(folder.glob("global_step*")):
        return "no optimizer.pt (its save was interrupted)"
    return None


def newest_complete(run_dir: Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint that can be resumed from, and one line for each newer one skipped (with why)."""
    skipped = []
    for folder in reversed(checkpoints(run_dir)):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder, skipped
        skipped.append(f"skipped {folder.name}: {problem}")
    return None, skipped


@dataclass
class RunStart:
    checkpoint: Path | None  # resume from here; None: from the first step
    notes: list[str]


def prepare_run_dir(recipe: Recipe, resume: bool) -> RunStart:
    """Create the run directory, or find the checkpoint to resume from. Never writes over a previous run or over
    files the tool did not write; a run that never saved a whole checkpoint starts again, with or without --resume."""
    run_dir, resolved = recipe.output_dir, resolved_recipe(recipe)
    _check_location(run_dir)
    foreign = sorted(p.name for p in run_dir.iterdir() if not _ours(p)) if run_dir.is_dir() else []
    if foreign:
        raise UserError(
            f"{run_dir} holds files grpo train did not write ({', '.join(foreign[:3])}); choose another "
            "training.output_dir (or name=...)",
            path="training.output_dir",
        )
    checkpoint, notes = newest_complete(run_dir) if run_dir.is_dir() else (None, [])
    finished = (run_dir / FINAL_DIR).is_dir()
    sft_started = checkpoint is None and not finished and sft_resumable(run_dir)
    if checkpoint is not None or finished or sft_started:
        if not resume:
            what = checkpoint.name if checkpoint is not None else f"a finished model in {FINAL_DIR}/"
            what = f"an SFT stage in {sft_dir(run_dir).name}/" if sft_started else what
            raise UserError(
                f"{run_dir} already holds a run ({what}); continue it with --resume, or choose another "
                "directory (training.output_dir=runs/new_name or name=new_name)",
                path="training.output_dir",
            )
        refuse_shape_change(resolved, run_dir)
        if sft_started:  # GRPO has no whole checkpoint: the SFT stage continues (or is done), GRPO starts from step 0
            _remove(_grpo_leftovers(run_dir))
            write_resolved(resolved, run_dir / RECIPE_FILE)
            return RunStart(None, notes)
        if checkpoint is None:
            raise UserError(
                f"{run_dir} holds a finished run and no checkpoint to continue; raise training.max_steps "
                "in another directory, or evaluate it: grpo eval run " + str(run_dir),
                path="training.output_dir",
            )
        changed = record_changes(resolved, checkpoint)
        return RunStart(checkpoint, notes + [f"resuming from {checkpoint.name}", *changed])
    if run_dir.is_dir() and any(run_dir.iterdir()):
        # An earlier attempt stopped before its first whole checkpoint: nothing in it can be resumed.
        _refuse_losing_another_run(resolved, run_dir, notes)
        # without --resume an unfinished SFT (its sampled examples, no whole checkpoint) starts again too
        _remove(_grpo_leftovers(run_dir) + ([] if resume else [sft_dir(run_dir)]))
        notes.append(f"{run_dir} holds no whole checkpoint from an earlier attempt: starting from step 0")
    elif resume:
        notes.append(f"nothing to resume in {run_dir}: starting from step 0")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_resolved(resolved, run_dir / RECIPE_FILE)
    except OSError as exc:
        raise UserError(
            f"cannot write the run directory {run_dir}: {exc.strerror or exc}", path="training.output_dir"
        ) from None
    return RunStart(None, notes)


def _grpo_leftovers(run_dir: Path) -> list[Path]:
    return [*checkpoints(run_dir), *(run_dir / f for f in (METRICS_FILE, SAMPLES_FILE))]


def _remove(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def sft_resumable(run_dir: Path) -> bool:
    """An SFT stage (`sft:`) that finished or saved a whole checkpoint: a run to continue, not to start again."""
    sft = sft_dir(run_dir)
    return sft.is_dir() and ((sft / FINAL_DIR).is_dir() or newest_complete(sft)[0] is not None)


def _refuse_losing_another_run(resolved: dict, run_dir: Path, skipped: list[str]) -> None:
    """Starting again deletes what an earlier attempt left (damaged checkpoints, metrics): only when that attempt ran
    this same recipe (`resolved`, as `resolved_recipe` gives it). Another recipe's run is kept for its owner to repair,
    move or delete."""
    metrics = run_dir / METRICS_FILE
    recorded = checkpoints(run_dir) or (metrics.is_file() and metrics.stat().st_size > 0)
    if not recorded:
        return
    try:
        saved = saved_recipe(run_dir)
    except UserError:
        saved = "unreadable"
    now = as_written(resolved)
    if saved == now:
        return
    if isinstance(saved, dict):
        keys = [key for key, _, _ in differences(saved, now)]
        whose = f"another recipe (it differs in {', '.join(keys[:3])}{' and more' if len(keys) > 3 else ''})"
    else:
        whose = f"a recipe whose {RECIPE_FILE} is {'missing' if saved is None else 'unreadable'}"
    damaged = f" ({skipped[0].removeprefix('skipped ')})" if skipped else f", only its {METRICS_FILE}"
    raise UserError(
        f"{run_dir} holds a run of {whose} with no whole checkpoint{damaged}; it is left as it is: train into "
        "another directory (training.output_dir=runs/new_name or name=new_name), or move or delete "
        f"{run_dir} to start again there",
        path="training.output_dir",
    )


def _check_location(run_dir: Path) -> None:
    from grpo_cli.files import check_writable_dir

    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(
            f"{run_dir} is a file, not a run directory; choose another training.output_dir", path="training.output_dir"
        )
    try:
        check_writable_dir(run_dir)
    except UserError as exc:
        raise UserError(exc.problems[0].message, path="training.output_dir") from None


def _ours(path: Path) -> bool:
    return path.name in OWN_NAMES or bool(CHECKPOINT.match(path.name))
