"""Tool and environment lookup: a built-in name, `package.module:function` or `path/to/file.py:function` (loaded as
rewards are), checked against what TRL needs before any model loads.

TRL hands each tool to the chat template as a JSON schema built by transformers from the function's type hints and
Google-style docstring (`transformers.utils.get_json_schema`); a tool it cannot describe is refused here, with what
is missing, instead of as a traceback from inside the trainer.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from grpo_cli.tools.calculator import calculator
from grpo_cli.tools.guard import EnvironmentFailure, guard_tool, time_limit
from rewards.registry import RewardLookupError, load_user_module

BUILTINS: dict[str, Callable[..., Any]] = {"calculator": calculator}
# TRL calls these on an environment itself; every other public method is a tool the model may call.
ENVIRONMENT_HOOKS = ("reset", "get_reward")


class ToolLookupError(ValueError):
    """A tool or environment that cannot be used; the message says why and what to do."""


class ToolEntry(Protocol):
    """A `tools:` entry as the registry reads it (recipe/user_code.py's ToolSpec is one): tools/ needs no recipe."""

    @property
    def name(self) -> str: ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def max_result_chars(self) -> int: ...


class EnvironmentEntry(ToolEntry, Protocol):
    """The `environment:` entry (recipe/user_code.py's EnvironmentSpec): a class, its arguments, its guard's limits."""

    @property
    def kwargs(self) -> dict[str, Any]: ...


def resolve_tool(name: str) -> Callable[..., Any]:
    """The (unguarded) function a tool entry names."""
    if name in BUILTINS:
        return BUILTINS[name]
    if ":" not in name:
        close = difflib.get_close_matches(name, BUILTINS, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        raise ToolLookupError(
            f"unknown tool `{name}`; {hint}built-ins: {', '.join(BUILTINS)}; or give your own as "
            "package.module:function or path/to/file.py:function"
        )
    func = _attribute(name, "tool")
    if isinstance(func, functools.partial):
        # TRL finds a called tool by `__name__` and describes it from its own signature and docstring: a partial
        # has neither
        raise ToolLookupError(
            f"`{name}` is a functools.partial, not a function; define a function with type hints and a docstring "
            "that calls it, and name that function"
        )
    if not inspect.isroutine(func):
        raise ToolLookupError(
            f"`{name}` is a {type(func).__name__}, not a function; a tool is a plain (or async) function"
        )
    return func


def resolve_environment(name: str) -> type:
    """The class an `environment:` entry names, with its `reset` and its tool methods checked."""
    if ":" not in name:
        raise ToolLookupError(f"environment `{name}`: give the class as package.module:Class or path/to/file.py:Class")
    cls = _attribute(name, "environment")
    if not inspect.isclass(cls):
        raise ToolLookupError(f"`{name}` is not a class; an environment is a class with reset(**row) and tool methods")
    if not callable(getattr(cls, "reset", None)):
        raise ToolLookupError(f"environment `{name}` has no reset method; TRL calls reset(**row) before each rollout")
    for method_name, method in environment_methods(cls):
        problem = schema_problem(method)
        if problem:
            raise ToolLookupError(f"environment `{name}`: method `{method_name}` {problem}")
    return cls


def environment_methods(cls: type) -> list[tuple[str, Callable[..., Any]]]:
    """The methods TRL offers the model as tools: public functions other than its hooks."""
    return [
        (n, m)
        for n, m in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not n.startswith("_") and n not in ENVIRONMENT_HOOKS
    ]


def _attribute(name: str, what: str) -> Any:
    where, _, attr = name.rpartition(":")
    try:
        module = load_user_module(where, what)
    except RewardLookupError as exc:
        raise ToolLookupError(str(exc)) from None
    if not hasattr(module, attr):
        public = [n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n))]
        close = difflib.get_close_matches(attr, public, n=1)
        hint = f"did you mean `{close[0]}`?" if close else f"it has: {', '.join(public[:8]) or 'nothing callable'}"
        raise ToolLookupError(f"`{where}` has no `{attr}`; {hint}")
    return getattr(module, attr)


def schema_problem(func: Callable[..., Any]) -> str | None:
    """What keeps transformers from describing `func` to the model (a missing type hint or docstring), or None."""
    from transformers.utils import get_json_schema

    try:
        get_json_schema(func)
    except Exception as exc:  # transformers raises its own parsing exceptions, and TypeError/ValueError
        return "cannot be described to the model: " + str(exc).rstrip(".") + _SCHEMA_HINT
    return None


_SCHEMA_HINT = (
    "; a tool needs a type hint on every argument and a docstring with an `Args:` line per argument "
    "(transformers.utils.get_json_schema)"
)


def tool_name(func: Callable[..., Any]) -> str:
    return getattr(func, "__name__", "tool")


def guarded_tools(specs: Sequence[ToolEntry]) -> list[Callable[..., Any]]:
    """The recipe's `tools:` entries, each behind its guard."""
    return [guard_tool(resolve_tool(spec.name), spec.timeout_s, spec.max_result_chars) for spec in specs]


def guarded_environment(spec: EnvironmentEntry, warn: Callable[[str], None] = print) -> Callable[[], Any]:
    """TRL's `environment_factory`: a subclass of the user's environment whose tool methods run behind the guard and
    whose `reset` / `get_reward` stop the run with one line (not a traceback) when they fail or return what TRL
    cannot use; a NaN or infinite reward counts as not judged (None), with one warning."""
    cls = resolve_environment(spec.name)
    namespace: dict[str, Any] = {
        n: guard_tool(m, spec.timeout_s, spec.max_result_chars) for n, m in environment_methods(cls)
    }
    checks = {"reset": _reset_result, "get_reward": _RewardResult(warn)}
    for hook in ENVIRONMENT_HOOKS:
        if callable(getattr(cls, hook, None)):
            label = f"environment `{spec.name}`: {hook}"
            namespace[hook] = _guarded_hook(getattr(cls, hook), label, spec.timeout_s, checks[hook])
    guarded = type(cls.__name__, (cls,), namespace)
    return functools.partial(guarded, **spec.kwargs) if spec.kwargs else guarded


def _guarded_hook(method: Callable[..., Any], label: str, timeout_s: float | None, check) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(method):  # an async get_reward (an LLM judge): TRL awaits it on its event loop

        @functools.wraps(method)
        async def async_hook(self, *args, **kwargs):
            try:
                result = await asyncio.wait_for(method(self, *args, **kwargs), timeout_s)
            except asyncio.TimeoutError:
                raise EnvironmentFailure(f"{label} took longer than {timeout_s or 0:g} s") from None
            except Exception as exc:
                raise EnvironmentFailure(f"{label} raised {type(exc).__name__}: {str(exc)[:200]}") from None
            return check(result, label)

        return async_hook

    @functools.wraps(method)
    def hook(self, *args, **kwargs):
        try:
            with time_limit(timeout_s, f"{label} took longer than {timeout_s or 0:g} s"):
                result = method(self, *args, **kwargs)
        except Exception as exc:
            raise EnvironmentFailure(f"{label} raised {type(exc).__name__}: {str(exc)[:200]}") from None
        return check(result, label)

    return hook


def _reset_result(result: Any, label: str) -> str | None:
    """TRL appends what reset returns to the prompt's last message: text, or None for nothing."""
    if result is None or isinstance(result, str):
        return result
    raise EnvironmentFailure(
        f"{label} returned {result!r:.60} ({type(result).__name__}); return the text to add to the prompt, or None"
    )


class _RewardResult:
    """get_reward's value as TRL can use it: a number or None; NaN and infinity become None, warned about once."""

    def __init__(self, warn: Callable[[str], None]):
        self.warn, self.warned = warn, False

    def __call__(self, result: Any, label: str) -> float | None:
        if result is None:
            return None
        if not isinstance(result, numbers.Real):
            raise EnvironmentFailure(
                f"{label} returned {result!r:.60} ({type(result).__name__}); return one number (or None) per rollout"
            )
        if math.isfinite(result):
            return float(result)
        if not self.warned:
            self.warned = True
            self.warn(
                f"warning: {label} returned {result}; that rollout counts as not judged (None), as will any later "
                "one (this warning is shown once)"
            )
        return None


def tool_names(tools, environment) -> set[str]:
    """Every name the model may call: the `tools:` entries and the environment's methods."""
    names = {tool_name(resolve_tool(spec.name)) for spec in tools}
    if environment is not None:
        names |= {name for name, _ in environment_methods(resolve_environment(environment.name))}
    return names
