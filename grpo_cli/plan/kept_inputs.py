"""What one decoder layer keeps per token for its backward that the CPU-fitted activation constants (memory.py) do
not hold: the Linear inputs kept for LoRA's adapters or for full fine-tuning's weight gradients, and on CUDA the
layer's own blocks as torch's allocator trace listed them (benchmarks/gpu/README.md)."""

from __future__ import annotations

from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.static_memory import Held
from grpo_cli.recipe.model_section import LoraSection


def kept_linear_inputs(arch: Architecture, held: Held, lora: LoraSection | None) -> float:
    """Bytes per token and layer of the Linear inputs autograd keeps beyond the layer's own activations."""
    kept = 0.0
    w, param_bytes, mixed = held.w, held.param_bytes, held.mixed
    if lora is not None:
        # PEFT casts each adapted Linear's input to the adapter dtype (float32 on a bf16 base); lora_A keeps that
        # copy (with dropout > 0 the dropped-out one too; under autocast the copy is 2 B). With no cast at all
        # (float32, no autocast) it keeps the input itself, one per distinct input (benchmarks/lora_saved_tensors.txt).
        copies = (1 if param_bytes != w else 0) + (1 if lora.dropout > 0 else 0)
        kept += copies * arch.linear_inputs(lora.target_modules) * (2 if mixed != "no" else param_bytes)
        kept += arch.distinct_linear_inputs * w if (mixed == "no" and param_bytes == w) else 0
        if held.quantized and mixed != "no":
            # PEFT's 4-bit LoRA layer skips that cast under autocast (peft/tuners/lora/bnb.py), so lora_A keeps the
            # layer's input itself, one per distinct input: QLoRA without checkpointing was 28-31% under without
            # it (benchmarks/gpu/h200-2026-12-04/).
            kept += arch.distinct_linear_inputs * w
    else:
        # A trainable Linear keeps its input for its weight gradient, a frozen one does not (the allocator trace of
        # an H100 full fine-tuning step, benchmarks/gpu/h100-2026-11-26-owners/); under autocast the copy is 2 B.
        kept += arch.distinct_linear_inputs * (2 if mixed != "no" else w)
    return kept


def cuda_layer_activations(arch: Architecture, w: int) -> float:
    """What one decoder layer keeps per token for its backward on CUDA, block by block, from the allocator trace of a
    LoRA step on an H100 (benchmarks/gpu/h100-2026-11-26-owners/owners-qwen0.5b-lora-g16-c512.txt: 40.7 KB per
    token and layer, the CPU fit's constants give 36.7): gate_proj's and up_proj's outputs and silu(gate) (3 f),
    the rotated queries and keys and the attention's output (2 q + kv), the values and the keys before rotation
    (2 kv), RMSNorm's two float32 copies (2 h x 4 B) and the attention's float32 log-sum-exp (one per head)."""
    elements = 3 * arch.intermediate_size + 2 * arch.q_dim + 3 * arch.kv_dim
    return elements * w + 2 * arch.hidden_size * 4 + arch.num_heads * 4
