"""Errors a user can act on. Library code raises these; only the cli/ package prints them (cli/parts.py turns each
into one line and an exit code)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input, located as precisely as we can."""

    message: str
    path: str = ""  # dotted key path in the recipe, e.g. "training.learning_rate"
    line: int | None = None  # 1-based line in `source`
    source: str | None = None  # recipe file name, or "command line" for overrides

    def __str__(self) -> str:
        where = self.source or ""
        if where and self.line is not None:
            where = f"{where}:{self.line}"
        parts = [p for p in (where, self.path) if p]
        return ": ".join([*parts, self.message])


class UserError(Exception):
    """A mistake in what the user wrote or asked for. Printed as one line per problem, exit code 2."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | str, path: str = "", source: str | None = None):
        if isinstance(problems, str):
            problems = [Problem(problems, path=path, source=source)]
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
