"""Whether two mathematical answers are equal, decided by math-verify in a child process (rewards/math_worker.py
says why a child). Safe from any thread: nothing here uses signals, and one lock keeps the child's replies in order.

An answer the child cannot judge in time, or that kills it (its memory limit), is unequal; the child is restarted
for the next answer. Never evaluates model output as code: math-verify parses the strings.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

DEADLINE_S = 5.0  # per answer; the child's own limits (math_worker.LIMIT_S) usually end hostile work sooner
START_S = 120.0  # importing sympy and math-verify, on a machine that may be busy training
MAX_CHARS = 4000  # of a longer text the end is kept (final answers come last); parsing time grows with length
CACHED = 4096  # verdicts kept: a group of completions often repeats one answer
DELIMITED = re.compile(r"\$|\\\(|\\\[|\\boxed|\\fbox")  # LaTeX that says where it starts: math-verify finds it

_ROOT = str(Path(__file__).resolve().parent.parent)  # the folder holding the `rewards` package
# -I: neither the working folder nor PYTHON* variables can put another `rewards` or `sympy` in the child's way.
_CHILD = (
    f"import sys\nif {_ROOT!r} not in sys.path: sys.path.append({_ROOT!r})\n"
    "from rewards.math_worker import main\nmain()\n"
)


class MathJudgeError(RuntimeError):
    """The child process could not be started: math-verify missing or broken, or no process could be made."""


class MathJudge:
    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._owner = os.getpid()  # a forked copy of this process must not share the child, nor kill it
        self._lock = threading.Lock()

    def equal(self, answer: str, gold: str) -> bool:
        """True when math-verify finds `answer` equal to `gold`; False when not, or not within DEADLINE_S."""
        request = json.dumps({"gold": gold[-MAX_CHARS:], "answer": answer[-MAX_CHARS:]}).encode() + b"\n"
        with self._lock:
            process = self._running()
            stdin, stdout = process.stdin, process.stdout
            assert stdin is not None and stdout is not None  # started with both pipes
            try:
                stdin.write(request)
                stdin.flush()
                reply = _read_line(stdout, DEADLINE_S)
            except OSError:  # the child died between answers
                reply = None
            if reply is None:  # too slow, or killed by its memory limit: a wrong answer, and a fresh child next
                self.close()
                return False
        return bool(json.loads(reply).get("equal"))

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None or self._owner != os.getpid():
            return
        process.kill()  # it may be busy in sympy; nothing it holds needs a clean exit
        process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()

    def _running(self) -> subprocess.Popen[bytes]:
        if self._owner != os.getpid():  # forked (a data-loader worker): the child belongs to the parent
            self._process, self._owner = None, os.getpid()
        if self._process is not None and self._process.poll() is None:
            return self._process
        self.close()
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # mimalloc's reservations fill RLIMIT_AS
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-c", _CHILD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:
            raise MathJudgeError(f"cannot start the math-verify process: {exc}") from None
        self._process = process
        if _read_line(process.stdout, START_S) is None:
            self.close()
            raise MathJudgeError(
                "the math-verify process did not start; check `python -c 'import math_verify'` "
                "(install: pip install 'grpo-cli[math]')"
            )
        return process


def _read_line(pipe, seconds: float) -> bytes | None:
    """One line from the child, or None when it is not complete within `seconds` or the child has exited."""
    deadline = time.monotonic() + seconds
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([pipe], [], [], remaining)[0]:
            return None
        chunk = os.read(pipe.fileno(), 65536)
        if not chunk:
            return None
        data += chunk
    return data


_JUDGE = MathJudge()
atexit.register(_JUDGE.close)


@functools.lru_cache(maxsize=CACHED)
def math_equal(answer: str, gold: str) -> bool:
    """True when the final answer `answer` is mathematically equal to `gold`: LaTeX or plain, with or without `$`
    (`\\frac{1}{2}`, `0.5`, `\\boxed{1/2}`, `[1, 2)`, `\\sqrt{2}/2`)."""
    if not answer.strip() or not gold.strip() or len(answer) > MAX_CHARS:  # that long, it is not a final answer
        return False
    return _JUDGE.equal(as_math(answer), as_math(gold))


@functools.lru_cache(maxsize=CACHED)
def math_equal_in_text(text: str, gold: str) -> bool:
    """As math_equal, for a whole text (a completion with no answer marker): math-verify takes its final answer,
    a `\\boxed{}` first, else the last expression, as TRL's `accuracy_reward` does."""
    if not text.strip() or not gold.strip():
        return False
    return _JUDGE.equal(text, as_math(gold))


def as_math(answer: str) -> str:
    """A bare answer (`\\frac12`, `[1, 2)`) in `$...$`: math-verify reads only delimited LaTeX as LaTeX, and would
    take the `2` of `[1, 2)` for the answer."""
    return answer if DELIMITED.search(answer) else f"${answer.strip()}$"
