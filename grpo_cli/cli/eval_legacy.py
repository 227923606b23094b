"""`grpo eval`'s spellings before it had subcommands (`grpo eval --compare RUN --split test ...`), kept working for
one release: the arguments are rewritten into the subcommand that does the same (`grpo eval compare RUN
eval.split=test ...`) and one line on stderr says so. Flags the subcommands no longer carry become the overrides
they always stood for."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from grpo_cli import OLD_NAMES_UNTIL

RUN_FLAGS = {"--run": "run", "--compare": "compare", "--checkpoints": "curve"}
NOW_OVERRIDES = {
    "--split": "eval.split",
    "--batch-size": "eval.batch_size",
    "--max-new-tokens": "eval.max_new_tokens",
    "--top-p": "eval.top_p",
    "--seed": "eval.seed",
}
KEPT = set("--model --adapter --base --data --limit --protocol --samples --temperature --output --engine".split())
TAKES_VALUE = KEPT | set(RUN_FLAGS) | set(NOW_OVERRIDES)


def _refuse(line: str):
    """A mistake only the old spelling can make: one line and exit code 2, as every user mistake."""
    typer.echo(line, err=True)
    raise typer.Exit(2)


def _split(args: list[str]) -> tuple[dict[str, str], list[str], list[str], list[str]]:
    """(run flags given, kept options with their values, the moved flags as overrides, positional words)."""
    runs: dict[str, str] = {}
    kept: list[str] = []
    overrides: list[str] = []
    words: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, has_value, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if arg == "--":
            words += args[i + 1 :]
            break
        if name in TAKES_VALUE:
            if not has_value and i + 1 >= len(args):
                _refuse(f"{name} needs a value")
            value = inline if has_value else args[i + 1]
            i += 0 if has_value else 1
            if name in RUN_FLAGS:
                runs[name] = value
            elif name in NOW_OVERRIDES:
                overrides.append(f"{NOW_OVERRIDES[name]}={value}")
            else:
                kept += [name, value]
        elif arg.startswith("-"):
            kept.append(arg)  # --json, or a flag the subcommand will name as unknown
        else:
            words.append(arg)
        i += 1
    return runs, kept, overrides, words


def subcommand_args(args: list[str]) -> list[str]:
    """The old arguments as the subcommand's. Mistakes only the old spelling could make are refused in its words."""
    runs, kept, overrides, words = _split(args)
    if len(runs) > 1:
        _refuse("give one of --run, --compare and --checkpoints (each evaluates the run's final model)")
    if "--base" in kept and not ({"--compare", "--checkpoints"} & set(runs)):
        _refuse("--base names the base evaluation to reuse; give --compare or --checkpoints RUN_DIR too")
    if not runs:
        return ["model", *words, *kept, *overrides]
    if "--adapter" in kept:
        _refuse("--adapter evaluates a given adapter; --run/--compare take the run's own")
    ((flag, run_dir),) = runs.items()
    recipe = ["--recipe", words.pop(0)] if words and "=" not in words[0] else []
    return [RUN_FLAGS[flag], run_dir, *recipe, *words, *kept, *overrides]


class EvalGroup(TyperGroup):
    """`grpo eval`'s subcommands, and the old spellings routed to them with a notice."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            new = subcommand_args(args)
            typer.echo(
                f"notice: `grpo eval {' '.join(args)}` is spelled `grpo eval {' '.join(new)}` now; the old spelling "
                f"works until grpo {OLD_NAMES_UNTIL}",
                err=True,
            )
            args = new
        return super().parse_args(ctx, args)
