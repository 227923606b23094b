"""The memory model behind `grpo plan`: architecture + recipe -> bytes per term -> peak, fit, suggestions.

Notation: P parameters, P_t trainable, w bytes per weight element (bf16 2, fp32 4), G num_generations,
B completions per micro-batch, S = prompt + completion tokens, V vocab, L layers, h hidden, f ffn size,
kv = key/value heads x head_dim.

Peak (tensors) = static + max(generation phase, training phase), where static is what lives for the whole
run (weights, LoRA weights, reference model, optimizer states: plan/static_memory.py). Gradients exist only from
the first backward to the optimizer step (`zero_grad(set_to_none=True)`), so they belong to the training phase.

Constants marked FITTED were fitted to live-tensor peaks measured on real TRL steps
(benchmarks/memory.py, results in benchmarks/memory_calibration.csv); the others come from the tensor
shapes in the named source code.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_cli.libraries.seams import CPU_HEAD_TILE
from grpo_cli.plan import static_memory
from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.backward_transients import layer_backward_transients
from grpo_cli.plan.kept_inputs import cuda_layer_activations, kept_linear_inputs
from grpo_cli.plan.reward_models import reward_model_terms
from grpo_cli.plan.sharding import Term, per_process
from grpo_cli.plan.static_memory import Held, static_terms
from grpo_cli.plan.vllm_memory import kv_cache_space_gib, vllm_cpu_terms
from grpo_cli.recipe.schema import DataSection, GRPOSection, LoraSection, Recipe

GIB = 2**30
HEAD_TERM = "logits (chunked head)"

# trl/kernels/chunked_logprob.py: the LM head is projected in [TOKEN_CHUNK_SIZE, CHUNK] tiles.
TOKEN_CHUNK_SIZE = 4096
VOCAB_CHUNK_SIZE = 32768
# On a CPU grpo narrows the tiles to this width (libraries/seams.py, narrow_head_tiles): the torch fold holds float32
# copies of a tile.
CPU_VOCAB_CHUNK_SIZE = CPU_HEAD_TILE
# Without Triton (CPU) `_forward_tile`/`_backward_tile` hold float32 tile-sized temporaries (z, p, log p,
# the gradient and its products); with Triton (CUDA) the folds run in registers. FITTED: 7.5 tiles (refitted with
# 8192-wide tiles by benchmarks/memory_fit.py: unchanged).
CPU_HEAD_TEMPORARIES = 7.5
# The no-grad scoring pass (reference / old log-probs) keeps fewer: no backward temporaries.
SCORING_TEMPORARIES = 3.0

# Activation bytes per token per decoder layer: (c_h x h + c_f x f + c_kv x kv) x w, plus c_h32 x h x 4 B that are
# float32 whatever the weights (RMSNorm computes in float32 and keeps its input and output for the backward).
# Without checkpointing every layer keeps these for backward; with it only one layer at a time does (plus the
# h-sized layer input of every layer). FITTED by benchmarks/memory_fit.py on the CPU configurations of
# benchmarks/memory_calibration.csv (Llama- and Qwen2-shaped models, SDPA, bf16 and float32 weights); its output
# and docs/plan.md give the error.
ACT_HIDDEN = 5.5
ACT_FFN = 2.0
ACT_KV = 1.0
ACT_HIDDEN_FP32 = 2.0


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
    warmup: float = 0.0  # the warm-up's training phase (`warmup:`, no generation); 0 without one
    warmup_peak: float = 0.0  # its tensors at their peak: static (no reference model yet) + that phase

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
    grpo, lora, warm = recipe.grpo, recipe.lora, recipe.warmup
    held = static_memory.held(recipe.model, lora, recipe.quantization is not None, arch, device)
    prompt, generated = prompt_tokens or limit_prompt_tokens(recipe.data), recipe.generation_batch_per_process
    terms = static_terms(arch, device, held, lora, recipe.quantization, grpo, recipe.training.optim, recipe.distributed)
    if grpo.use_vllm and device == "cpu":  # the engine in the trainer's process: static terms (vllm_memory.py)
        terms += vllm_cpu_terms(arch, held, kv_cache_space_gib(arch, recipe.data, grpo, generated))
    batch, seq = recipe.training.per_device_train_batch_size, prompt + grpo.max_completion_length
    terms += _generation_terms(grpo, arch, device, held.w, prompt, batch, generated)
    terms += reward_model_terms(recipe.rewards, arch, held.dtype, device, generated, seq, (ACT_HIDDEN, ACT_FFN))
    step = static_memory.optimizer_step_temporaries(device, held, recipe.training.optim, recipe.distributed)
    terms += _training_terms(arch, device, held, lora, step, batch, seq)
    if warm is not None:  # supervised steps before GRPO: a training phase at the warm-up's batch and length
        warm_terms = _training_terms(arch, device, held, lora, step, warm.per_device_train_batch_size, warm.max_length)
        terms += [
            Term(f"warm-up {t.name}", t.bytes, t.phase.replace("training", "warm-up"), t.formula)
            for t in warm_terms
            if t.phase != "comparison"
        ]
    terms = per_process(terms, recipe.distributed, recipe.trl, arch, held.w)

    static = sum(t.bytes for t in terms if t.phase == "static")
    generation = sum(t.bytes for t in terms if t.phase == "generation")
    training = _phase_peak(terms, "training", recipe.training.gradient_accumulation_steps > 1)
    warmup = _phase_peak(terms, "warm-up", warm is not None and warm.gradient_accumulation_steps > 1)
    # The warm-up runs before GRPO builds its reference model: the larger of the two stages decides the fit.
    warmup_peak = static - sum(t.bytes for t in terms if t.name == "reference model") + warmup if warmup else 0.0
    peak = max(static + max(generation, training), warmup_peak)
    smi = peak * (1 + ALLOCATOR_SLACK) + CUDA_CONTEXT_GIB * GIB
    if grpo.use_vllm and gpu_bytes:
        smi += grpo.vllm_gpu_memory_utilization * gpu_bytes
    completion = grpo.max_completion_length
    return Plan(
        arch, terms, static, generation, training, peak, smi, device, gpu_bytes, prompt, completion, warmup, warmup_peak
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


def _generation_terms(
    grpo: GRPOSection, arch: Architecture, device: str, w: int, prompt: int, B: int, gen_batch: int
) -> list[Term]:
    """The whole generation batch at once (TRL generates gen_batch completions per process), and what scores it
    after sampling in micro-batches of B; the reward models' terms follow (reward_models.py)."""
    h, f, L, V = arch.hidden_size, arch.intermediate_size, arch.num_layers, arch.vocab_size
    S = prompt + grpo.max_completion_length
    terms: list[Term] = []
    kv_cache = gen_batch * S * 2 * L * arch.kv_dim * w
    terms.append(
        Term(
            "generation KV cache",
            kv_cache,
            "generation",
            f"{gen_batch} sequences x S {S} x 2 (K,V) x L {L} x kv {arch.kv_dim} x {w} B",
        )
    )
    # transformers' DynamicCache grows by concatenation: one layer's cache is briefly held twice; the prefill
    # runs one layer's activations over the prompt tokens; the sampler keeps float32 scores of one position.
    transient = (
        gen_batch * S * 2 * arch.kv_dim * w
        + gen_batch * prompt * (ACT_HIDDEN * h + ACT_FFN * f) * w / 4
        + 2 * gen_batch * V * 4
    )
    terms.append(
        Term(
            "generation transients",
            transient,
            "generation",
            "one layer's cache copy on growth + one layer's prefill activations + float32 scores",
        )
    )
    if grpo.use_vllm:  # vLLM samples in its own memory: its cache and transients are not the trainer's
        terms = []
    if grpo.beta > 0 or grpo.num_iterations > 1:
        # After sampling, TRL scores the batch without grad (reference and/or old-policy log-probs) in
        # micro-batches of B: one layer's activations and the head's tile at a time.
        chunk = CPU_VOCAB_CHUNK_SIZE if device == "cpu" else VOCAB_CHUNK_SIZE
        rows_s, cols_s = min(B * S, TOKEN_CHUNK_SIZE), min(V, chunk)
        scoring = (
            rows_s * chunk * w
            + (rows_s * cols_s * SCORING_TEMPORARIES * 4 if device == "cpu" else 0)
            + B * S * (ACT_HIDDEN * h + ACT_FFN * f) * w / 4
        )
        terms.append(
            Term(
                "scoring forward",
                scoring,
                "generation",
                "reference/old log-probs after sampling: head tile"
                + (" + float32 temporaries" if device == "cpu" else ""),
            )
        )
    if grpo.use_vllm and device != "cpu":  # on a CPU: static terms (vllm_memory.py)
        terms.append(
            Term(
                "vLLM reservation",
                0.0,
                "generation",
                f"vllm_gpu_memory_utilization {grpo.vllm_gpu_memory_utilization} of the GPU (added below)",
            )
        )
    return terms


def _training_terms(
    arch: Architecture, device: str, held: Held, lora: LoraSection | None, step: Term | None, B: int, S: int
) -> list[Term]:
    """One micro-batch of B sequences of S tokens: activations, the chunked head, then gradients and the optimizer
    step's temporaries (`step`, None where it has none)."""
    h, f, L, V = arch.hidden_size, arch.intermediate_size, arch.num_layers, arch.vocab_size
    w, trainable, param_bytes, mixed = held.w, held.trainable, held.param_bytes, held.mixed
    terms: list[Term] = []
    T = B * S
    if device == "cuda":
        per_token_layer = cuda_layer_activations(arch, w)
    else:
        per_token_layer = (ACT_HIDDEN * h + ACT_FFN * f + ACT_KV * arch.kv_dim) * w + ACT_HIDDEN_FP32 * h * 4
    per_token_layer += kept_linear_inputs(arch, held, lora)
    if held.checkpointing:
        activations = T * L * h * w
        act_formula = f"T {T} tokens x L {L} x h {h} x {w} B layer-input checkpoints"
        # The head's tiles are freed before the last layer is recomputed, so a recomputed layer's activations never
        # coexist with them (measured on tiny models, where the two are of a size: the peak holds no layer's).
        terms.append(
            Term(
                "recomputed layer",
                T * per_token_layer,
                "training-recompute",
                f"T {T} tokens x one layer's {per_token_layer / 1e3:.1f} KB/token, after the head's backward",
            )
        )
    else:
        activations = T * L * per_token_layer
        act_formula = f"T {T} tokens x L {L} x {per_token_layer / 1e3:.1f} KB/token (no checkpointing)"
    terms.append(Term("activations", activations, "training", act_formula))
    terms += layer_backward_transients(arch, device, held, lora, T)
    if lora is None and w == 4 and mixed != "no":
        # Autocast caches its low-precision copy of each trainable float32 weight for the forward, and autograd
        # keeps it for the backward (torch autocast's weight cache): 2 B/param until the backward ends.
        terms.append(
            Term(
                "autocast weight copies",
                trainable * 2,
                "training",
                f"P_t {trainable / 1e6:.1f}M x 2 B ({mixed} copies of float32 weights)",
            )
        )

    chunk = CPU_VOCAB_CHUNK_SIZE if device == "cpu" else VOCAB_CHUNK_SIZE
    rows, cols = min(T, TOKEN_CHUNK_SIZE), min(V, chunk)
    tile = rows * cols
    # The matmul buffer is allocated [rows, chunk] even when the vocabulary is smaller.
    head = rows * chunk * w + T * h * 4  # + the float32 accumulator of the hidden-state gradient
    head_formula = f"mm buffer {rows} x {chunk} x {w} B + float32 hidden grad"
    if device == "cpu":
        head += CPU_HEAD_TEMPORARIES * tile * 4
        head_formula += f" + {CPU_HEAD_TEMPORARIES:g} float32 tiles of temporaries (no Triton on CPU)"
    if lora is None:
        head += V * h * (4 + w)  # float32 lm_head gradient accumulator, then its cast to the weight dtype
        head_formula += " + float32 lm_head grad"
    terms.append(Term(HEAD_TERM, head, "training", head_formula))
    unchunked_formula = f"2 x {w} B x B {B} x S {S} x V {V}: what an unchunked trainer would hold instead"
    terms.append(Term("logits if unchunked", 2 * w * B * S * V, "comparison", unchunked_formula))
    grads = trainable * param_bytes
    terms.append(Term("gradients", grads, "training-late", f"P_t {trainable / 1e6:.2f}M x {param_bytes} B"))
    if step is not None:
        terms.append(step)
    return terms
