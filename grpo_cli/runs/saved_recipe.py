"""The resolved recipe a run directory keeps: written at each start, read back on resume, the changes between
the two recorded, and a change of model or adapter shape refused."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from grpo_cli.errors import UserError
from grpo_cli.recipe.renamed_keys import move_renamed
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.layout import (
    RECIPE_CHANGES_FILE,
    RECIPE_FILE,
    checkpoint_step,
)

# Resuming restores weights and optimizer states shaped by these: a checkpoint cannot follow a change to them.
SHAPE_KEYS = ("model.name", "lora", "lora.r", "lora.target_modules", "quantization", "quantization.bits", "sft")


def saved_recipe(run_dir: Path) -> dict | None:
    """The resolved recipe the run directory was last started with, as written (None: there is none); one line
    when it no longer reads as a recipe, since without it a checkpoint cannot be checked against the recipe."""
    saved_file = run_dir / RECIPE_FILE
    try:
        saved = (yaml.safe_load(saved_file.read_text(encoding="utf-8")) or {}) if saved_file.is_file() else None
        reason = f"holds a {type(saved).__name__}, not a recipe"
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        saved, mark = "", getattr(exc, "problem_mark", None)
        reason = f"does not parse{f' (line {mark.line + 1})' if mark else ''}: {getattr(exc, 'problem', exc)}"
    if isinstance(saved, dict):
        move_renamed(saved, {}, str(saved_file), notify=False)  # written before a key was renamed
        return saved
    if saved is None:
        return None
    raise UserError(
        f"{reason}; it is the recipe this run was trained with, needed to check that your recipe still fits its "
        "checkpoints: restore it, or train into another directory (training.output_dir=runs/new_name)",
        source=str(saved_file),
    )


def refuse_shape_change(resolved: dict, run_dir: Path) -> None:
    """A resumed run keeps the model, the method and the adapter shape its checkpoint holds (`resolved`: the recipe
    as `resolved_recipe` gives it, which fills in none of SHAPE_KEYS)."""
    saved = saved_recipe(run_dir)
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


def record_changes(resolved: dict, checkpoint: Path) -> list[str]:
    """A resumed run may change settings that do not shape its checkpoint (rewards, sampling, batches): recipe.yaml
    then says what runs from now on (`resolved`), recipe_changes.jsonl each change from its step. Returns the note to
    print."""
    run_dir = checkpoint.parent
    saved = saved_recipe(run_dir)
    if saved is None:
        return []
    now = as_written(resolved)
    try:  # the saved recipe as this grpo writes it: a field added since, at its default, is no change
        saved = as_written(resolved_recipe(Recipe.model_validate(saved)))
    except ValueError:  # one this schema no longer accepts (pydantic's error is a ValueError): compared as written
        pass
    changes = {key: [before, after] for key, before, after in differences(saved, now)}
    if not changes:
        return []
    step = checkpoint_step(checkpoint)
    with (run_dir / RECIPE_CHANGES_FILE).open("a", encoding="utf-8") as out:
        out.write(json.dumps({"from_step": step + 1, "changes": changes}) + "\n")
    write_resolved(resolved, run_dir / RECIPE_FILE)
    shown = "; ".join(f"{key}: {_show(b)} -> {_show(a)}" for key, (b, a) in list(changes.items())[:4])
    more = f" and {len(changes) - 4} more" if len(changes) > 4 else ""
    return [f"changed from step {step + 1} on: {shown}{more} (kept in {RECIPE_CHANGES_FILE})"]


def differences(before, after, prefix: str = ""):
    """(dotted key, before, after) for every leaf that differs between two nested mappings."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in list(before) + [k for k in after if k not in before]:
            yield from differences(before.get(key), after.get(key), f"{prefix}{key}.")
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
    write_resolved(resolved_recipe(recipe), path)


def write_resolved(resolved: dict, path: Path) -> None:
    path.write_text(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True), encoding="utf-8")


def as_written(resolved: dict) -> dict:
    """`resolved` as it reads back from recipe.yaml (YAML's types), to compare with a saved one."""
    return yaml.safe_load(yaml.safe_dump(resolved, sort_keys=False))


def resolved_recipe(recipe: Recipe) -> dict:
    """The whole recipe as recipe.yaml holds it: every section dumped, with what it leaves implicit filled in."""
    resolved = recipe.model_dump(mode="json")
    if recipe.eval.protocol == "task":  # an unset source means the training data's: written out, it would be GSM8K's
        resolved["eval"]["source"], resolved["eval"]["config"] = recipe.eval.task_data(recipe.data)
    resolved["name"] = recipe.run_name
    resolved["training"]["output_dir"] = str(recipe.output_dir)
    return resolved
