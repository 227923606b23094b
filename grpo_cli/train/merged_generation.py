"""Sampling with the LoRA adapter merged into the base weights, unmerged again before anything else runs.

Unmerged, every decode step pays each adapted Linear layer twice more (x @ A, then @ B, for one new token per row):
many small operations that a CPU runs far below its matmul speed. Merged, the model decodes as fast as the plain
model. Only TRL's `generate` call runs merged (the trainer class's `_generate_single_turn`): the reference and
old-policy log-probs, the rewards and the loss all run afterwards on the unmerged model, as TRL computes them.

Merging adds B @ A * scale to each base weight and unmerging subtracts the same product, so the base weights come
back up to float rounding (half a unit in the last place per step). TRL does the same every step when it syncs a
LoRA model into vLLM. Quantized (QLoRA) bases and sharded models (FSDP, ZeRO-3) are left alone: merging would
dequantize or need the whole weight on one process.

Under bf16/fp16 autocast the frozen weights are stored in that dtype (grpo_cli/train/frozen_weights.py), and
merging into them would round small updates away and could not be undone exactly. On a CPU each adapted layer then
samples with a merged copy instead (`adapter_merged_copy`): W + s B A computed in float32 and rounded once to that
dtype, the frozen weight and the adapter untouched, the copies dropped when sampling ends. On a GPU the copy would
cost memory the plan does not count, so generation there stays unmerged.

benchmarks/generation_in_training.py measures it against TRL's own path and `grpo eval`'s engine.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial


def can_merge(trainer) -> bool:
    from trl.distributed import DistributedBackend

    model = trainer.accelerator.unwrap_model(trainer.model)
    if not hasattr(model, "merge_adapter") or getattr(trainer, "use_vllm", False):
        return False  # not a PEFT model, or vLLM generates (TRL syncs merged weights there itself)
    if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False):
        return False
    backend = DistributedBackend(trainer.accelerator)
    return not (backend.is_zero3 or backend.is_fsdp)


@contextmanager
def adapter_merged(model):
    """The adapter merged into the base weights for one generation round, unmerged again after it (even on error)."""
    import torch

    with torch.no_grad():
        model.merge_adapter()
    try:
        yield
    finally:
        with torch.no_grad():
            model.unmerge_adapter()


def _merged_forward(weight, bias, x, *args, **kwargs):
    import torch.nn.functional as F

    return F.linear(x, weight, bias)


@contextmanager
def adapter_merged_copy(model, dtype):
    """For one generation round: each plain LoRA layer multiplies by one weight, its frozen weight plus s B A in
    float32, rounded once to `dtype`: one matrix product per layer and decode step instead of three and the
    additions. Nothing the trainer holds changes; each copy goes when the round ends (held: one `dtype` copy of the
    adapted weights, freed before the training phase)."""
    import torch

    from grpo_cli.generation.lean_lora import plain_adapter

    patched = []
    with torch.no_grad():
        for module in model.modules():
            name = plain_adapter(module)
            if name is None or not module.base_layer.weight.is_floating_point():
                continue
            base = module.base_layer
            delta = module.lora_B[name].weight.float() @ module.lora_A[name].weight.float()
            merged = base.weight.float().add_(delta, alpha=module.scaling[name]).to(dtype)
            module.forward = partial(_merged_forward, merged, base.bias)
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward  # PEFT's forward again; the copy goes with the partial


@contextmanager
def merged_copies_under_autocast(model, dtype):
    """One generation round on a CPU under autocast: the frozen weights' autocast and output-layer cast
    (frozen_weights.py), each adapted layer sampling with its merged copy."""
    from grpo_cli.train.frozen_weights import generating_under_autocast

    with generating_under_autocast(model, dtype), adapter_merged_copy(model, dtype):
        yield
