"""vLLM's engine settings, one place for every engine grpo starts (the trainer's colocated one, evaluation's) and for
the plan's figure of it: the KV cache's size, the process environment and the engine's own options.

- The engine runs in the caller's process (VLLM_ENABLE_V1_MULTIPROCESSING=0): the child process vLLM starts by
  default re-imports the caller's main module (the `grpo` entry point), and TRL's colocated sync reaches into the
  engine for every step.
- On a CPU vLLM reads its KV cache's size from VLLM_CPU_KVCACHE_SPACE (whole GiB); left unset it takes a share of the
  machine's memory, far more than a generation batch needs. grpo sizes it from the batch (`kv_cache_gib`), the
  figure `grpo plan` counts, unless the user set the variable.
- On a CPU the engine runs eagerly: vLLM's compiled graphs generate a little faster but take minutes to build at every
  start (benchmarks/vllm_cpu_dtype.txt), more than a CPU run gains back. The dtype is the caller's: the one training
  multiplies in (recipe/precision.py, inference_dtype).
"""

from __future__ import annotations

import math
import os

GIB = 2**30
KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"
# vLLM rounds each sequence up to whole blocks and keeps a scheduling margin: the KV cache is sized with room to spare.
KV_MARGIN = 1.2
# Bytes per cached value: float32's, whatever the engine's dtype (a bfloat16 cache then has twice the room).
KV_WIDTH = 4
_set_here: dict[str, str] = {}  # the values grpo put in the environment itself (not the user's)


def kv_cache_gib(layers: int, kv_dim: int, sequences: int, tokens: int) -> int:
    """Whole GiB of KV cache for `sequences` sequences of up to `tokens` tokens each (K and V in every layer), at least
    1: what VLLM_CPU_KVCACHE_SPACE takes."""
    per_token = 2 * layers * kv_dim * KV_WIDTH
    return max(1, math.ceil(sequences * tokens * per_token * KV_MARGIN / GIB))


def user_kv_cache_gib() -> int | None:
    """The VLLM_CPU_KVCACHE_SPACE the user set (not one grpo set earlier in this process), or None."""
    value = os.environ.get(KV_SPACE, "")
    return int(value) if value.isdigit() and _set_here.get(KV_SPACE) != value else None


def engine_settings(dtype: str, on_gpu: bool, kv_gib: int | None = None) -> dict:
    """Set vLLM's process-wide settings for an engine about to start here (in this process; on a CPU a KV cache of
    `kv_gib` GiB unless the user sized it) and return the options to start it with (dtype; eager on a CPU)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if not on_gpu and kv_gib is not None and user_kv_cache_gib() is None:
        os.environ[KV_SPACE] = _set_here[KV_SPACE] = str(kv_gib)
    return {"dtype": dtype, "enforce_eager": not on_gpu}
