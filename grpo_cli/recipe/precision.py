"""Which mixed precision a run trains in: the recipe's `model.mixed_precision`, with `auto` decided by the hardware.

Mixed precision runs the matmuls in bfloat16 (or float16) under autocast while the weights, gradients and optimizer
stay in `model.dtype`. It pays only where the hardware multiplies bfloat16 natively (LoRA steps in both precisions
on an AVX512-BF16 CPU: benchmarks/train_overhead.txt; matmul throughput by dtype: benchmarks/cpu_limits.txt). On a
CPU without it, oneDNN emulates bfloat16 and a step is several times slower than in float32. TRL's own default
(`bf16=True` whatever the hardware) would take that slow path on such CPUs; `auto` does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from grpo_cli.recipe.model_section import ModelSection, QuantizationSection

# /proc/cpuinfo flags of x86 CPUs whose vector units multiply bfloat16 (Zen 4 and later, Cooper Lake, Sapphire Rapids).
NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# Half-precision weights train under the matching autocast.
BY_WEIGHTS = {"bfloat16": "bf16", "float16": "fp16"}


# Instruction-set caps a user (or a benchmark standing in for an older CPU) can set: below AVX512-BF16, oneDNN and
# ATen emulate bfloat16 even where the CPU has it, so `auto` must not pick it.
ONEDNN_ISAS_WITH_BF16 = ("BF16", "AMX", "AVX10", "ALL", "DEFAULT")
ATEN_CAPS_WITHOUT_AVX512 = ("default", "avx2")


def isa_capped_below_bf16(environ: Mapping[str, str] = os.environ) -> bool:
    """True when ONEDNN_MAX_CPU_ISA or ATEN_CPU_CAPABILITY caps the libraries below bfloat16 dot products."""
    onednn = environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if onednn and not any(name in onednn for name in ONEDNN_ISAS_WITH_BF16):
        return True
    return environ.get("ATEN_CPU_CAPABILITY", "").lower() in ATEN_CAPS_WITHOUT_AVX512


def cpu_computes_bf16(cpuinfo: Path = Path("/proc/cpuinfo"), environ: Mapping[str, str] = os.environ) -> bool:
    """True when the CPU has bfloat16 dot-product instructions and no cap hides them (Linux x86; elsewhere False, so
    float32 stays)."""
    if isa_capped_below_bf16(environ):
        return False
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return bool(NATIVE_BF16_CPU_FLAGS & set(line.split(":", 1)[-1].split()))
    except OSError:
        pass
    return False


def mixed_precision(model: ModelSection, native_bf16: bool) -> str:
    """`bf16`, `fp16` or `no` for this model section on hardware that does (or does not) compute bfloat16 natively."""
    chosen = model.mixed_precision
    if chosen != "auto":
        return chosen
    if model.dtype in BY_WEIGHTS:
        return BY_WEIGHTS[model.dtype]
    return "bf16" if native_bf16 else "no"


@dataclass(frozen=True)
class Precision:
    """How a command holds and multiplies the policy on this machine, decided once (`precision_here`): training keeps
    its weights in `dtype` and multiplies under `mixed`; evaluation casts the weights once to `inference_dtype`."""

    dtype: str  # model.dtype
    mixed: str  # bf16, fp16 or no
    on_cpu: bool

    @property
    def inference_dtype(self) -> str:
        """The dtype evaluation generates in: the one training multiplies in. Without gradients nothing needs float32
        master weights, so the weights themselves are cast once (autocast would cast every weight again at every
        decode step); throughput and accuracy in both dtypes: benchmarks/eval_precision.txt."""
        return {"bf16": "bfloat16", "fp16": "float16"}.get(self.mixed, self.dtype)

    def label(self, method: str) -> str:
        """`float32`, `float32 weights, bf16 matmuls` or (LoRA) `float32 adapters, bf16 matmuls and frozen weights`:
        what the run header says about precision."""
        if self.mixed in ("no", BY_WEIGHTS.get(self.dtype)):
            return self.dtype
        if method == "lora":  # grpo_cli/train/frozen_weights.py
            return f"{self.dtype} adapters, {self.mixed} matmuls and frozen weights"
        return f"{self.dtype} weights, {self.mixed} matmuls"


def precision_here(model: ModelSection, on_cpu: bool | None = None) -> Precision:
    """The precision on this machine (`on_cpu` None: asks torch). The hardware is asked only when `auto` meets
    float32 weights."""
    if on_cpu is None:
        import torch  # only a question for the hardware needs it: recipe/ and `grpo plan` run without torch

        on_cpu = not torch.cuda.is_available()
    if model.mixed_precision != "auto" or model.dtype != "float32":
        mixed = mixed_precision(model, native_bf16=False)
    elif on_cpu:
        mixed = mixed_precision(model, cpu_computes_bf16())
    else:
        import torch

        mixed = mixed_precision(model, bool(torch.cuda.is_bf16_supported()))
    return Precision(model.dtype, mixed, on_cpu)


def compute_dtype(model: ModelSection, quantization: QuantizationSection | None) -> str:
    """The dtype generation runs in: training's matmul precision (bitsandbytes-quantized models keep theirs)."""
    import torch

    if quantization is not None:
        return model.dtype
    return precision_here(model, on_cpu=not torch.cuda.is_available()).inference_dtype
