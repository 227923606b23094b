"""The allocator: on a CPU, training and evaluation run with mimalloc in place of glibc's malloc.

glibc's heap keeps the holes that freed activation and logit buffers leave, and its mmap threshold grows after each
large free, so peak RSS of a GRPO step on a CPU runs 1.6-1.8x the live tensors (benchmarks/cpu_memory.py; one run
was killed by the kernel at 24 GB). mimalloc, from PyPI as a prebuilt library (cmeel-mimalloc), measured 1.26x on a
Qwen2.5-0.5B LoRA step at about the same speed; a fixed glibc mmap threshold reached the same RSS but cost 20-50% of
the step time in page faults. The library must be loaded before Python starts, so `grpo train|preflight|eval`
re-executes itself once with it preloaded. GRPO_ALLOCATOR=system keeps glibc's malloc.

mimalloc gives freed memory back to the kernel a second after it is freed. By default it does so with
MADV_DONTNEED, which unmaps the pages: a GRPO step frees and re-allocates the same large buffers every step, so each
step faulted them all back in, each page zero-filled by the kernel.
`MIMALLOC_PURGE_DECOMMITS=0` gives them back with MADV_FREE instead: the kernel takes them when it needs the memory,
and until then mimalloc reuses them without a fault (benchmarks/allocator_purge.txt). A value the user set wins.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ALLOCATOR_ENV = "GRPO_ALLOCATOR"  # system | mimalloc (set once the process runs with it)
MIMALLOC_OPTIONS = {"MIMALLOC_PURGE_DECOMMITS": "0"}  # purge with MADV_FREE: freed pages reused without a fault
HEAVY_COMMANDS = ("train", "preflight", "eval")


def mimalloc_library() -> Path | None:
    """libmimalloc.so from the cmeel-mimalloc wheel, found without importing anything."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("cmeel-mimalloc")
    except PackageNotFoundError:
        return None
    for file in dist.files or []:
        if file.name == "libmimalloc.so":
            path = Path(dist.locate_file(file))
            return path if path.is_file() else None
    return None


def preload_env() -> dict[str, str] | None:
    """The environment that runs a process with mimalloc, or None where it does not apply: not Linux, a GPU machine
    (host memory is not what runs out there), the library missing, or GRPO_ALLOCATOR already set."""
    if sys.platform != "linux" or os.environ.get(ALLOCATOR_ENV) or os.path.exists("/proc/driver/nvidia/version"):
        return None
    library = mimalloc_library()
    if library is None:
        return None
    preload = " ".join(p for p in (str(library), os.environ.get("LD_PRELOAD", "")) if p)
    options = {name: os.environ.get(name, value) for name, value in MIMALLOC_OPTIONS.items()}
    return {ALLOCATOR_ENV: "mimalloc", "LD_PRELOAD": preload, **options}


def prepare_process(argv: list[str]) -> None:
    """The `grpo` console script, before any command runs: mimalloc for the commands that hold a model on a CPU.
    The console script then tells its commands they own the process (cli/root.py), which lets them drop bitsandbytes
    (process/optional_libraries.py)."""
    reexec_with_mimalloc(argv)


def reexec_with_mimalloc(argv: list[str]) -> None:
    """For the commands that hold a model, replace this process by the same command with mimalloc preloaded."""
    if not argv or argv[0] not in HEAVY_COMMANDS:
        return
    env = preload_env()
    if env is not None:
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", "grpo_cli", *argv], {**os.environ, **env})


def peak_rss() -> float:
    """Peak resident set of this process in bytes (ru_maxrss is KiB on Linux, bytes on macOS)."""
    import resource

    scale = 1 if sys.platform == "darwin" else 1024
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale)
