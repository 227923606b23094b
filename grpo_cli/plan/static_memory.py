"""What lives for the whole run, in the memory model behind `grpo plan` (plan/memory.py): the weights as stored, the
LoRA adapters, a reference model, the optimizer states; and the dtype choices the step terms share with them.
The figures come from the tensor shapes in the named source code."""

from __future__ import annotations

from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.sharding import Term
from grpo_cli.recipe.schema import Recipe

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


def trainable_params(recipe: Recipe, arch: Architecture) -> int:
    if recipe.lora is None:
        return arch.params
    return arch.lora_params(recipe.lora.r, recipe.lora.target_modules)


def bytes_per_trainable(recipe: Recipe, w: int) -> int:
    """Bytes per trainable parameter: PEFT keeps adapters in float32, bf16 on a quantised base (TRL casts them,
    QLoRA paper, section 3); full fine-tuning trains the weights in their own dtype."""
    if recipe.lora is None:
        return w
    return 2 if recipe.quantization is not None else 4


def mixed_precision_on(recipe: Recipe, device: str) -> str:
    """The run's mixed precision: GPUs are taken to compute bfloat16 (Ampere and later); a CPU is asked."""
    from grpo_cli.recipe.precision import cpu_computes_bf16, mixed_precision

    return mixed_precision(recipe.model, native_bf16=device != "cpu" or cpu_computes_bf16())


def static_terms(recipe: Recipe, arch: Architecture, device: str, w: int) -> list[Term]:
    """What lives for the whole run: weights, adapters, reference model, optimizer states, CUDA's matmul workspaces."""
    P = arch.params
    terms = [_weights(recipe, arch, device, w)]
    trainable, param_bytes = trainable_params(recipe, arch), bytes_per_trainable(recipe, w)
    if recipe.lora is not None:
        terms.append(
            Term(
                "lora adapters",
                trainable * param_bytes,
                "static",
                f"r x (in + out) per adapted Linear = {trainable / 1e6:.2f}M x {param_bytes} B",
            )
        )

    reference = P * w if (recipe.grpo.beta > 0 and recipe.lora is None) else 0.0
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
    terms.append(_optimizer_states(recipe, arch, device, trainable, param_bytes))
    if device == "cuda":
        terms.append(Term("cuBLAS workspaces", CUBLAS_WORKSPACES, "static", "cuBLAS and cuBLASLt: 32 MiB each"))
    if recipe.grpo.use_vllm and device == "cpu":
        from grpo_cli.plan.vllm_memory import vllm_cpu_terms

        # the engine generates in the precision training multiplies in (train/vllm_cpu.py)
        engine_w = 2 if mixed_precision_on(recipe, device) in ("bf16", "fp16") else w
        terms += vllm_cpu_terms(recipe, arch, engine_w)
    return terms


def _weights(recipe: Recipe, arch: Architecture, device: str, w: int) -> Term:
    """The model's weights as they sit in memory: quantized, cast once for autocast, or in the recipe's dtype."""
    P = arch.params
    q = recipe.quantization
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
    elif (
        recipe.lora is not None
        and w == 4
        and mixed_precision_on(recipe, device) != "no"
        and recipe.distributed.strategy not in ("zero3", "fsdp")
        and not recipe.grpo.use_vllm
    ):
        # Frozen Linear weights are cast once to the autocast dtype (grpo_cli/train/frozen_weights.py; not with vLLM,
        # whose sync merges the adapter into them).
        weights = arch.linear_params * 2 + (P - arch.linear_params) * w
        formula = f"frozen Linear {arch.linear_params / 1e6:.0f}M x 2 B (cast once for autocast) + other x {w} B"
    else:
        weights = P * w
        formula = f"P {P / 1e6:.1f}M x {w} B ({recipe.model.dtype})"
    return Term("weights", weights, "static", formula)


def _optimizer_states(recipe: Recipe, arch: Architecture, device: str, trainable: int, param_bytes: int) -> Term:
    """The optimizer's states for every trainable parameter (float32 masters too under DeepSpeed)."""
    h, V = arch.hidden_size, arch.vocab_size
    optim = recipe.training.optim
    embedding_fp32 = 0
    if optim in ("adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit"):
        per_param = ADAM8_BYTES
        note = f"two 8-bit states + block absmax = {ADAM8_BYTES:.3f} B/param"
        if recipe.lora is None:
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
    deepspeed = recipe.num_processes > 1 and recipe.distributed.zero_stage is not None
    if deepspeed and param_bytes < 4 and optim not in ("sgd", "adafactor"):
        # DeepSpeed's mixed-precision optimizer steps on a float32 master copy, so its states are float32
        # too: 4 + 8 = 12 B/param for AdamW (the ZeRO paper's K = 12, Rajbhandari et al. 2020, section 3.1).
        states_per_param = 8.0 if per_param == 2.0 * param_bytes else per_param  # AdamW's pair becomes float32
        per_param = 4.0 + states_per_param
        states = trainable * per_param
        note = f"float32 master + states under DeepSpeed = {per_param:g} B/param"
    return Term("optimizer states", states, "static", f"P_t {trainable / 1e6:.2f}M x {note}")


def optimizer_step_temporaries(recipe: Recipe, device: str, trainable: int, param_bytes: int) -> Term | None:
    """On CUDA torch's AdamW takes its foreach path, which builds sqrt(exp_avg_sq) for every parameter at once
    (torch/optim/adam.py, _multi_tensor_adam: torch._foreach_sqrt) beside the gradients; on a CPU it loops one
    parameter at a time. Found on an H100 (benchmarks/gpu/README.md): without it the plan missed one parameter-sized
    set in full fine-tuning's peak."""
    if device != "cuda" or recipe.training.optim != "adamw_torch" or recipe.distributed.zero_stage is not None:
        return None
    formula = f"P_t {trainable / 1e6:.2f}M x {param_bytes} B (foreach AdamW's sqrt(exp_avg_sq))"
    return Term("optimizer step temporaries", trainable * param_bytes, "training-late", formula)
