"""The child process that compares mathematical answers with math-verify, for rewards/math_judge.py.

math-verify turns strings into sympy expressions, and sympy can be asked to work without end or to fill memory
(`9^{9^{9^9}}`, a factorial of a huge number). math-verify's own time limit is `signal.alarm`, which works only in a
process's main thread and would replace the timer that limits a whole reward call (grpo_cli/reward_guard.py).
Here it runs in the main thread of a process of its own, under a memory limit, and the parent kills this process
when an answer takes too long anyway (work inside one C call, which no signal interrupts).

Protocol: one JSON object per line on stdin, `{"gold": str, "answer": str}`; one reply per line on stdout,
`{"equal": bool}`; `{"ready": true}` first, once math-verify is imported.
"""

from __future__ import annotations

import json
import os
import signal
import sys

LIMIT_S = 1  # math-verify's own limit per parse and per comparison; whole seconds, as signal.alarm takes them
MEMORY_BYTES = 1 << 30  # address space; an honest answer needs a small fraction of it


def main() -> None:
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")  # replies only; whatever a library prints goes to stderr
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; this process ends on EOF
    _limit_memory()
    import logging

    from math_verify import parse, verify

    logging.disable(logging.WARNING)  # math-verify logs each timeout; a timeout here is an ordinary wrong answer
    replies.write('{"ready": true}\n')
    replies.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            gold = parse(request["gold"], parsing_timeout=LIMIT_S)
            answer = parse(request["answer"], parsing_timeout=LIMIT_S)
            equal = bool(gold and answer and verify(gold, answer, timeout_seconds=LIMIT_S))
        except BaseException:  # MemoryError, RecursionError, math-verify's TimeoutException (a BaseException)
            equal = False
        replies.write(json.dumps({"equal": equal}) + "\n")
        replies.flush()


def _limit_memory() -> None:
    try:
        import resource
    except ImportError:  # not POSIX: the parent's time limit still applies
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(MEMORY_BYTES, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


if __name__ == "__main__":
    main()
