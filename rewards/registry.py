"""Reward lookup: a built-in name, then `package.module:function` (or TRL's `package.module.function`), then
`path/to/file.py:function`."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from rewards import gsm8k, verifiers

BUILTINS: dict[str, Callable[..., Any]] = {
    "correctness": gsm8k.correctness,
    "integer": gsm8k.integer_answer,
    "strict_format": gsm8k.strict_format,
    "soft_format": gsm8k.soft_format,
    "xml_count": gsm8k.xml_count,
    "think_format": gsm8k.think_format,
    "answer_tag": gsm8k.answer_tag_present,
    "hashes_format": gsm8k.HashesFormat,
    "marked_correctness": gsm8k.MarkedCorrectness,
    "length_target": gsm8k.LengthTarget,
    "proximity": gsm8k.Proximity,
    "exact_match": verifiers.exact_match,
    "normalized_match": verifiers.normalized_match,
    "math_correctness": verifiers.math_correctness,
}
# Built-ins that need an optional package: the module they import, and the command that installs it.
OPTIONAL: dict[str, tuple[str, str]] = {"math_correctness": ("math_verify", "pip install 'grpo-cli[math]'")}


class RewardLookupError(ValueError):
    """A reward that cannot be found or built; `field` is `name` or `kwargs` for the error's key path."""

    def __init__(self, message: str, field: str = "name"):
        super().__init__(message)
        self.field = field


class BoundReward:
    """A user's plain reward function with fixed keyword arguments (picklable, unlike a closure)."""

    def __init__(self, func: Callable[..., Any], kwargs: dict[str, Any]):
        self.func, self.kwargs = func, dict(kwargs)
        self.__name__ = getattr(func, "__name__", "reward")

    def __call__(self, *args: Any, **columns: Any) -> Any:
        return self.func(*args, **{**columns, **self.kwargs})


def resolve_rewards(specs) -> list[Callable[..., Any]]:
    """The callables for a recipe's reward entries (anything with `.name` and `.kwargs`), in order."""
    return [resolve_reward(spec.name, spec.kwargs) for spec in specs]


def resolve_reward(name: str, kwargs: dict[str, Any] | None = None) -> Callable[..., Any]:
    """Return a callable with TRL's reward signature, or raise RewardLookupError with the valid choices."""
    kwargs = kwargs or {}
    if name in BUILTINS:
        _check_installed(name)
        return _build(name, BUILTINS[name], kwargs, builtin=True)
    if ":" not in name and "." in name.strip(".") and not name.endswith(".py"):
        name = "{}:{}".format(*name.rsplit(".", 1))  # TRL's dotted form, package.module.function
    if ":" not in name:
        close = difflib.get_close_matches(name, BUILTINS, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        raise RewardLookupError(
            f"unknown reward `{name}`; {hint}built-ins: {', '.join(BUILTINS)}; "
            "or give your own as package.module:function (or package.module.function) or path/to/file.py:function"
        )
    where, _, attr = name.rpartition(":")
    module = load_user_module(where)
    if not hasattr(module, attr):
        raise RewardLookupError(f"`{where}` has no attribute `{attr}`")
    return _build(name, getattr(module, attr), kwargs, builtin=False)


def _check_installed(name: str) -> None:
    """A built-in whose optional package is missing is refused when the recipe is validated, not at its first call."""
    module, install = OPTIONAL.get(name, ("", ""))
    if module and importlib.util.find_spec(module) is None:
        package = module.replace("_", "-")
        raise RewardLookupError(f"reward `{name}` needs the {package} package, which is not installed: {install}")


def load_user_module(where: str, what: str = "reward") -> Any:
    """A user's module from `path/to/file.py` or an importable `package.module`; RewardLookupError (a ValueError)
    naming `what` was looked for when it cannot be found or fails on import. Tools and environments load the same
    way as rewards."""
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.is_file():
            raise RewardLookupError(f"{what} file not found: {path} (relative paths start at {Path.cwd()})")
        module_name = f"grpo_user_rewards_{abs(hash(str(path.resolve())))}"
        if module_name in sys.modules:
            return sys.modules[module_name]
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise RewardLookupError(f"{path} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # lets pickling (multi-process data loading) find its functions
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # the user's file failed (or exited) on import: say where
            del sys.modules[module_name]
            raise RewardLookupError(f"importing {path} failed: {_describe(exc, what)}") from None
        return module
    _working_folder_importable()
    try:
        return importlib.import_module(where)
    except ImportError as exc:
        raise RewardLookupError(f"cannot import module `{where}`: {exc}") from None
    except (Exception, SystemExit) as exc:
        raise RewardLookupError(f"importing module `{where}` failed: {_describe(exc, what)}") from None


def _working_folder_importable() -> None:
    """Modules beside the recipe import as `my_rewards:score`, as in TRL's scripts, which put the working folder
    on sys.path. Appended, not prepended: a user's folder named like an installed package must not shadow it."""
    cwd = os.getcwd()
    if not any(entry in ("", ".", cwd) for entry in sys.path):
        sys.path.append(cwd)


def _describe(exc: BaseException, what: str = "reward") -> str:
    if isinstance(exc, SystemExit):
        return f"it calls sys.exit({exc.code!r}) when imported; a {what} file must only define functions"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _build(name: str, target: Any, kwargs: dict[str, Any], builtin: bool) -> Callable[..., Any]:
    if inspect.isclass(target):
        try:
            return cast(Callable[..., Any], target(**kwargs))
        except (TypeError, ValueError) as exc:
            params = ", ".join(p for p in inspect.signature(target).parameters if p != "self")
            raise RewardLookupError(
                f"reward `{name}` rejects kwargs {kwargs}: {exc} (accepts: {params})", "kwargs"
            ) from None
    if not callable(target):
        raise RewardLookupError(f"`{name}` is not callable")
    if not kwargs:
        return target
    if builtin:
        raise RewardLookupError(f"reward `{name}` takes no kwargs; remove `kwargs`", "kwargs")
    return BoundReward(target, kwargs)
