"""Checks of a recipe's `tools:` and `environment:` on the raw YAML, listed with the schema's problems: each entry
resolves, each tool can be described to the model, and no two tools share a name (the model calls them by name)."""

from __future__ import annotations

import inspect
from typing import Any

from grpo_cli.recipe.yaml_source import KeyPath


def tool_problems(data: dict[str, Any]) -> list[tuple[KeyPath, str]]:
    specs = data.get("tools")
    environment = data.get("environment")
    if not specs and not environment:
        return []
    from grpo_cli.tools.registry import (
        ToolLookupError,
        environment_methods,
        resolve_environment,
        resolve_tool,
        schema_problem,
    )

    out: list[tuple[KeyPath, str]] = []
    seen: dict[str, str] = {}  # tool name the model sees -> the entry that gave it

    def claim(name: str, entry: str, path: KeyPath) -> None:
        if name in seen:
            out.append(
                (
                    path,
                    f"`{entry}` and `{seen[name]}` are both called `{name}`; the model calls tools by "
                    "name, so rename one",
                )
            )
        seen.setdefault(name, entry)

    for index, spec in enumerate(specs if isinstance(specs, list) else []):
        spec = {"name": spec} if isinstance(spec, str) else spec
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            continue  # the schema reports the shape problem
        path = ("tools", index, "name")
        try:
            func = resolve_tool(spec["name"])
        except ToolLookupError as exc:
            out.append((path, str(exc)))
            continue
        problem = schema_problem(func)
        if problem:
            out.append((path, f"tool `{spec['name']}` {problem}"))
        claim(func.__name__, spec["name"], path)
    if isinstance(environment, dict) and isinstance(environment.get("name"), str):
        name = environment["name"]
        try:
            cls = resolve_environment(name)
        except ToolLookupError as exc:
            return out + [(("environment", "name"), str(exc))]
        for method_name, _ in environment_methods(cls):
            claim(method_name, f"{name}.{method_name}", ("environment", "name"))
        out += _constructor_problems(cls, name, environment.get("kwargs"))
    return out


def _constructor_problems(cls: type, name: str, kwargs: Any) -> list[tuple[KeyPath, str]]:
    """TRL builds one environment per rollout with no arguments; the recipe's kwargs are bound to the class."""
    try:
        inspect.signature(cls).bind(**(kwargs if isinstance(kwargs, dict) else {}))
    except TypeError as exc:
        accepts = ", ".join(p for p in inspect.signature(cls).parameters) or "no arguments"
        return [
            (
                ("environment", "kwargs"),
                f"environment `{name}` cannot be built with {kwargs or {}}: {exc} (it takes: {accepts})",
            )
        ]
    except ValueError:  # no signature to inspect (a builtin base): nothing to check
        pass
    return []
