"""vLLM generating on a CPU inside the trainer (TRL's colocate mode): what it holds for the whole run.

On a GPU vLLM takes `grpo.vllm_gpu_memory_utilization` of the card (memory.py adds it to nvidia-smi's figure). On a
CPU it holds a second copy of the weights, packed for its GEMM kernels, and a KV cache of VLLM_CPU_KVCACHE_SPACE
whole GiB, which grpo sets from the recipe (kv_cache_for_recipe, by libraries/vllm_settings.py's one formula;
train/vllm_cpu.py) unless the user has set it; both live beside the trainer's own copy for the whole run, so they are
static terms of the process's peak.
"""

from __future__ import annotations

from grpo_cli.libraries import vllm_settings
from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.sharding import Term
from grpo_cli.plan.static_memory import Held
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.schema import GRPOSection

GIB = 2**30
# vLLM's libraries, compiled kernels and engine buffers, beyond its weights, packed vocabulary and KV cache, as resident
# memory of the trainer's process. FITTED on two float32 runs with grpo.use_vllm=true (docs/vllm.md, Memory): the demo
# (5.35-5.44 GiB peak RSS) and GSM8K take four's d1 on Qwen2.5-Coder-0.5B (14.0-14.7 GiB), so that neither is planned
# under. Started alone, the engine holds more beyond those terms (0.6-1.2 GiB: benchmarks/vllm_cpu_engine_memory.txt);
# inside the trainer part of it is memory the process already holds.
VLLM_CPU_RUNTIME_GIB = 0.4


def kv_cache_for_recipe(arch: Architecture, data: DataSection, grpo: GRPOSection, sequences: int) -> int:
    """Whole GiB of KV cache for one generation batch of `sequences` (each process's) at the longest sequence the
    recipe allows (at least 1)."""
    prompt = data.max_prompt_length or 1024  # without a limit TRL does not cut prompts: room for long ones
    tokens = prompt + grpo.max_completion_length
    return vllm_settings.kv_cache_gib(arch.num_layers, arch.kv_dim, sequences, tokens)


def kv_cache_space_gib(arch: Architecture, data: DataSection, grpo: GRPOSection, sequences: int) -> int:
    """What the engine will get: the user's VLLM_CPU_KVCACHE_SPACE when set, else grpo's size for the recipe."""
    user = vllm_settings.user_kv_cache_gib()
    return user if user is not None else kv_cache_for_recipe(arch, data, grpo, sequences)


def vllm_cpu_terms(arch: Architecture, held: Held, kv: int) -> list[Term]:
    """The engine's weights and its KV cache of `kv` GiB (kv_cache_space_gib)."""
    # the engine generates in the precision training multiplies in (train/vllm_cpu.py)
    w = 2 if held.mixed in ("bf16", "fp16") else held.w
    embeddings = 1 if arch.tie_word_embeddings else 2
    packed = embeddings * arch.vocab_size * arch.hidden_size * w
    return [
        Term("vLLM weights", arch.params * w, "static", f"vLLM's own copy, P {arch.params / 1e6:.1f}M x {w} B"),
        Term("vLLM packed vocabulary", packed, "static", f"{embeddings} embedding(s) also packed for its GEMM kernels"),
        Term("vLLM KV cache", kv * GIB, "static", f"VLLM_CPU_KVCACHE_SPACE = {kv} GiB, held for the whole run"),
        Term("vLLM runtime", VLLM_CPU_RUNTIME_GIB * GIB, "static", "its libraries and engine buffers (fitted)"),
    ]
