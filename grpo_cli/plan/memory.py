"""The memory model behind `grpo plan`: architecture + recipe -> bytes per term -> peak, fit, suggestions.

Notation: P parameters, P_t trainable, w bytes per weight element (bf16 2, fp32 4), G num_generations,
B completions per micro-batch, S = prompt + completion tokens, V vocab, L layers, h hidden, f ffn size,
kv = key/value heads x head_dim.

Peak (tensors) = static + max(generation phase, training phase), where static is what lives for the whole
run (weights, LoRA weights, reference model, optimizer states: plan/static_memory.py). Gradients exist only from
the first backward to the optimizer step (`zero_grad(set_to_none=True)`), so they belong to the training phase.

Constants marked FITTED (here and in plan/phase_terms.py) were fitted to peaks measured on real TRL steps
(benchmarks/memory.py, results in benchmarks/memory_calibration.csv); the others come from the tensor
shapes in the named source code.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_cli.plan import phase_terms, static_memory
from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.phase_terms import HEAD_TERM, generation_terms, training_terms
from grpo_cli.plan.reward_models import reward_model_terms
from grpo_cli.plan.sharding import Term, per_process
from grpo_cli.plan.static_memory import static_terms
from grpo_cli.plan.vllm_memory import kv_cache_space_gib, vllm_cpu_terms
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.schema import Recipe

GIB = 2**30
# What nvidia-smi shows beyond torch's live tensors: the CUDA context and the caching allocator's slack, as measured
# on an H100 (benchmarks/gpu/h100-2026-11-26/calibration.csv: smi less reserved, reserved over allocated).
CUDA_CONTEXT_GIB = 0.79
ALLOCATOR_SLACK = 0.10
# What the kernel counts for a CPU process beyond its live tensors (peak RSS): a fixed part (the Python runtime
# with torch, transformers, peft and TRL imported is 0.38-0.43 GiB of it; tokenizer, data, libraries' buffers and
# what the allocator keeps of large freed blocks the rest) and the allocator's overhead in proportion to the tensors.
# FITTED (benchmarks/memory_fit.py: the pair whose plan-based figure has the smallest largest error, an
# under-estimate counting twice) on the configurations of benchmarks/cpu_memory.py with grpo's allocator (mimalloc)
# and the whole `grpo train` runs of benchmarks/plan_for_data.py; docs/plan.md gives the resulting error.
CPU_RUNTIME_GIB = 0.69
CPU_RSS_PER_TENSOR_BYTE = 1.05


@dataclass
class Plan:
    arch: Architecture
    terms: list[Term]
    static: float
    generation: float
    training: float
    peak_tensors: float
    peak_smi: float
    device: str
    gpu_bytes: float | None = None  # the memory the run has: the GPU's, or the machine's RAM for device "cpu"
    prompt_tokens: int = 0  # the prompt length every sequence is sized at (the data's longest, or the limit)
    completion_tokens: int = 0  # the completion budget, every sequence planned at its full length
    sft: float = 0.0  # the SFT stage's training phase (`sft:`, no generation); 0 without one
    sft_peak: float = 0.0  # its tensors at their peak: static (no reference model yet) + that phase

    @property
    def peak_rss(self) -> float:
        """Peak resident set of a CPU process: the runtime plus the tensors with the allocator's overhead."""
        return CPU_RUNTIME_GIB * GIB + CPU_RSS_PER_TENSOR_BYTE * self.peak_tensors

    @property
    def expected(self) -> float:
        """What the fit verdict compares: nvidia-smi's figure on a GPU, the process's peak RSS on a CPU."""
        return self.peak_rss if self.device == "cpu" else self.peak_smi

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_bytes is None else self.expected <= self.gpu_bytes

    def term(self, name: str) -> Term:
        return next(t for t in self.terms if t.name == name)


def memory_plan(
    recipe: Recipe,
    arch: Architecture,
    device: str = "cuda",
    gpu_bytes: float | None = None,
    prompt_tokens: int | None = None,
) -> Plan:
    """Bytes per term for one process (device), without loading anything. Sequences are sized at `prompt_tokens`
    (the longest prompt of the data: TRL pads a batch to its longest prompt) or, without it, at the recipe's limit,
    with completions at the full budget."""
    grpo, lora, section = recipe.grpo, recipe.lora, recipe.sft
    held = static_memory.held(recipe.model, lora, recipe.quantization is not None, arch, device)
    prompt, generated = prompt_tokens or limit_prompt_tokens(recipe.data), recipe.generation_batch_per_process
    terms = static_terms(arch, device, held, lora, recipe.quantization, grpo, recipe.training.optim, recipe.distributed)
    if grpo.use_vllm and device == "cpu":  # the engine in the trainer's process: static terms (vllm_memory.py)
        terms += vllm_cpu_terms(arch, held, kv_cache_space_gib(arch, recipe.data, grpo, generated))
    batch, seq = recipe.training.per_device_train_batch_size, prompt + grpo.max_completion_length
    processes, G = recipe.distributed.num_processes, grpo.num_generations
    shared = phase_terms.shares_prompts(device, processes, batch, generated, G, prompt)
    terms += generation_terms(grpo, arch, device, held.w, prompt, batch, generated, shared)
    terms += phase_terms.sampling_copies_terms(arch, device, held, lora, grpo)
    activation_bytes = (phase_terms.ACT_HIDDEN, phase_terms.ACT_FFN)  # read at call time: memory_fit.py sets them
    terms += reward_model_terms(recipe.rewards, arch, held.dtype, device, generated, seq, activation_bytes)
    step = static_memory.optimizer_step_temporaries(device, held, recipe.training.optim, recipe.distributed)
    terms += training_terms(arch, device, held, lora, step, batch, seq, shared)
    if section is not None:  # supervised steps before GRPO: a training phase at the SFT stage's batch and length
        sft_terms = training_terms(
            arch, device, held, lora, step, section.per_device_train_batch_size, section.max_length
        )
        terms += [
            Term(f"SFT {t.name}", t.bytes, t.phase.replace("training", "SFT"), t.formula)
            for t in sft_terms
            if t.phase != "comparison"
        ]
    terms = per_process(terms, recipe.distributed, recipe.trl, arch, held.w)

    static = sum(t.bytes for t in terms if t.phase == "static")
    generation = sum(t.bytes for t in terms if t.phase == "generation")
    training = _phase_peak(terms, "training", recipe.training.gradient_accumulation_steps > 1)
    sft = _phase_peak(terms, "SFT", section is not None and section.gradient_accumulation_steps > 1)
    # The SFT stage runs before GRPO builds its reference model: the larger of the two stages decides the fit.
    sft_peak = static - sum(t.bytes for t in terms if t.name == "reference model") + sft if sft else 0.0
    peak = max(static + max(generation, training), sft_peak)
    smi = peak * (1 + ALLOCATOR_SLACK) + CUDA_CONTEXT_GIB * GIB
    if grpo.use_vllm and gpu_bytes:
        smi += grpo.vllm_gpu_memory_utilization * gpu_bytes
    completion = grpo.max_completion_length
    return Plan(
        arch, terms, static, generation, training, peak, smi, device, gpu_bytes, prompt, completion, sft, sft_peak
    )


def _phase_peak(terms: list[Term], phase: str, accumulating: bool) -> float:
    """A training phase's peak: at the LM head's backward (every activation still alive, no parameter gradient yet,
    except that with gradient accumulation every micro-batch after the first runs beside the gradients summed so
    far), with checkpointing possibly at a layer's recompute (the head's tiles freed by then), or at the optimizer
    step (every gradient, activations gone), whichever is largest."""
    held = sum(t.bytes for t in terms if accumulating and t.phase == f"{phase}-late" and t.name.endswith("gradients"))
    at_head_backward = held + sum(t.bytes for t in terms if t.phase == phase)
    head = sum(t.bytes for t in terms if t.phase == phase and t.name.endswith(HEAD_TERM))
    at_recompute = at_head_backward - head + sum(t.bytes for t in terms if t.phase == f"{phase}-recompute")
    at_optimizer_step = sum(t.bytes for t in terms if t.phase == f"{phase}-late")
    return max(at_head_backward, at_recompute, at_optimizer_step)


def limit_prompt_tokens(data: DataSection) -> int:
    """The longest prompt the recipe allows; 256 when it sets no limit and the data was not measured."""
    return data.max_prompt_length or 256
