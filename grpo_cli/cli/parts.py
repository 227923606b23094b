"""What every command shares: argument types, help epilogs, and the boundary where a user's mistake becomes one line
and an exit code."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, redirect_stdout
from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.errors import UserError


def own_process(ctx: typer.Context) -> bool:
    """Whether the command runs in a process of its own (the console script, cli/root.py), not inside a test or a
    user's Python: only then may it drop libraries for the whole process (process/optional_libraries.py)."""
    return bool(ctx.obj and ctx.obj.get("own_process"))


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
def user_errors(json_document: bool = False) -> Iterator[None]:
    """Turn a user's mistake into one line per problem and exit code 2, never a traceback. With `json_document`
    (--json), stdout is kept for the document the command prints afterwards: whatever prints while it works (a
    user's reward, tool or environment) goes to stderr."""
    with _file_size_limit() as limit_hit:
        try:
            with redirect_stdout(sys.stderr) if json_document else nullcontext():
                yield
        except UserError as exc:
            for problem in exc.problems:
                typer.echo(str(problem), err=True)
            raise typer.Exit(exc.exit_code) from None
        except typer.Exit:
            raise
        except Exception as exc:
            # A name the user chose (a run name, --output, a file argument) longer than the file system allows: the
            # same mistake whichever command meets it first, so it is turned into its line here, once.
            if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
                typer.echo(_too_long_line(exc.filename), err=True)
                raise typer.Exit(2) from None
            # A file past the process's file-size limit (`ulimit -f`): torch and safetensors report the short
            # write in their own words, so the kernel's signal says which failure it was.
            if limit_hit() or (isinstance(exc, OSError) and exc.errno == errno.EFBIG):
                typer.echo(_file_size_line(exc), err=True)
                raise typer.Exit(2) from None
            raise


@contextmanager
def _file_size_limit() -> Iterator:
    """While the block runs, note whether a write went past RLIMIT_FSIZE (the kernel's SIGXFSZ, which Python
    ignores: the write then fails with EFBIG); yields the question. Signals can be watched from the main thread
    only; elsewhere the question answers no."""
    import signal
    import threading

    hits: list[int] = []
    watch = hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGXFSZ, lambda *_: hits.append(1)) if watch else None
    try:
        yield lambda: bool(hits)
    finally:
        if watch:
            signal.signal(signal.SIGXFSZ, previous)


def _file_size_line(exc: Exception) -> str:
    """The one line for a write stopped by the file-size limit; what was written before it stays as it was."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    shown = "" if limit == resource.RLIM_INFINITY else f" ({limit} bytes)"
    file = getattr(exc, "filename", None)
    what = f"{file} grew" if file else "a file grew"
    return (
        f"{what} past this process's file-size limit{shown} and was not written in full; files finished before it "
        "are kept: raise the limit (`ulimit -f unlimited`) and run the command again (grpo train: with --resume)"
    )


def _too_long_line(path) -> str:
    """The one line for a path with a component longer than the file system allows (usually 255 bytes)."""
    parts = Path(os.fsdecode(path or "")).parts
    longest = max(parts, key=lambda part: len(os.fsencode(part)), default="")
    shown = f"{longest[:40]}...({len(os.fsencode(longest))} bytes)" if len(longest) > 40 else longest or "a file name"
    return f"{shown} is longer than the file system allows for a name; choose a shorter name"
