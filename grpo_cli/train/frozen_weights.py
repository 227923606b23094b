"""A LoRA run under bf16 (or fp16) autocast keeps its frozen Linear weights in that dtype, cast once at start.

Autocast multiplies every Linear in bfloat16: a float32 weight is cast again at each call (the forward, the
recompute under gradient checkpointing, the reference forward) and the copy is kept for the backward. A frozen
weight never changes, so casting it once gives the very same products (autocast would cast it to the same values)
with half the memory for it and none of the copies. Trainable weights (the adapters), norms, embeddings and the
output layer are left as they are. Generation then runs under the same autocast with the adapter unmerged (merging
into bfloat16 weights would round small updates away) and the output layer cast once per generation (below); TRL
still computes every log-prob and the loss itself.

Not for full fine-tuning (the weights train), quantized bases, or sharded models (FSDP, ZeRO-3).
"""

from __future__ import annotations

from contextlib import contextmanager

AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def frozen_linears(model) -> list:
    """Decoder Linear layers whose weights do not train (the bases of LoRA layers, and any Linear left out)."""
    import torch

    output = model.get_output_embeddings()
    return [
        module
        for module in model.modules()
        if isinstance(module, torch.nn.Linear) and module is not output and not module.weight.requires_grad
    ]


def planned_dtype(method: str, weights_dtype: str, use_vllm: bool, sharded: bool, mixed: str) -> str | None:
    """The dtype `narrow` will give the frozen Linear weights, decided before the model loads (so load_model can
    keep them as a checkpoint stores them); None when it will not apply: not LoRA (full fine-tuning trains every
    weight, QLoRA's are quantized), weights not float32, vLLM generating, or the model sharded (FSDP, ZeRO-3, or a
    user's own accelerate config, which may shard)."""
    if method != "lora" or weights_dtype != "float32" or use_vllm or sharded:
        return None
    return AUTOCAST_DTYPES.get(mixed)


def narrow(trainer, mixed: str):
    """Cast the frozen Linear weights to the autocast dtype; that dtype, or None when the run is not one this applies
    to (nothing is changed then). Generation must then run under `generating_under_autocast`."""
    import torch
    from trl.distributed import DistributedBackend

    model = trainer.accelerator.unwrap_model(trainer.model)
    name = AUTOCAST_DTYPES.get(mixed)
    if (
        name is None
        or not hasattr(model, "peft_config")
        or getattr(model, "is_loaded_in_4bit", False)
        or getattr(model, "is_loaded_in_8bit", False)
        or getattr(trainer, "use_vllm", False)
    ):
        return None
    backend = DistributedBackend(trainer.accelerator)
    if backend.is_zero3 or backend.is_fsdp:
        return None
    dtype = getattr(torch, name)
    for module in frozen_linears(model):
        module.to(dtype)
    return dtype


@contextmanager
def generating_under_autocast(model, dtype):
    """One generation round under autocast in `dtype`, the output layer cast once for the whole round."""
    import torch

    device_type = next(model.parameters()).device.type
    with torch.autocast(device_type, dtype=dtype), output_layer_cast_once(model, dtype):
        yield


@contextmanager
def output_layer_cast_once(model, dtype):
    """While sampling, the frozen output layer multiplies by one copy of its weight in the autocast dtype.

    Autocast caches its casts only for weights that require grad, so a frozen float32 output layer (tied to the
    input embedding in SmolLM2 and Qwen2.5-0.5B) is cast again at every decode step: V x h floats (136M for
    Qwen2.5-0.5B) read and written per generated token. One cast per generation gives the same bf16 values, so
    the same logits; the copy is dropped when sampling ends (the training phase, which sets the peak, never holds
    it)."""
    import torch

    output = model.get_output_embeddings()
    weight = getattr(output, "weight", None)
    if not isinstance(output, torch.nn.Linear) or weight is None or weight.requires_grad or weight.dtype == dtype:
        yield
        return
    narrow_weight = weight.detach().to(dtype)
    narrow_bias = None if output.bias is None else output.bias.detach().to(dtype)
    output.forward = lambda hidden: torch.nn.functional.linear(hidden, narrow_weight, narrow_bias)
    try:
        yield
    finally:
        del output.forward  # the class's own forward again
