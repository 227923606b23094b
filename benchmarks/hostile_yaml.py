"""Hostile recipe files against `grpo validate`: wall time and peak memory of the whole process, exit code, message.

    python benchmarks/hostile_yaml.py
Targets (issue: a newcomer's first ten minutes): each refused in under 1 s with exit code 2 and one line,
under 200 MB peak RSS. The files are the ones tests/test_hostile_input.py checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_hostile_input import HOSTILE  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'file':<16} {'bytes':>11} {'exit':>4} {'wall s':>7} {'in-process s':>12} {'peak RSS MB':>11}  message")
        for name, (content, _) in sorted(HOSTILE.items()):
            path = Path(tmp) / f"{name}.yaml"
            path.write_bytes(content)
            code = (
                "import resource, sys, time; from grpo_cli.recipe.yaml_source import read_yaml;"
                "from grpo_cli.errors import UserError; t = time.perf_counter()\n"
                f"try: read_yaml(__import__('pathlib').Path({str(path)!r}))\n"
                "except UserError: pass\n"
                "print(time.perf_counter() - t)"
            )
            inner = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip())
            started = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-m", "grpo_cli", "validate", str(path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            stderr = child.stderr.read()
            _, status, usage = os.wait4(child.pid, 0)  # this child's own peak RSS (KiB on Linux)
            wall = time.perf_counter() - started
            code = os.waitstatus_to_exitcode(status)
            message = stderr.strip().replace(str(path), name)
            print(
                f"{name:<16} {len(content):>11,} {code:>4} {wall:>7.2f} {inner:>12.3f} "
                f"{usage.ru_maxrss / 1024:>11.0f}  {message}"
            )


if __name__ == "__main__":
    main()
