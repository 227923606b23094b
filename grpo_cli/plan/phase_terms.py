"""The terms of a step's two phases: generation (the KV cache, its transients, the no-grad scoring pass) and training
(activations, the chunked LM head, gradients, the optimizer step's temporaries), for one micro-batch. Notation as in
plan/memory.py, which sums them into the peak."""

from __future__ import annotations

from grpo_cli.libraries.seams import CPU_HEAD_TILE
from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.backward_transients import layer_backward_transients
from grpo_cli.plan.kept_inputs import cuda_layer_activations, kept_linear_inputs
from grpo_cli.plan.sharding import Term
from grpo_cli.plan.static_memory import Held
from grpo_cli.recipe.model_section import LoraSection
from grpo_cli.recipe.schema import GRPOSection

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
# On a CPU each sampled token is drawn in bulk (generation/torch_draws.py): per vocabulary entry of each row its
# workspace holds an int64 draw, an int32 and two float32 tensors and a bool (tests/test_torch_draws.py checks).
DRAW_WORKSPACE_BYTES = 8 + 4 + 4 + 4 + 1


def generation_terms(
    grpo: GRPOSection,
    arch: Architecture,
    device: str,
    w: int,
    prompt: int,
    B: int,
    gen_batch: int,
    shared: tuple[int, int] | None = None,
) -> list[Term]:
    """The whole generation batch at once (TRL generates gen_batch completions per process), and what scores it
    after sampling in micro-batches of B; the reward models' terms follow (reward_models.py). `shared`: as for
    training_terms, where the scoring pass runs each prompt once."""
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
    # runs one layer's activations over the prompt tokens; the sampler keeps float32 scores of one position, and on
    # a CPU the bulk draw's workspace for them (generation/torch_draws.py).
    transient = (
        gen_batch * S * 2 * arch.kv_dim * w
        + gen_batch * prompt * (ACT_HIDDEN * h + ACT_FFN * f) * w / 4
        + 2 * gen_batch * V * 4
        + (gen_batch * V * DRAW_WORKSPACE_BYTES if device == "cpu" else 0)
    )
    terms.append(
        Term(
            "generation transients",
            transient,
            "generation",
            "one layer's cache copy on growth + one layer's prefill activations + float32 scores"
            + (" + the draw's workspace" if device == "cpu" else ""),
        )
    )
    if grpo.use_vllm:  # vLLM samples in its own memory: its cache and transients are not the trainer's
        terms = []
    if grpo.beta > 0 or grpo.num_iterations > 1:
        # After sampling, TRL scores the batch without grad (reference and/or old-policy log-probs) in
        # micro-batches of B: one layer's activations and the head's tile at a time.
        chunk = CPU_VOCAB_CHUNK_SIZE if device == "cpu" else VOCAB_CHUNK_SIZE
        tokens, scored, cache = B * S, B * S, 0.0
        if shared is not None:  # each prompt once: fewer tokens, the completions scored, the cache repeated to B rows
            tokens, kv_term = shared_prompt_tokens(arch, w, B, S, *shared)
            scored, cache = B * (S - shared[1]), kv_term.bytes
        rows_s, cols_s = min(scored, TOKEN_CHUNK_SIZE), min(V, chunk)
        scoring = (
            rows_s * chunk * w
            + (rows_s * cols_s * SCORING_TEMPORARIES * 4 if device == "cpu" else 0)
            + tokens * (ACT_HIDDEN * h + ACT_FFN * f) * w / 4
            + cache
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


def sampling_copies_terms(arch: Architecture, device: str, held: Held, lora: LoraSection | None, grpo: GRPOSection):
    """On a CPU under autocast, LoRA without an acting dropout and without vLLM, each adapted Linear samples with a
    merged copy in the autocast dtype (train/merged_generation.py adapter_merged_copy), and the output layer with one
    cast copy of its weight (train/frozen_weights.py output_layer_cast_once); both are dropped when sampling ends."""
    if device != "cpu" or lora is None or lora.dropout != 0 or held.mixed == "no" or held.quantized or grpo.use_vllm:
        return []
    n = arch.num_layers * sum(i * o for _, i, o in arch.adapted_shapes(lora.target_modules))
    head = arch.vocab_size * arch.hidden_size
    formula = f"({n / 1e6:.0f}M adapted weights + V x h {head / 1e6:.0f}M output layer) x 2 B, while sampling"
    return [Term("sampling weight copies", (n + head) * 2, "generation", formula)]


def shares_prompts(device: str, processes: int, B: int, rows: int, G: int, P: int):
    """(distinct prompts in a micro-batch, prompt tokens) where the loss pass runs each prompt once (on a CPU, one
    process: train/shared_prompts.py), else None. A micro-batch of B rows holds at most the generation batch's
    `rows` / G prompts."""
    if device != "cpu" or processes > 1:
        return None
    distinct = min(B, -(-rows // G))
    return (distinct, P) if distinct < B and P > 1 else None


def shared_prompt_tokens(arch: Architecture, w: int, B: int, S: int, U: int, P: int) -> tuple[int, Term]:
    """The tokens the layers see when U distinct prompts run once (U x (P - 1) + B x (S - P + 1)), and what the rows'
    keys and values add: their attention keeps them over all S positions, and the cache repeated to the rows lives
    through the forward pass."""
    T = U * (P - 1) + B * (S - P + 1)
    L, kv_dim = arch.num_layers, arch.kv_dim
    kv = (B * S - T) * L * ACT_KV * kv_dim * w + B * (P - 1) * L * 2 * kv_dim * w
    formula = f"(B {B} x S {S} - T {T}) x L {L} x kv {kv_dim}, and the cache repeated to B rows"
    return T, Term("shared prompt keys/values", kv, "training", formula)


def training_terms(
    arch: Architecture,
    device: str,
    held: Held,
    lora: LoraSection | None,
    step: Term | None,
    B: int,
    S: int,
    shared: tuple[int, int] | None = None,
) -> list[Term]:
    """One micro-batch of B sequences of S tokens: activations, the chunked head, then gradients and the optimizer
    step's temporaries (`step`, None where it has none). `shared`: (distinct prompts, prompt tokens) where the loss
    pass runs each distinct prompt once (train/shared_prompts.py): the layers then see U x (P - 1) + B x (S - P + 1)
    tokens, the head B x (S - P) positions, and every row's keys and values still span S."""
    h, f, L, V = arch.hidden_size, arch.intermediate_size, arch.num_layers, arch.vocab_size
    w, trainable, param_bytes, mixed = held.w, held.trainable, held.param_bytes, held.mixed
    terms: list[Term] = []
    T = B * S
    if shared is not None:
        T, kv_term = shared_prompt_tokens(arch, w, B, S, *shared)
        terms.append(kv_term)
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
    scored = T if shared is None else B * (S - shared[1])  # shared: the head scores the completions only
    rows, cols = min(scored, TOKEN_CHUNK_SIZE), min(V, chunk)
    tile = rows * cols
    # The matmul buffer is allocated [rows, chunk] even when the vocabulary is smaller.
    head = rows * chunk * w + scored * h * 4  # + the float32 accumulator of the hidden-state gradient
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
