"""`grpo recipes list | cp`: the shipped recipes, listed and copied so a user edits their own version."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli_parts import examples, user_errors

recipes_app = typer.Typer(help="List and copy the shipped recipes.", no_args_is_help=True)


@recipes_app.command("list", epilog=examples("grpo recipes list"))
def recipes_list() -> None:
    """Show the shipped recipes and the command each one opens with."""
    from rich.console import Console

    from grpo_cli.recipe.catalog import recipes_table

    Console(soft_wrap=True).print(recipes_table())


@recipes_app.command("cp", epilog=examples("grpo recipes cp demo my_demo.yaml", "grpo recipes cp qwen2.5/0.5b_lora configs/"))
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

