"""Whole checkpoints and the rule that an existing run is resumed or left alone."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from grpo_cli.errors import UserError
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.layout import (
    CHECKPOINT,
    FINAL_DIR,
    METRICS_FILE,
    OWN_NAMES,
    RECIPE_CHANGES_FILE,
    RECIPE_FILE,
    SAMPLES_FILE,
    TRAINER_STATE_FILE,
    WARMUP_DIR,
    checkpoint_step,
    checkpoints,
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


# Resuming restores weights and optimizer states shaped by these: a checkpoint cannot follow a change to them.
SHAPE_KEYS = ("model.name", "lora", "lora.r", "lora.target_modules", "quantization", "quantization.bits", "warmup")


@dataclass
class RunStart:
    checkpoint: Path | None  # resume from here; None: from the first step
    notes: list[str]


def prepare_run_dir(recipe: Recipe, resume: bool) -> RunStart:
    """Create the run directory, or find the checkpoint to resume from. Never writes over a previous run or over
    files the tool did not write; a run that never saved a whole checkpoint starts again, with or without --resume."""
    run_dir, resolved = recipe.output_dir, _resolved(recipe)
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
    warmed = checkpoint is None and not finished and warmup_resumable(run_dir)
    if checkpoint is not None or finished or warmed:
        if not resume:
            what = checkpoint.name if checkpoint is not None else f"a finished model in {FINAL_DIR}/"
            what = f"a warm-up in {WARMUP_DIR}/" if warmed else what
            raise UserError(
                f"{run_dir} already holds a run ({what}); continue it with --resume, or choose another "
                "directory (training.output_dir=runs/new_name or name=new_name)",
                path="training.output_dir",
            )
        _refuse_shape_change(resolved, run_dir)
        if warmed:  # GRPO has no whole checkpoint: the warm-up continues (or is done), GRPO starts from step 0
            _remove(_grpo_leftovers(run_dir))
            _write_resolved(resolved, run_dir / RECIPE_FILE)
            return RunStart(None, notes)
        if checkpoint is None:
            raise UserError(
                f"{run_dir} holds a finished run and no checkpoint to continue; raise training.max_steps "
                "in another directory, or evaluate it: grpo eval --run " + str(run_dir),
                path="training.output_dir",
            )
        changed = _record_changes(resolved, checkpoint)
        return RunStart(checkpoint, notes + [f"resuming from {checkpoint.name}", *changed])
    if run_dir.is_dir() and any(run_dir.iterdir()):
        # An earlier attempt stopped before its first whole checkpoint: nothing in it can be resumed.
        _refuse_losing_another_run(resolved, run_dir, notes)
        # without --resume an unfinished warm-up (its sampled examples, no whole checkpoint) starts again too
        _remove(_grpo_leftovers(run_dir) + ([] if resume else [run_dir / WARMUP_DIR]))
        notes.append(f"{run_dir} holds no whole checkpoint from an earlier attempt: starting from step 0")
    elif resume:
        notes.append(f"nothing to resume in {run_dir}: starting from step 0")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        _write_resolved(resolved, run_dir / RECIPE_FILE)
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


def warmup_resumable(run_dir: Path) -> bool:
    """A warm-up (`warmup:`) that finished or saved a whole checkpoint: a run to continue, not to start again."""
    warmup = run_dir / WARMUP_DIR
    return warmup.is_dir() and ((warmup / FINAL_DIR).is_dir() or newest_complete(warmup)[0] is not None)


def _refuse_losing_another_run(resolved: dict, run_dir: Path, skipped: list[str]) -> None:
    """Starting again deletes what an earlier attempt left (damaged checkpoints, metrics): only when that attempt ran
    this same recipe (`resolved`, as `_resolved` gives it). Another recipe's run is kept for its owner to repair, move
    or delete."""
    metrics = run_dir / METRICS_FILE
    recorded = checkpoints(run_dir) or (metrics.is_file() and metrics.stat().st_size > 0)
    if not recorded:
        return
    try:
        saved = _saved_recipe(run_dir)
    except UserError:
        saved = "unreadable"
    now = _as_written(resolved)
    if saved == now:
        return
    if isinstance(saved, dict):
        keys = [key for key, _, _ in _differences(saved, now)]
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


def _saved_recipe(run_dir: Path) -> dict | None:
    """The resolved recipe the run directory was last started with, as written (None: there is none); one line
    when it no longer reads as a recipe, since without it a checkpoint cannot be checked against the recipe."""
    saved_file = run_dir / RECIPE_FILE
    try:
        saved = (yaml.safe_load(saved_file.read_text(encoding="utf-8")) or {}) if saved_file.is_file() else None
        reason = f"holds a {type(saved).__name__}, not a recipe"
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        saved, mark = "", getattr(exc, "problem_mark", None)
        reason = f"does not parse{f' (line {mark.line + 1})' if mark else ''}: {getattr(exc, 'problem', exc)}"
    if saved is None or isinstance(saved, dict):
        return saved
    raise UserError(
        f"{reason}; it is the recipe this run was trained with, needed to check that your recipe still fits its "
        "checkpoints: restore it, or train into another directory (training.output_dir=runs/new_name)",
        source=str(saved_file),
    )


def _refuse_shape_change(resolved: dict, run_dir: Path) -> None:
    """A resumed run keeps the model, the method and the adapter shape its checkpoint holds (`resolved`: the recipe
    as `_resolved` gives it, which fills in none of SHAPE_KEYS)."""
    saved = _saved_recipe(run_dir)
    if saved is None:
        return
    for key in SHAPE_KEYS:
        before, after = _at(saved, key), _at(resolved, key)
        if before != after and not (isinstance(before, dict) and isinstance(after, dict)):
            raise UserError(
                f"{run_dir} was trained with {key}={_show(before)}, the recipe now says {_show(after)}; a "
                f"checkpoint cannot follow that change: set {key} back to resume, or train into another "
                "directory",
                path=key,
            )


def _record_changes(resolved: dict, checkpoint: Path) -> list[str]:
    """A resumed run may change settings that do not shape its checkpoint (rewards, sampling, batches): recipe.yaml
    then says what runs from now on (`resolved`), recipe_changes.jsonl each change from its step. Returns the note to
    print."""
    run_dir = checkpoint.parent
    saved = _saved_recipe(run_dir)
    if saved is None:
        return []
    now = _as_written(resolved)
    try:  # the saved recipe as this grpo writes it: a field added since, at its default, is no change
        saved = _as_written(_resolved(Recipe.model_validate(saved)))
    except ValueError:  # one this schema no longer accepts (pydantic's error is a ValueError): compared as written
        pass
    changes = {key: [before, after] for key, before, after in _differences(saved, now)}
    if not changes:
        return []
    step = checkpoint_step(checkpoint)
    with (run_dir / RECIPE_CHANGES_FILE).open("a", encoding="utf-8") as out:
        out.write(json.dumps({"from_step": step + 1, "changes": changes}) + "\n")
    _write_resolved(resolved, run_dir / RECIPE_FILE)
    shown = "; ".join(f"{key}: {_show(b)} -> {_show(a)}" for key, (b, a) in list(changes.items())[:4])
    more = f" and {len(changes) - 4} more" if len(changes) > 4 else ""
    return [f"changed from step {step + 1} on: {shown}{more} (kept in {RECIPE_CHANGES_FILE})"]


def _differences(before, after, prefix: str = ""):
    """(dotted key, before, after) for every leaf that differs between two nested mappings."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in list(before) + [k for k in after if k not in before]:
            yield from _differences(before.get(key), after.get(key), f"{prefix}{key}.")
    elif before != after:
        yield prefix.rstrip("."), before, after


def _at(data: dict, key: str):
    for part in key.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _show(value) -> str:
    return "none" if value is None else "a section" if isinstance(value, dict) else str(value)


def write_resolved_recipe(recipe: Recipe, path: Path) -> None:
    """The recipe with every default and override filled in, name and output_dir too: it reloads as the same run."""
    _write_resolved(_resolved(recipe), path)


def _write_resolved(resolved: dict, path: Path) -> None:
    path.write_text(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True), encoding="utf-8")


def _as_written(resolved: dict) -> dict:
    """`resolved` as it reads back from recipe.yaml (YAML's types), to compare with a saved one."""
    return yaml.safe_load(yaml.safe_dump(resolved, sort_keys=False))


def _resolved(recipe: Recipe) -> dict:
    """The whole recipe as recipe.yaml holds it: every section dumped, with what it leaves implicit filled in."""
    resolved = recipe.model_dump(mode="json")
    if recipe.eval.protocol == "task":  # an unset source means the training data's: written out, it would be GSM8K's
        resolved["eval"]["source"], resolved["eval"]["config"] = recipe.eval.task_data(recipe.data)
    resolved["name"] = recipe.run_name
    resolved["training"]["output_dir"] = str(recipe.output_dir)
    return resolved
