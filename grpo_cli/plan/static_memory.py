"""What lives for the whole run, in the memory model behind `grpo plan` (plan/memory.py): the weights as stored, the
LoRA adapters, a reference model, the optimizer states; and the dtype choices the step terms share with them.
The figures come from the tensor shapes in the named source code."""

from __future__ import annotations

from dataclasses import dataclass

from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.sharding import Term
from grpo_cli.recipe.machine import DistributedSection
from grpo_cli.recipe.model_section import LoraSection, ModelSection, QuantizationSection
from grpo_cli.recipe.schema import GRPOSection

# bitsandbytes: NF4/FP4 store 0.5 byte per weight plus one float32 absmax per 64-weight block (0.0625 B);
# double quantisation stores that absmax in 8 bits with a float32 per 256 blocks (~0.0157 B).
NF4_BYTES = {True: 0.5 + 1 / 64 + 4 / (64 * 256), False: 0.5 + 4 / 64}
# LLM.int8: one int8 per weight plus a float32 scale per output row (negligible).
INT8_BYTES = 1.0
# bitsandbytes 8-bit optimizers: two uint8 states + a float32 absmax per 256-value block each; tensors
# under 4096 elements keep 32-bit states (bitsandbytes' min_8bit_size).
ADAM8_BYTES = 2 + 2 * 4 / 256
# On CUDA torch gives cuBLAS and cuBLASLt a workspace each from its caching allocator at the first matmul, 32 MiB
# apiece on Hopper (aten/src/ATen/cuda/CublasHandlePool.cpp), alive for the whole run. MEASURED: before each second
# step the allocator held 0.065-0.074 GiB beyond the weights, adapters and optimizer states on six of seven
# configurations, 0.5B to 1.5B, full, LoRA and QLoRA, H100 and H200 (benchmarks/gpu/*owners*/, `held before`);
# older GPUs get 4 MiB workspaces, so the figure is an over-estimate there.
CUBLAS_WORKSPACES = 2 * 32 * 2**20
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class Held:
    """How the run holds and trains the policy, resolved once from the recipe (memory.memory_plan): the dtypes and the
    trained parameters every static and training term is sized by."""

    dtype: str  # model.dtype, the weights as loaded
    w: int  # bytes per weight element in that dtype
    mixed: str  # the mixed precision the run computes in: bf16, fp16 or no
    trainable: int  # P_t: the adapters' parameters with LoRA, else every parameter
    param_bytes: int  # bytes per trainable parameter
    quantized: bool  # a bitsandbytes base (QLoRA, or LoRA on int8 weights)
    checkpointing: bool  # model.gradient_checkpointing: layer inputs kept, each layer recomputed for its backward


def held(model: ModelSection, lora: LoraSection | None, quantized: bool, arch: Architecture, device: str) -> Held:
    """The policy as `device` holds it: `quantized` for a bitsandbytes base (the recipe's quantization section)."""
    w = DTYPE_BYTES[model.dtype]
    trainable = arch.params if lora is None else arch.lora_params(lora.r, lora.target_modules)
    mixed = mixed_precision_on(model, device)
    param_bytes = bytes_per_trainable(lora, quantized, w)
    return Held(model.dtype, w, mixed, trainable, param_bytes, quantized, model.gradient_checkpointing)


def bytes_per_trainable(lora: LoraSection | None, quantized: bool, w: int) -> int:
    """Bytes per trainable parameter: PEFT keeps adapters in float32, bf16 on a quantised base (TRL casts them,
    QLoRA paper, section 3); full fine-tuning trains the weights in their own dtype."""
    if lora is None:
        return w
    return 2 if quantized else 4


def mixed_precision_on(model: ModelSection, device: str) -> str:
    """The run's mixed precision: GPUs are taken to compute bfloat16 (Ampere and later); a CPU is asked."""
    from grpo_cli.recipe.precision import cpu_computes_bf16, mixed_precision

    return mixed_precision(model, native_bf16=device != "cpu" or cpu_computes_bf16())


def static_terms(
    arch: Architecture,
    device: str,
    held: Held,
    lora: LoraSection | None,
    quantization: QuantizationSection | None,
    grpo: GRPOSection,
    optim: str,
    distributed: DistributedSection,
) -> list[Term]:
    """What lives for the whole run: weights, adapters, reference model, optimizer states, CUDA's matmul workspaces."""
    P = arch.params
    trainable, param_bytes = held.trainable, held.param_bytes
    # Frozen Linear weights are cast once to the autocast dtype (grpo_cli/train/frozen_weights.py; not with vLLM,
    # whose sync merges the adapter into them).
    cast_once = (
        lora is not None
        and held.w == 4
        and held.mixed != "no"
        and distributed.strategy not in ("zero3", "fsdp")
        and not grpo.use_vllm
    )
    terms = [_weights(arch, held, quantization, cast_once)]
    if lora is not None:
        terms.append(
            Term(
                "lora adapters",
                trainable * param_bytes,
                "static",
                f"r x (in + out) per adapted Linear = {trainable / 1e6:.2f}M x {param_bytes} B",
            )
        )

    reference = P * held.w if (grpo.beta > 0 and lora is None) else 0.0
    terms.append(
        Term(
            "reference model",
            reference,
            "static",
            "beta > 0, full fine-tuning: a second copy P x w"
            if reference
            else "none (beta = 0, or PEFT: the base with adapters disabled)",
        )
    )
    terms.append(_optimizer_states(arch, device, held, lora is None, optim, distributed))
    if device == "cuda":
        terms.append(Term("cuBLAS workspaces", CUBLAS_WORKSPACES, "static", "cuBLAS and cuBLASLt: 32 MiB each"))
    return terms


def _weights(arch: Architecture, held: Held, quantization: QuantizationSection | None, cast_once: bool) -> Term:
    """The model's weights as they sit in memory: quantized, cast once for autocast, or in the recipe's dtype."""
    P, w = arch.params, held.w
    q = quantization
    if q is not None and q.bits == 4:
        per = NF4_BYTES[q.double_quant]
        weights = arch.linear_params * per + (P - arch.linear_params) * w
        formula = (
            f"Linear {arch.linear_params / 1e6:.0f}M x {per:.3f} B (NF4 + scales) + "
            f"other {(P - arch.linear_params) / 1e6:.0f}M x {w} B"
        )
    elif q is not None:
        weights = arch.linear_params * INT8_BYTES + (P - arch.linear_params) * w
        formula = f"Linear {arch.linear_params / 1e6:.0f}M x 1 B (int8) + other x {w} B"
    elif cast_once:
        weights = arch.linear_params * 2 + (P - arch.linear_params) * w
        formula = f"frozen Linear {arch.linear_params / 1e6:.0f}M x 2 B (cast once for autocast) + other x {w} B"
    else:
        weights = P * w
        formula = f"P {P / 1e6:.1f}M x {w} B ({held.dtype})"
    return Term("weights", weights, "static", formula)


def _optimizer_states(
    arch: Architecture, device: str, held: Held, full: bool, optim: str, distributed: DistributedSection
) -> Term:
    """The optimizer's states for every trainable parameter (float32 masters too under DeepSpeed); `full`: full
    fine-tuning, every weight trains."""
    h, V = arch.hidden_size, arch.vocab_size
    trainable, param_bytes = held.trainable, held.param_bytes
    embedding_fp32 = 0
    if optim in ("adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit"):
        per_param = ADAM8_BYTES
        note = f"two 8-bit states + block absmax = {ADAM8_BYTES:.3f} B/param"
        if full:
            # transformers' Trainer registers nn.Embedding weights for 32-bit states (trainer.py, create_optimizer).
            embedding_fp32 = V * h
            note += f"; the input embedding ({embedding_fp32 / 1e6:.1f}M) keeps float32 states (8 B/param)"
    elif optim == "paged_adamw_32bit":
        per_param, note = 8.0, "two float32 states = 8 B/param"
    elif optim == "sgd":
        per_param, note = 0.0, "no state"
    elif optim == "adafactor":
        per_param, note = 0.1, "factored second moment (rows + columns): ~0.1 B/param"
    else:
        per_param, note = 2.0 * param_bytes, f"exp_avg + exp_avg_sq in the parameter dtype = 2 x {param_bytes} B/param"
    if optim.startswith("paged") and device == "cuda":
        note += "; paged: CUDA unified memory, outside torch's allocator (not in max_memory_allocated)"
    states = (trainable - embedding_fp32) * per_param + embedding_fp32 * 8
    deepspeed = distributed.num_processes > 1 and distributed.zero_stage is not None
    if deepspeed and param_bytes < 4 and optim not in ("sgd", "adafactor"):
        # DeepSpeed's mixed-precision optimizer steps on a float32 master copy, so its states are float32
        # too: 4 + 8 = 12 B/param for AdamW (the ZeRO paper's K = 12, Rajbhandari et al. 2020, section 3.1).
        states_per_param = 8.0 if per_param == 2.0 * param_bytes else per_param  # AdamW's pair becomes float32
        per_param = 4.0 + states_per_param
        states = trainable * per_param
        note = f"float32 master + states under DeepSpeed = {per_param:g} B/param"
    return Term("optimizer states", states, "static", f"P_t {trainable / 1e6:.2f}M x {note}")


def optimizer_step_temporaries(device: str, held: Held, optim: str, distributed: DistributedSection) -> Term | None:
    """On CUDA torch's AdamW takes its foreach path, which builds sqrt(exp_avg_sq) for every parameter at once
    (torch/optim/adam.py, _multi_tensor_adam: torch._foreach_sqrt) beside the gradients; on a CPU it loops one
    parameter at a time. Found on an H100 (benchmarks/gpu/README.md): without it the plan missed one parameter-sized
    set in full fine-tuning's peak."""
    if device != "cuda" or optim != "adamw_torch" or distributed.zero_stage is not None:
        return None
    formula = f"P_t {held.trainable / 1e6:.2f}M x {held.param_bytes} B (foreach AdamW's sqrt(exp_avg_sq))"
    return Term("optimizer step temporaries", held.trainable * held.param_bytes, "training-late", formula)
