"""vLLM generating on the CPU inside the trainer's own process (TRL's colocate mode): its settings, and the trained
weights pushed into it once per step.

vLLM's CPU build reads its KV-cache size from VLLM_CPU_KVCACHE_SPACE (whole GiB) rather than a GPU memory fraction;
left unset it takes a share of the machine's free memory. It is sized from the recipe's generation batch, so the
plan's figure is what the run holds, and the engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), which is
what colocate means: TRL reaches into it for every sync.

TRL's colocate sync calls the model's `load_weights` tensor by tensor. On a CPU vLLM prepacks every Linear weight for
its GEMM kernels (`dispatch_cpu_unquantized_gemm` in vllm/model_executor/layers/utils.py) and leaves an empty
parameter behind, so that call fails (`'Parameter' object has no attribute 'weight_loader'`). vLLM's model runner has
`reload_weights(weights_iterator=..., is_checkpoint_format=True)`, which restores each layer, loads the given tensors
and packs them again; this hands it TRL's own iterator (PEFT merged, names as vLLM expects them).

TRL starts the engine without a dtype, so vLLM takes the checkpoint's stored one (bfloat16 for Qwen2.5) even where
the policy trains in float32; on a CPU without AVX512-BF16 that is emulated and generates several times slower than
float32 (benchmarks/vllm_cpu_dtype.txt). The engine is started in the dtype training multiplies in instead
(`inference_dtype`, as `grpo eval` generates: float32 there, bfloat16 where float32 weights train under bf16
autocast), which keeps generation and training at one precision. It also runs eagerly, as grpo eval's engine does
on a CPU: vLLM's compiled graphs generate a little faster but take minutes to build at every start (same file), more
than a CPU run of a few dozen steps gains back.

TRL's iterator merges the adapter, yields each merged tensor's storage and unmerges once it is exhausted: each tensor
is copied as it is yielded, or an engine that reads the iterator to the end before loading would receive the unmerged
base (no error, no change).
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager

from grpo_cli.recipe.schema import Recipe


def prepare_environment(recipe: Recipe) -> None:
    """Set vLLM's CPU settings for this process before TRL builds the engine (a user's own values are kept); the KV
    cache is the size `grpo plan` counts (plan/vllm_memory.py)."""
    from grpo_cli.plan import architectures
    from grpo_cli.plan.vllm_memory import kv_cache_space_gib

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_space_gib(recipe, architectures.resolve(recipe)))


@contextmanager
def cpu_engine_settings(dtype: str):
    """While the trainer is built: TRL's engine starts in `dtype`, eagerly (TRL passes neither; see the module's
    docstring)."""
    from trl.generation import vllm_generation

    start = vllm_generation.LLM
    vllm_generation.LLM = functools.partial(start, dtype=dtype, enforce_eager=True)
    try:
        yield
    finally:
        vllm_generation.LLM = start


def sync_cpu_engine(generation) -> None:
    """Push the policy's current weights into `generation.llm` (TRL's VLLMGeneration, colocate mode)."""
    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
    weights = ((name, tensor.detach().clone()) for name, tensor in generation._iter_named_params())
    runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
    generation.llm.reset_prefix_cache()
