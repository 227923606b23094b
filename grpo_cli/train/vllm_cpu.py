"""vLLM generating on the CPU inside the trainer's own process (TRL's colocate mode): its settings, and the trained
weights pushed into it once per step.

The engine's settings are libraries/vllm_settings.py's, as for `grpo eval`'s engine: in this process (colocate means
TRL reaches into it for every sync), a KV cache sized from the recipe's generation batch (the figure `grpo plan`
counts, plan/vllm_memory.py), eager. TRL starts the engine without a dtype, so vLLM would take the checkpoint's stored
one (bfloat16 for Qwen2.5) even where the policy trains in float32; on a CPU without AVX512-BF16 that is emulated and
generates several times slower than float32 (benchmarks/vllm_cpu_dtype.txt). It is started in the dtype training
multiplies in instead (`inference_dtype`, as `grpo eval` generates: float32 there, bfloat16 where float32 weights
train under bf16 autocast), which keeps generation and training at one precision.

TRL's colocate sync calls the model's `load_weights` tensor by tensor. On a CPU vLLM prepacks every Linear weight for
its GEMM kernels (`dispatch_cpu_unquantized_gemm` in vllm/model_executor/layers/utils.py) and leaves an empty
parameter behind, so that call fails (`'Parameter' object has no attribute 'weight_loader'`). vLLM's model runner has
`reload_weights(weights_iterator=..., is_checkpoint_format=True)`, which restores each layer, loads the given tensors
and packs them again; this hands it the policy's weights with the adapter folded in (`merged_weights`, the names
vLLM expects). Both private names are listed and checked, before any weight loads, in libraries/seams.py.

TRL's own iterator for this merges the adapter into the frozen weights in place and unmerges it after, which leaves
them a rounding off at every sync; `merged_weights` only reads the model.
"""

from __future__ import annotations

from grpo_cli.libraries import seams
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.schema import GRPOSection


def prepare_environment(model: ModelSection, data: DataSection, grpo: GRPOSection, sequences: int) -> None:
    """Set vLLM's settings for this process before TRL builds the engine (a user's own KV cache size is kept): the
    dtype training multiplies in, and the KV cache `grpo plan` counts for `sequences` (the generation batch of one
    process) at the data's and grpo's lengths (plan/vllm_memory.py)."""
    from grpo_cli.libraries.vllm_settings import engine_settings
    from grpo_cli.plan import architectures
    from grpo_cli.plan.vllm_memory import kv_cache_space_gib
    from grpo_cli.recipe.precision import precision_here

    kv = kv_cache_space_gib(architectures.resolve(model), data, grpo, sequences)
    engine_settings(precision_here(model, on_cpu=True).inference_dtype, on_gpu=False, kv_gib=kv)


def cpu_engine_settings(dtype: str):
    """A context for building the trainer: TRL's engine starts in `dtype`, eagerly (TRL passes neither)."""
    from grpo_cli.libraries.vllm_settings import engine_settings

    return seams.trl_engine_options(engine_settings(dtype, on_gpu=False))


def sync_cpu_engine(generation) -> None:
    """Push the policy's current weights into `generation.llm` (TRL's VLLMGeneration, colocate mode)."""
    runner = seams.engine_runner(generation.llm)
    runner.reload_weights(weights_iterator=merged_weights(generation.model), is_checkpoint_format=True)
    generation.llm.reset_prefix_cache()


def merged_weights(model):
    """The policy's weights under the names vLLM loads, each a new tensor, with a LoRA adapter folded in: W + delta,
    the values PEFT's merge writes. TRL's own iterator merges into the frozen weights and unmerges after, in place,
    and W + delta - delta is W only to a rounding: every frozen weight drifts a little at each sync (TRL #6688,
    #7423). Here the model is only read, so 20 syncs leave it bitwise as it was (tests/test_vllm_cpu.py)."""
    from peft.tuners.lora import LoraLayer

    prefix = getattr(model, "prefix", None) if hasattr(model, "peft_config") else None  # "lora_" under PEFT
    layers = {f"{name}.base_layer.weight": m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    for full_name, param in model.named_parameters():
        name = full_name.removeprefix("base_model.model.") if prefix is not None else full_name
        if prefix is not None and (prefix in name or "original_module" in name):  # the adapter, a saved module's copy
            continue
        layer = layers.get(full_name)
        tensor = param.detach().clone()
        if layer is not None:
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    tensor += layer.get_delta_weight(adapter).to(tensor.dtype)
        yield vllm_name(name), tensor


def vllm_name(name: str) -> str:
    """A parameter's name as vLLM's checkpoint loader expects it: PEFT's and activation checkpointing's wrappers out
    (what TRL's `_fix_param_name_to_vllm` drops)."""
    for wrapper in (".base_layer", "_checkpoint_wrapped_module.", "modules_to_save.default."):
        name = name.replace(wrapper, "")
    return name
