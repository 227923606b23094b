"""The root `grpo` Typer app: its own options (--version) and the console script's entry point."""

from __future__ import annotations

from typing import Annotated

import typer

from grpo_cli import __version__

app = typer.Typer(
    help="Fine-tune language models with GRPO from YAML recipes: plan memory, train with TRL, evaluate.",
    no_args_is_help=True,
    add_completion=True,  # grpo --install-completion / --show-completion
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
)


def entry() -> None:
    """The `grpo` console script and `python -m grpo_cli`: on a CPU, the commands that hold a model run with
    mimalloc (grpo_cli/process/allocator.py), then the Typer app."""
    import sys

    from grpo_cli.process.allocator import prepare_process

    prepare_process(sys.argv[1:])
    app(prog_name="grpo", obj={"own_process": True})  # a fresh process per command: its set-up is the command's


def _version(value: bool) -> None:
    if value:
        typer.echo(f"grpo {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool | None, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = None,
) -> None:
    """Fine-tune language models with GRPO from YAML recipes."""
    from grpo_cli.progress import silence_import_notes

    silence_import_notes()
