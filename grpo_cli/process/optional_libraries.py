"""Leaving bitsandbytes unimported in a process whose recipe does not use it.

peft imports bitsandbytes whenever it is installed, for a library only QLoRA, 8-bit base weights and the 8-bit or
paged optimizers use. Leaving it out saves 44 MB of resident memory in every other run (torch, transformers, peft and
trl imported: 483 MB with it, 439 MB without, on this project's CPU machine), about 2% of the demo's peak. Marking the
module absent in `sys.modules` makes `import bitsandbytes` fail and `importlib.util.find_spec` return None, which is
how peft, transformers and TRL decide it is not installed.

This is a per-process decision that cannot be taken back once peft or transformers have looked, so it is taken only
where the caller owns the process: the `grpo` console script (a fresh process per command) says so to its commands,
which pass it here; a test session or a user's own Python does not.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo_cli.recipe.model_section import QuantizationSection

# Libraries that decide at their own import whether bitsandbytes is there; after them, marking it absent is too late.
_DECIDERS = ("bitsandbytes", "peft", "transformers", "trl", "accelerate")


def needs_bitsandbytes(quantization: QuantizationSection | None, optim: str) -> bool:
    """Quantized base weights, or an 8-bit or paged optimizer (training.optim)."""
    return quantization is not None or "8bit" in optim or optim.startswith("paged_")


def skip_unused_bitsandbytes(quantization: QuantizationSection | None, optim: str, own_process: bool) -> bool:
    """Mark bitsandbytes absent for this process when the recipe (its `quantization` and training.optim) does not
    need it and the caller owns the process (`own_process`: the console script's commands). True when it was
    marked."""
    if not own_process or needs_bitsandbytes(quantization, optim) or any(name in sys.modules for name in _DECIDERS):
        return False
    sys.modules["bitsandbytes"] = None  # type: ignore[assignment]
    return True
