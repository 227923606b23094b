"""Every tool runs behind a guard, as rewards do: a time limit per call, any exception turned into one short
`ToolFailure` (which TRL's tool loop, and eval's, counts as a failed call and shows the model as an error), and a
result turned into text and capped in length, so nothing a tool does can stop the run or flood the tokenizer.

The wrapper keeps the tool's name, signature and docstring: TRL and transformers build the JSON schema the model
reads from them, and TRL finds a called tool by `__name__`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MAX_MESSAGE_CHARS = 200  # of an error the model reads


class ToolFailure(Exception):
    """A tool call that did not return a result: the model sees the message, the run counts a failure."""


class EnvironmentFailure(Exception):
    """An environment's reset or get_reward failed: the run stops with a checkpoint and this one line."""


def guard_tool(func: Callable[..., Any], timeout_s: float | None, max_chars: int) -> Callable[..., Any]:
    """`func` behind the guard; async tools stay async (TRL runs them on its event loop)."""
    name = getattr(func, "__name__", "tool")
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def guarded_async(*args, **kwargs):
            try:
                result = await asyncio.wait_for(func(*args, **kwargs), timeout_s)
            except asyncio.TimeoutError:
                raise ToolFailure(f"{name} took longer than {timeout_s:g} s") from None
            except Exception as exc:
                raise ToolFailure(short_reason(func, exc)) from None
            return as_text(result, max_chars)

        return guarded_async

    @functools.wraps(func)
    def guarded(*args, **kwargs):
        try:
            with time_limit(timeout_s, f"{name} took longer than {timeout_s or 0:g} s"):
                result = func(*args, **kwargs)
        except ToolFailure:
            raise
        except (Exception, SystemExit) as exc:
            raise ToolFailure(short_reason(func, exc)) from None
        return as_text(result, max_chars)

    return guarded


def short_reason(func: Callable[..., Any], exc: BaseException) -> str:
    """`name: what went wrong`, one line; a call with wrong arguments also says which the tool takes."""
    name = getattr(func, "__name__", "tool")
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, TypeError) and "argument" in detail:
        detail += f" (arguments: {', '.join(inspect.signature(func).parameters) or 'none'})"
    return f"{name}: {detail}"[:MAX_MESSAGE_CHARS]


def as_text(result: Any, max_chars: int) -> str:
    """The text the model reads; a result longer than `max_chars` is cut, and says so."""
    text = result if isinstance(result, str) else repr(result) if isinstance(result, bytes) else str(result)
    if len(text) > max_chars:
        return text[:max_chars] + f" ... [cut: {len(text) - max_chars} more characters]"
    return text


@contextmanager
def time_limit(seconds: float | None, message: str, error: type[Exception] | None = None) -> Iterator[None]:
    """Raise `error` (ToolFailure by default) when the block runs longer than `seconds` (SIGALRM: the main thread on
    POSIX, which is where TRL and eval call synchronous tools and rewards; elsewhere the call runs unbounded). Tools
    and rewards share this one limit."""
    usable = seconds and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or seconds is None:
        yield
        return

    def expire(signum, frame):
        raise (error or ToolFailure)(message)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
