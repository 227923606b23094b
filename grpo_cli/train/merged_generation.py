"""Sampling with the LoRA adapter merged into the base weights, unmerged again before anything else runs.

Unmerged, every decode step pays each adapted Linear layer twice more (x @ A, then @ B, for one new token per row):
many small operations that a CPU runs far below its matmul speed. Merged, the model decodes as fast as the plain
model. Only TRL's `generate` call runs merged (the trainer class's `_generate_single_turn`): the reference and
old-policy log-probs, the rewards and the loss all run afterwards on the unmerged model, as TRL computes them.

Merging adds B @ A * scale to each base weight and unmerging subtracts the same product, so the base weights come
back up to float rounding (half a unit in the last place per step). TRL does the same every step when it syncs a
LoRA model into vLLM. Quantized (QLoRA) bases and sharded models (FSDP, ZeRO-3) are left alone: merging would
dequantize or need the whole weight on one process.

Under bf16/fp16 autocast the frozen weights are stored in that dtype instead and generation runs under autocast,
unmerged (grpo_cli/train/frozen_weights.py); this merge is for float32 runs.

benchmarks/generation_in_training.py measures it against TRL's own path and `grpo eval`'s engine.
"""

from __future__ import annotations

from contextlib import contextmanager


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
