"""Which mixed precision a run trains in: the recipe's `model.mixed_precision`, with `auto` decided by the hardware.

Mixed precision runs the matmuls in bfloat16 (or float16) under autocast while the weights, gradients and optimizer
stay in `model.dtype`. It pays only where the hardware multiplies bfloat16 natively (LoRA steps in both precisions
on an AVX512-BF16 CPU: benchmarks/train_overhead.txt; matmul throughput by dtype: benchmarks/cpu_limits.txt). On a
CPU without it, oneDNN emulates bfloat16 and a step is several times slower than in float32. TRL's own default
(`bf16=True` whatever the hardware) would take that slow path on such CPUs; `auto` does not.
"""

from __future__ import annotations

from pathlib import Path

from grpo_cli.recipe.schema import Recipe

# /proc/cpuinfo flags of x86 CPUs whose vector units multiply bfloat16 (Zen 4 and later, Cooper Lake, Sapphire Rapids).
NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# Half-precision weights train under the matching autocast.
BY_WEIGHTS = {"bfloat16": "bf16", "float16": "fp16"}


def cpu_computes_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True when the CPU has bfloat16 dot-product instructions (Linux x86; elsewhere False, so float32 stays)."""
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return bool(NATIVE_BF16_CPU_FLAGS & set(line.split(":", 1)[-1].split()))
    except OSError:
        pass
    return False


def mixed_precision(recipe: Recipe, native_bf16: bool) -> str:
    """`bf16`, `fp16` or `no` for this recipe on hardware that does (or does not) compute bfloat16 natively."""
    chosen = recipe.model.mixed_precision
    if chosen != "auto":
        return chosen
    if recipe.model.dtype in BY_WEIGHTS:
        return BY_WEIGHTS[recipe.model.dtype]
    return "bf16" if native_bf16 else "no"


def mixed_precision_here(recipe: Recipe, on_cpu: bool) -> str:
    """`mixed_precision` on this machine's hardware (asked only when `auto` meets float32 weights)."""
    if recipe.model.mixed_precision != "auto" or recipe.model.dtype != "float32":
        return mixed_precision(recipe, native_bf16=False)
    if on_cpu:
        return mixed_precision(recipe, cpu_computes_bf16())
    import torch  # only the GPU's answer needs it: recipe/ and `grpo plan` run without torch

    return mixed_precision(recipe, bool(torch.cuda.is_bf16_supported()))


def inference_dtype(recipe: Recipe, on_cpu: bool) -> str:
    """The dtype evaluation generates in: the one training multiplies in. Without gradients nothing needs float32
    master weights, so the weights themselves are cast once (autocast would cast every weight again at every decode
    step); throughput and accuracy in both dtypes: benchmarks/eval_precision.txt."""
    mixed = mixed_precision_here(recipe, on_cpu)
    return {"bf16": "bfloat16", "fp16": "float16"}.get(mixed, recipe.model.dtype)


def precision_label(recipe: Recipe) -> str:
    """`float32`, `float32 weights, bf16 matmuls` or (LoRA) `float32 adapters, bf16 matmuls and frozen weights`: what
    the run header says about precision."""
    import torch

    mixed = mixed_precision_here(recipe, on_cpu=not torch.cuda.is_available())
    if mixed in ("no", BY_WEIGHTS.get(recipe.model.dtype)):
        return recipe.model.dtype
    if recipe.lora is not None and recipe.quantization is None:  # grpo_cli/train/frozen_weights.py
        return f"{recipe.model.dtype} adapters, {mixed} matmuls and frozen weights"
    return f"{recipe.model.dtype} weights, {mixed} matmuls"
