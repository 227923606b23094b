"""The process's memory on a CPU: training and evaluation run with mimalloc in place of glibc's malloc.

glibc's heap keeps the holes that freed activation and logit buffers leave, and its mmap threshold grows after each
large free, so peak RSS of a GRPO step on a CPU runs 1.6-1.8x the live tensors (benchmarks/cpu_memory.py; one run
was killed by the kernel at 24 GB). mimalloc, from PyPI as a prebuilt library (cmeel-mimalloc), measured 1.26x on a
Qwen2.5-0.5B LoRA step at about the same speed; a fixed glibc mmap threshold reached the same RSS but cost 20-50% of
the step time in page faults. The library must be loaded before Python starts, so `grpo train|preflight|eval`
re-executes itself once with it preloaded. GRPO_ALLOCATOR=system keeps glibc's malloc. On any device, a command
whose recipe does not use bitsandbytes runs without it imported (at the end of this module).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

ALLOCATOR_ENV = "GRPO_ALLOCATOR"  # system | mimalloc (set once the process runs with it)
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


def prepare_process(argv: list[str]) -> None:
    """The `grpo` console script, before any command runs: mimalloc for the commands that hold a model on a CPU.
    The console script then tells its commands they own the process (cli/root.py), which lets them drop bitsandbytes
    (`skip_unused_bitsandbytes`)."""
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


# Leaving bitsandbytes unimported in a process whose recipe does not use it.
#
# peft imports bitsandbytes whenever it is installed, for a library only QLoRA, 8-bit base weights and the 8-bit or
# paged optimizers use. Leaving it out saves 44 MB of resident memory in every other run (torch, transformers, peft
# and trl imported: 483 MB with it, 439 MB without, on this project's CPU machine), about 2% of the demo's peak.
# Marking the module absent in `sys.modules` makes `import bitsandbytes` fail and `importlib.util.find_spec` return
# None, which is how peft, transformers and TRL decide it is not installed.
#
# This is a per-process decision that cannot be taken back once peft or transformers have looked, so it is taken only
# where the caller owns the process: the `grpo` console script (a fresh process per command) says so to its commands,
# which pass it here; a test session or a user's own Python does not.
# Libraries that decide at their own import whether bitsandbytes is there; after them, marking it absent is too late.
_DECIDERS = ("bitsandbytes", "peft", "transformers", "trl", "accelerate")


def needs_bitsandbytes(recipe: Recipe) -> bool:
    return (
        recipe.quantization is not None or "8bit" in recipe.training.optim or recipe.training.optim.startswith("paged_")
    )


def skip_unused_bitsandbytes(recipe: Recipe, own_process: bool) -> bool:
    """Mark bitsandbytes absent for this process when the recipe does not need it and the caller owns the process
    (`own_process`: the console script's commands). True when it was marked."""
    if not own_process or needs_bitsandbytes(recipe) or any(name in sys.modules for name in _DECIDERS):
        return False
    sys.modules["bitsandbytes"] = None  # type: ignore[assignment]
    return True
