"""A private name of a library (a function, a method, a setting) and whether the installed library still has it,
taking the arguments grpo passes. The names themselves are in seams.py."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from dataclasses import dataclass


@dataclass(frozen=True)
class Name:
    """`path` (a global, or a class's member) in `module`; what grpo does with it (`purpose`, read as "which grpo
    <purpose> it"); the keywords a call passes (`takes`) or how many arguments it passes in order (`arity`)."""

    module: str
    path: str
    purpose: str
    takes: tuple[str, ...] = ()
    arity: int | None = None
    is_callable: bool = True

    @property
    def label(self) -> str:
        return f"{self.module}.{self.path}" + (f"({', '.join(self.takes)})" if self.takes else "")


def names_table(table: dict[str, str]) -> tuple[Name, ...]:
    """{"module path": purpose} as Names; a path that is no function (a setting) ends in " =" (checked, not called)."""
    return tuple(
        Name(*key.removesuffix(" =").split(" "), purpose, is_callable=not key.endswith(" ="))
        for key, purpose in table.items()
    )


def problem(name: Name) -> str | None:
    """What is wrong with `name` in the installed library ("has no ...", "... takes ..."), or None."""
    try:
        target = importlib.import_module(name.module)
    except Exception as exc:  # a module that is gone, or a broken install's error at import
        return f"has no module {name.module} that imports ({type(exc).__name__})"
    for part in name.path.split("."):
        if not hasattr(target, part):
            return f"has no {name.module}.{name.path}"
        target = getattr(target, part)
    if name.is_callable and not callable(target):
        return f"has {name.module}.{name.path}, but not as a function"
    return signature_problem(name, target) if name.takes or name.arity else None


def signature_problem(name: Name, target) -> str | None:
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None  # a builtin without a signature: nothing to compare
    kinds = {p.kind for p in parameters}
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        gone = [key for key in name.takes if key not in {p.name for p in parameters}]
        if gone:
            return f"has {name.module}.{name.path}, but it takes no {gone[0]}"
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if name.arity and inspect.Parameter.VAR_POSITIONAL not in kinds and len(positional) != name.arity:
        return f"has {name.module}.{name.path}, but it takes {len(positional)} arguments, not the {name.arity} passed"
    return None


def problem_lines(names, library: str, checked: str) -> list[str]:
    return [
        f"{library} {found}, which grpo {name.purpose} it (checked on {checked})"
        for name in names
        if (found := problem(name))
    ]
