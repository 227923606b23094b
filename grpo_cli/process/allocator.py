"""The allocator: on a CPU, training and evaluation run with mimalloc in place of glibc's malloc.

glibc's heap keeps the holes that freed activation and logit buffers leave, and its mmap threshold grows after each
large free, so peak RSS of a GRPO step on a CPU runs 1.6-1.8x the live tensors (benchmarks/cpu_memory.py; one run
was killed by the kernel at 24 GB). mimalloc, from PyPI as a prebuilt library (cmeel-mimalloc), measured 1.26x on a
Qwen2.5-0.5B LoRA step at about the same speed; a fixed glibc mmap threshold reached the same RSS but cost 20-50% of
the step time in page faults. The library must be loaded before Python starts, so `grpo train|preflight|eval`
re-executes itself once with it preloaded. GRPO_ALLOCATOR=system keeps glibc's malloc.

mimalloc gives freed memory back to the kernel a second after it is freed, by default with MADV_DONTNEED, which
unmaps the pages: a GRPO step frees and re-allocates the same large buffers every step, so each step faults them all
back in, each page zero-filled by the kernel. With MADV_FREE (mimalloc's purge_decommits off) the pages stay mapped
and are reused without a fault: the demo's step 15-20% shorter. But the process then holds more (peak RSS up to 11%
higher), and in a memory-capped cgroup the kernel killed a run with MADV_FREE at a cap the same run fits under
without it (benchmarks/allocator_purge.txt, benchmarks/allocator_purge_cgroup.txt). So `grpo train` turns it on
only where the plan leaves room (`keep_freed_pages`), and says so; the plan's figure stays the memory a run needs
without it. A MIMALLOC_PURGE_DECOMMITS the user set wins either way.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ALLOCATOR_ENV = "GRPO_ALLOCATOR"  # system | mimalloc (set once the process runs with it)
PURGE_DECOMMITS_ENV = "MIMALLOC_PURGE_DECOMMITS"
# Its index in mimalloc's mi_option_t from 2.1 (where it got its name) through 3.x: set only for those versions, and a
# test reads it back from the library this package installs.
MI_OPTION_PURGE_DECOMMITS = 5
# MADV_FREE only where the planned peak RSS times this fits what is available: it raised peak RSS by up to 11%.
ROOM_FOR_FREED_PAGES = 1.25
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
    return {ALLOCATOR_ENV: "mimalloc", "LD_PRELOAD": preload}


def keep_freed_pages(planned_peak: float, available: float) -> str | None:
    """In a process running with mimalloc: where `planned_peak` x ROOM_FOR_FREED_PAGES fits in `available` bytes,
    have mimalloc give freed memory back with MADV_FREE from now on, and return the line that says so. None (and
    nothing changed) where there is no room, mimalloc is not loaded, or the user set the option."""
    import ctypes

    if os.environ.get(ALLOCATOR_ENV) != "mimalloc" or PURGE_DECOMMITS_ENV in os.environ:
        return None
    if planned_peak * ROOM_FOR_FREED_PAGES > available:
        return None
    library = ctypes.CDLL(None)  # the preloaded library's symbols are the process's
    if not hasattr(library, "mi_version") or not (2, 1) <= _major_minor(library.mi_version()) < (4, 0):
        return None
    library.mi_option_set.argtypes = [ctypes.c_int, ctypes.c_long]
    library.mi_option_set(MI_OPTION_PURGE_DECOMMITS, 0)
    return (
        f"allocator: freed memory kept mapped (MADV_FREE) for faster steps: the plan's {planned_peak / 2**30:.1f} GiB "
        f"leaves room in {available / 2**30:.1f} GiB ({PURGE_DECOMMITS_ENV}=1 to turn it off)"
    )


def _major_minor(version: int) -> tuple[int, int]:
    """mimalloc's mi_version(): 217 for 2.1.7 in its older releases, 30403 for 3.4.3 in newer ones."""
    if version >= 10000:
        return version // 10000, version // 100 % 100
    return version // 100, version // 10 % 10


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
