"""Reward models and judges in the memory plan, read without loading a weight (their config.json, a .gguf header or
the built-in table, as for the policy: architectures.py).

Each holds its weights for the whole run at its dtype (a reward model has no LM head: its embedding, its decoder
layers and a one-output score head; a judge is a whole causal LM; `judge: {model: policy}` holds nothing of its own).
After sampling, each scores the batch's completions `batch_size` at a time without gradients (grpo_cli/model_rewards/):
one layer's activations at a time, as the plan's own scoring forward, over the text it reads (`max_length`, or a
prompt and its completion at the budget, plus a judge's own words), plus a judge's float32 scores of one position,
and, for `scale_0_10`, the KV cache of the tokens it generates. With `device: cpu` on a GPU plan they sit in the
process's RAM, shown in phase `off-GPU` and left out of the GPU's figure.
"""

from __future__ import annotations

import math

from grpo_cli.errors import UserError
from grpo_cli.plan import architectures
from grpo_cli.plan.architectures import Architecture
from grpo_cli.plan.sharding import Term
from grpo_cli.recipe.user_code import POLICY, RewardSpec

OFF_GPU = "off-GPU"
# A judge's own words (its prompt template) in tokens: a rough 3 characters a token, on the safe side of English.
CHARS_PER_TOKEN = 3


def reward_model_terms(
    rewards: list[RewardSpec],
    policy: Architecture,
    policy_dtype: str,
    device: str,
    generated: int,
    sequence: int,
    act: tuple[float, float],
) -> list[Term]:
    """The weights, scoring activations and (for a generating judge) KV cache of each reward model and judge;
    `generated`: the completions each process generates at once; `sequence`: the tokens of a prompt and its completion
    the plan sizes sequences at; `act`: the plan's per-token activation constants for the hidden and the ffn size
    (plan/memory.py)."""
    terms: list[Term] = []
    for index, spec in enumerate(rewards):
        if spec.is_model:
            arch = policy if _of_policy(spec) else scorer_architecture(spec, index)
            terms += _terms(spec, arch, policy_dtype, device, generated, sequence, act)
    return terms


def _of_policy(spec: RewardSpec) -> bool:
    return spec.judge is not None and spec.judge.model == POLICY


def scorer_architecture(spec: RewardSpec, index: int) -> Architecture:
    """A reward model's or judge's shape, or one line saying it cannot be told here."""
    name = spec.model or spec.judge.model
    path = f"rewards[{index}].{'model' if spec.model else 'judge.model'}"
    try:
        found = architectures.from_name(name, path=path)
    except KeyError as exc:
        raise UserError(f"cannot read the shape of `{name}` from its config.json: no {exc}", path=path) from None
    except UserError as exc:
        raise UserError(exc.problems[0].message, path=path) from None
    if found is None:
        raise UserError(
            f"cannot tell the architecture of `{name}` offline (not a local model directory, not in the built-in "
            "table): plan it from a local folder with its config.json",
            path=path,
        )
    return found


def _terms(
    spec: RewardSpec,
    arch: Architecture,
    policy_dtype: str,
    device: str,
    generated: int,
    sequence: int,
    act: tuple[float, float],
) -> list[Term]:
    judge = spec.judge
    label = spec.name if spec.name.startswith("judge") else f"{'judge' if judge else 'reward model'} {spec.name}"
    on_cpu = spec.device == "cpu" and not _of_policy(spec)
    where = "in RAM, not on the GPU: " if on_cpu and device != "cpu" else ""
    phase = (lambda p: OFF_GPU) if where else (lambda p: p)
    dtype = policy_dtype if _of_policy(spec) else spec.dtype or policy_dtype
    w = 4 if dtype == "float32" else 2
    h, f, V = arch.hidden_size, arch.intermediate_size, arch.vocab_size
    if _of_policy(spec):
        weights, formula = 0.0, "the policy's own weights, adapters as they are (no second copy)"
    elif judge is not None:
        weights, formula = arch.params * w, f"P {arch.params / 1e6:.1f}M x {w} B ({dtype}), a whole causal LM"
    else:
        params = arch.params - arch.embedding_params + V * h + h  # no LM head; a score head of one output
        weights, formula = params * w, f"P {params / 1e6:.1f}M x {w} B ({dtype}): embedding, layers, one-output head"
    terms = [Term(f"{label}: weights", weights, phase("static"), where + formula)]
    rows = min(spec.batch_size, generated)
    own_words = math.ceil(len(judge.prompt) / CHARS_PER_TOKEN) if judge else 0
    tokens = spec.max_length or sequence + own_words
    read = f"max_length {tokens}" if spec.max_length else f"prompt + completion {tokens - own_words}"
    read += f" + its prompt's ~{own_words}" if own_words and not spec.max_length else ""
    scoring = rows * tokens * (act[0] * h + act[1] * f) * w / 4 + (2 * rows * V * 4 if judge else 0)
    terms.append(
        Term(
            f"{label}: scoring",
            scoring,
            phase("generation"),
            f"{where}{rows} completions x {read} tokens, one layer at a time, no gradients"
            + (" + float32 scores of one position" if judge else ""),
        )
    )
    if judge is not None and judge.score == "scale_0_10":
        length = tokens + judge.max_new_tokens
        cache = rows * length * 2 * arch.num_layers * arch.kv_dim * w
        terms.append(
            Term(
                f"{label}: KV cache",
                cache,
                phase("generation"),
                f"{where}{rows} x {length} tokens x 2 (K,V) x L {arch.num_layers} x kv {arch.kv_dim} x {w} B",
            )
        )
    return terms
