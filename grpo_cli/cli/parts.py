"""What every command shares: argument types, help epilogs, and the boundary where a user's mistake becomes one line
and an exit code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.errors import UserError


def examples(*lines: str) -> str:
    """A command's help epilog: each example command, with what it does after a `|`."""
    shown = [f"`{cmd}`" + (f"  ({note})" if note else "") for cmd, _, note in (line.partition("|") for line in lines)]
    return "**Examples**\n\n" + "\n\n".join(shown)


RecipeArg = Annotated[Path, typer.Argument(help="Recipe YAML file.", show_default=False)]
OverridesArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="key.path=value overrides, validated like the file (e.g. training.max_steps=20).", show_default=False
    ),
]


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a user's mistake into one line per problem and exit code 2, never a traceback."""
    try:
        yield
    except UserError as exc:
        for problem in exc.problems:
            typer.echo(str(problem), err=True)
        raise typer.Exit(exc.exit_code) from None
