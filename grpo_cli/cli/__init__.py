"""The `grpo` command. Thin commands; the only place that prints user errors and chooses exit codes.

root.py holds the app and its entry point. Importing the command modules registers their commands, in the order
`grpo --help` lists them."""

# isort: off
from grpo_cli.cli.root import app, entry
from grpo_cli.cli import recipe_commands, eval_commands, run_commands, recipes, doctor  # noqa: F401
# isort: on

__all__ = ["app", "entry"]
