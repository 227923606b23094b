"""What a CUDA step holds for one decoder layer's backward beyond the activations the plan keeps per layer, as
torch's allocator trace of an H100 showed it (benchmarks/gpu/README.md, "Where the plan was short"). The CPU rows'
fitted activation constants (memory.py) already hold whatever of this a CPU step keeps, so these apply on CUDA only.
"""

from __future__ import annotations

from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.sharding import Term
from grpo_cli.plan.static_memory import Held
from grpo_cli.recipe.model_section import LoraSection


def layer_backward_transients(
    arch: Architecture, device: str, held: Held, lora: LoraSection | None, T: int
) -> list[Term]:
    """Terms of the layer backwards' phase, after the head's backward has freed its tiles (with checkpointing, the
    recomputed layer's; without it the trace showed the same: the cast alive at the peak, no head block)."""
    if device == "cpu":
        return []
    phase = "training-recompute"
    terms = []
    f, w, param_bytes = arch.intermediate_size, held.w, held.param_bytes
    adapted = arch.adapted_shapes(lora.target_modules) if lora is not None else []
    if adapted and param_bytes != w:
        # PEFT's _cast_input_dtype gives lora_A a copy of the Linear's input in the adapters' float32; one of them,
        # the widest (down_proj's f), was alive at every LoRA peak (0.15-0.16 GiB on the H100 rows).
        widest = max(i for _, i, _ in adapted)
        terms.append(
            Term(
                "adapter input cast",
                T * widest * param_bytes,
                phase,
                f"T {T} x {widest} x {param_bytes} B (PEFT's float32 copy of one input)",
            )
        )
    if held.checkpointing:
        # The recomputed layer's backward holds the gradients of the MLP's two f-wide activations (gate and up) while
        # it forms theirs: what the recomputed layer held beyond the plan's forward figure.
        terms.append(
            Term(
                "recomputed layer gradients",
                2 * T * f * w,
                phase,
                f"2 x T {T} x f {f} x {w} B (MLP activation gradients)",
            )
        )
    return terms
