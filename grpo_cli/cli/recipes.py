"""Recipes as files: the shipped ones, listed and copied so a user edits their own version (`grpo recipes list | cp`),
and the JSON schema that editors check them against (`grpo schema`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.parts import examples, user_errors
from grpo_cli.cli.root import app

recipes_app = typer.Typer(help="List and copy the shipped recipes.", no_args_is_help=True)
app.add_typer(recipes_app, name="recipes")


@recipes_app.command("list", epilog=examples("grpo recipes list"))
def recipes_list() -> None:
    """Show the shipped recipes and the command each one opens with."""
    from rich.console import Console

    from grpo_cli.recipe.catalog import recipes_table

    Console(soft_wrap=True).print(recipes_table())


@recipes_app.command(
    "cp", epilog=examples("grpo recipes cp demo my_demo.yaml", "grpo recipes cp qwen2.5/0.5b_lora configs/")
)
def recipes_cp(
    name: Annotated[str, typer.Argument(help="Recipe name from `grpo recipes list`.")],
    dest: Annotated[Path, typer.Argument(help="File or existing directory to copy into.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Copy a shipped recipe so you can edit your own version."""
    from grpo_cli.recipe.catalog import copy_recipe

    with user_errors():
        target = copy_recipe(name, dest, force)
    typer.echo(f"copied {name} to {target}")


@app.command(epilog=examples("grpo schema > grpo-recipe.schema.json", "grpo schema --output .vscode/grpo.schema.json"))
def schema(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the recipe JSON schema, for editor completion and checking."""
    from grpo_cli.files import check_writable_file
    from grpo_cli.recipe.schema import Recipe

    text = json.dumps(Recipe.model_json_schema(), indent=2)
    if output is None:
        typer.echo(text)
        return
    with user_errors():
        check_writable_file(output)
        output.write_text(text + "\n", encoding="utf-8")
    typer.echo(f"wrote {output}", err=True)
