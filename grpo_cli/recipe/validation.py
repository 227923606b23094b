"""Load a recipe file (plus overrides and typed options) into a `Recipe`, or raise one `UserError` listing every
problem. What is checked beyond the schema depends on what the command reads (`SCOPES`)."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from grpo_cli.errors import Problem, UserError
from grpo_cli.recipe.checks import path_problems, reward_problems, trl_problems
from grpo_cli.recipe.cross_field import cross_field_problems
from grpo_cli.recipe.renamed_keys import move_renamed, renamed_overrides
from grpo_cli.recipe.reward_model_checks import reward_model_problems
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.sft_checks import adapter_problems, sft_file_problems
from grpo_cli.recipe.tool_checks import tool_problems
from grpo_cli.recipe.yaml_source import (
    COMMAND_LINE,
    KeyPath,
    apply_options,
    apply_overrides,
    format_path,
    line_of,
    read_yaml,
)

Scope = Literal["train", "preflight", "eval", "plan", "export", "audit"]
# What each command reads, beyond the model it always names. train (and validate) checks everything.
SCOPES: dict[str, frozenset[str]] = {
    "train": frozenset({"data", "eval_data", "rewards", "tools", "trl", "launch"}),
    "preflight": frozenset({"data", "rewards", "tools", "trl"}),
    "eval": frozenset({"eval_data", "tools"}),
    "plan": frozenset(),
    "export": frozenset(),
    "audit": frozenset({"data", "rewards"}),
}


def load_recipe(
    file: str | Path | None,
    overrides: list[str] | None = None,
    *,
    options: dict[str, Any] | None = None,
    scope: Scope = "train",
) -> Recipe:
    """Read, merge `key.path=value` overrides then typed `options` (command-line flags), validate.

    `file=None`: a recipe made of options alone (`grpo eval model --model ...`). Nothing heavier than pydantic is
    imported unless the scope reads a `trl:` section."""
    reads = SCOPES[scope]
    if file is None:
        data, lines = {}, {}
    else:
        file = Path(file)
        data, lines = read_yaml(file)
        move_renamed(data, lines, str(file))
    written = apply_overrides(data, renamed_overrides(list(overrides or []))) | apply_options(data, options or {})

    def problem(path: KeyPath, message: str) -> Problem:
        # An error on an override's key, or inside a section only an override named (not in the file: a required
        # key missing beside the one it set), is the command line's, not line 1 of the file's.
        from_command_line = file is None or (
            bool(path)
            and any(
                path[: len(o)] == o
                or any(o[:end] == path[:end] and path[:end] not in lines for end in range(1, len(path) + 1))
                for o in written
            )
        )
        if from_command_line:
            return Problem(message, format_path(path), source=COMMAND_LINE)
        return Problem(message, format_path(path), line_of(lines, path), str(file))

    # The task protocol scores with the recipe's rewards: each must resolve, as for training.
    section = data.get("eval")
    scores = "rewards" in reads or (scope == "eval" and isinstance(section, dict) and section.get("protocol") == "task")
    # Files and rewards are checked on the raw YAML so their problems are listed with the schema's.
    found = path_problems(data, reads) + (reward_problems(data) if scores else [])
    found += tool_problems(data) if "tools" in reads else []
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise UserError([problem(path, msg) for path, msg in _translate(exc) + found]) from None
    recipe._source = file  # None: assembled from command-line options

    if "rewards" in reads and not recipe.rewards:
        found.append(
            (("rewards",), "required key is missing: training needs at least one reward, e.g. rewards: [correctness]")
        )
    found += cross_field_problems(recipe)
    if scores:  # offline: config.json, not weights
        found += reward_model_problems(recipe.rewards, recipe.data, recipe.grpo)
    if "data" in reads:  # the files training reads first: examples for the SFT stage, the adapter to start from
        found += sft_file_problems(recipe.sft) + adapter_problems(recipe.model, recipe.lora)
    if "trl" in reads and recipe.trl and not found:
        found += trl_problems(recipe)
    if found:
        raise UserError([problem(path, msg) for path, msg in found])
    return recipe


def with_changes(recipe: Recipe, changes: dict[str, Any]) -> Recipe:
    """The recipe with `{"key.path": value}` changes, validated like a file (schema and cross-field checks).

    A key that is not a schema field is a bug in the caller (a renamed field), never a user mistake: KeyError."""
    for key in changes:
        if not is_schema_field(tuple(key.split("."))):
            raise KeyError(f"`{key}` is not a recipe field")
    data = recipe.model_dump(mode="json")
    apply_options(data, changes)
    try:
        changed = Recipe.model_validate(data)
    except ValidationError as exc:
        raise UserError(
            [Problem(msg, format_path(path), source=COMMAND_LINE) for path, msg in _translate(exc)]
        ) from None
    changed._source = recipe._source
    problems = cross_field_problems(changed)
    if problems:
        raise UserError([Problem(msg, format_path(path), source=COMMAND_LINE) for path, msg in problems])
    return changed


def is_schema_field(path: KeyPath) -> bool:
    return bool(path) and path[-1] in _valid_keys(path[:-1])


# ---------------------------------------------------------------- pydantic errors -> user messages


def _translate(exc: ValidationError) -> list[tuple[KeyPath, str]]:
    out = []
    for err in exc.errors():
        loc: KeyPath = tuple(err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            msg = _unknown_key_message(loc)
        elif kind == "missing":
            msg = "required key is missing"
        else:
            msg = err["msg"].rstrip(".")
            if "input" in err and not isinstance(err["input"], (dict, list)):
                msg += f" (got {err['input']!r})"
        out.append((loc, msg))
    return out


def _unknown_key_message(loc: KeyPath) -> str:
    key = str(loc[-1])
    valid = _valid_keys(loc[:-1])
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f"did you mean `{close[0]}`?" if close else "valid keys: " + ", ".join(valid)
    return f"unknown key `{key}`; {hint}"


def _valid_keys(parent: KeyPath) -> list[str]:
    """Field names of the schema section at `parent` (walking through Optional and list annotations)."""
    model: Any = Recipe
    for part in parent:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return []
        model = _unwrap(model.model_fields[part].annotation)
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _unwrap(annotation: Any) -> Any:
    for arg in typing.get_args(annotation) or ():
        inner = _unwrap(arg)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return annotation
