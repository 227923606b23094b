"""Trained weights into a vLLM engine that runs on the CPU, in the trainer's own process (TRL's colocate mode).

TRL's colocate sync calls the model's `load_weights` tensor by tensor. On a CPU vLLM prepacks every Linear weight for
its GEMM kernels (`dispatch_cpu_unquantized_gemm` in vllm/model_executor/layers/utils.py) and leaves an empty
parameter behind, so that call fails (`'Parameter' object has no attribute 'weight_loader'`). vLLM's model runner has
`reload_weights(weights_iterator=..., is_checkpoint_format=True)`, which restores each layer, loads the given tensors
and packs them again; this hands it TRL's own iterator (PEFT merged, names as vLLM expects them).

TRL's iterator merges the adapter, yields each merged tensor's storage and unmerges once it is exhausted: each tensor
is copied as it is yielded, or an engine that reads the iterator to the end before loading would receive the unmerged
base (no error, no change).
"""

from __future__ import annotations


def sync_cpu_engine(generation) -> None:
    """Push the policy's current weights into `generation.llm` (TRL's VLLMGeneration, colocate mode)."""
    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
    weights = ((name, tensor.detach().clone()) for name, tensor in generation._iter_named_params())
    runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
    generation.llm.reset_prefix_cache()
