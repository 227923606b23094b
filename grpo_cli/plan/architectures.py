"""Model shapes for `grpo plan`, read without loading any weight.

Sources, in order: the recipe's `model.architecture` (by hand), a local model directory's config.json, a local
.gguf file's header, a built-in table of common models (numbers from their config.json files, see design notes
section 5), and the hub's config.json when online.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.schema import GRPOSection


@dataclass(frozen=True)
class Architecture:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool = False
    max_position_embeddings: int | None = None  # the positions it was trained for (with RoPE scaling); None: unknown

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linear_shapes(self) -> list[tuple[str, int, int]]:
        """(name, in, out) of the Linear layers of one decoder layer (Llama/Qwen2/Mistral family)."""
        h, f = self.hidden_size, self.intermediate_size
        return [
            ("q_proj", h, self.q_dim),
            ("k_proj", h, self.kv_dim),
            ("v_proj", h, self.kv_dim),
            ("o_proj", self.q_dim, h),
            ("gate_proj", h, f),
            ("up_proj", h, f),
            ("down_proj", f, h),
        ]

    def adapted_shapes(self, targets: list[str]) -> list[tuple[str, int, int]]:
        """The decoder Linears LoRA adapts; `all-linear` adapts every one, not lm_head."""
        return [(n, i, o) for n, i, o in self.linear_shapes() if targets == ["all-linear"] or n in targets]

    def linear_inputs(self, target_modules: list[str]) -> int:
        """Input elements per token of the Linear layers LoRA adapts (each adapter keeps its own copy)."""
        return sum(i for _, i, _ in self.adapted_shapes(target_modules))

    @property
    def distinct_linear_inputs(self) -> int:
        """Input elements per token of one layer's distinct Linear inputs: q/k/v share one, gate/up another."""
        return sum(i for n, i, _ in self.linear_shapes() if n in ("q_proj", "o_proj", "gate_proj", "down_proj"))

    @property
    def linear_params(self) -> int:
        """Parameters in decoder Linear layers: what QLoRA quantises (embeddings and lm_head stay in dtype)."""
        per_layer = sum(i * o for _, i, o in self.linear_shapes())
        return self.num_layers * per_layer

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def params(self) -> int:
        bias = (self.q_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        norms = 2 * self.hidden_size
        return self.linear_params + self.num_layers * (bias + norms) + self.embedding_params + self.hidden_size

    def lora_params(self, r: int, targets: list[str]) -> int:
        """r x (in + out) per adapted Linear."""
        return self.num_layers * sum(r * (i + o) for _, i, o in self.adapted_shapes(targets))


def _arch(name, h, layers, heads, kv, hd, ffn, vocab, tied, bias=False, positions=None) -> Architecture:
    return Architecture(name, h, layers, heads, kv, hd, ffn, vocab, tied, bias, positions)


BUILTIN: dict[str, Architecture] = {
    a.name.lower(): a
    for a in [
        _arch("Qwen/Qwen2.5-0.5B-Instruct", 896, 24, 14, 2, 64, 4864, 151936, True, True, 32768),
        _arch("Qwen/Qwen2.5-Coder-0.5B-Instruct", 896, 24, 14, 2, 64, 4864, 151936, True, True, 32768),
        _arch("Qwen/Qwen2.5-1.5B-Instruct", 1536, 28, 12, 2, 128, 8960, 151936, True, True, 32768),
        _arch("Qwen/Qwen2.5-3B-Instruct", 2048, 36, 16, 2, 128, 11008, 151936, True, True, 32768),
        _arch("Qwen/Qwen2.5-7B-Instruct", 3584, 28, 28, 4, 128, 18944, 152064, False, True, 32768),
        _arch("Qwen/Qwen2.5-14B-Instruct", 5120, 48, 40, 8, 128, 13824, 152064, False, True, 32768),
        _arch("Qwen/Qwen3-0.6B", 1024, 28, 16, 8, 128, 3072, 151936, True, False, 40960),
        _arch("meta-llama/Llama-3.2-1B-Instruct", 2048, 16, 32, 8, 64, 8192, 128256, True, False, 131072),
        _arch("meta-llama/Llama-3.2-3B-Instruct", 3072, 28, 24, 8, 128, 8192, 128256, True, False, 131072),
        _arch("meta-llama/Llama-3.1-8B-Instruct", 4096, 32, 32, 8, 128, 14336, 128256, False, False, 131072),
        _arch("HuggingFaceTB/SmolLM2-135M-Instruct", 576, 30, 9, 3, 64, 1536, 49152, True, False, 8192),
    ]
}
# Base (non-instruct) checkpoints share their instruct sibling's shape.
for _key, _value in list(BUILTIN.items()):
    BUILTIN[_key.removesuffix("-instruct")] = _value


def from_config(config: dict[str, Any], name: str) -> Architecture:
    """From a Hugging Face config.json dict."""
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    return Architecture(
        name=name,
        hidden_size=hidden,
        num_layers=config["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or hidden // heads,
        intermediate_size=config["intermediate_size"],
        vocab_size=config["vocab_size"],
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
        max_position_embeddings=_positions(config),
    )


def _positions(config: dict[str, Any]) -> int | None:
    """The context the model was trained for; RoPE scaling that stretches it (linear, dynamic, YaRN) counted."""
    base = config.get("max_position_embeddings")
    if not isinstance(base, int):
        return None
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    rope = rope if isinstance(rope, dict) else {}
    factor = rope.get("factor")
    if rope.get("rope_type", rope.get("type")) in ("linear", "dynamic", "yarn") and isinstance(factor, (int, float)):
        return max(base, int((rope.get("original_max_position_embeddings") or base) * factor))
    return base


def check_context(data: DataSection, grpo: GRPOSection, arch: Architecture) -> None:
    """A prompt and completion budget beyond the positions the model was trained for: one line, before any run."""
    limit = arch.max_position_embeddings
    prompt, budget = data.max_prompt_length or 0, grpo.max_completion_length
    if limit is None or prompt + budget <= limit:
        return
    plus = f" + {prompt} of prompt (data.max_prompt_length)" if prompt else ""
    raise UserError(
        f"{budget} completion tokens{plus} exceed the {limit} positions {arch.name} was trained for "
        f"(max_position_embeddings); lower it to at most {max(1, limit - prompt)}",
        path="grpo.max_completion_length",
    )


def lookup_builtin(name: str) -> Architecture | None:
    key = name.lower()
    if key in BUILTIN:
        return BUILTIN[key]
    # a .gguf or local copy named after a known model: SmolLM2-135M-Instruct.Q4_1.gguf
    stem = Path(key).name
    for known, arch in BUILTIN.items():
        short = known.split("/")[-1]
        if stem.startswith(short + ".") or stem == short:
            return arch
    return None


def resolve(model: ModelSection) -> Architecture:
    """The architecture of the recipe's model, without loading weights."""
    manual = model.architecture
    if manual is not None:
        return Architecture(name=model.name, **manual.model_dump())
    found = from_name(model.name, model.revision)
    if found is not None:
        return found
    raise UserError(
        f"cannot tell the architecture of `{model.name}` offline (not a local model directory, not in the "
        f"built-in table: {', '.join(sorted({a.name for a in BUILTIN.values()}))}); give it by hand under "
        "model.architecture: hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size, "
        "vocab_size, tie_word_embeddings, qkv_bias",
        path="model.architecture",
    )


def from_name(name: str, revision: str | None = None, path: str = "model.name") -> Architecture | None:
    """A model's shape from its local config.json or .gguf header, the built-in table, or the hub's config.json when
    online; None when none of them has it. `path`: the recipe key an unreadable file is reported at."""
    from grpo_cli.recipe.sources import model_location

    location = Path(model_location(name))
    if location.is_dir() and (location / "config.json").exists():
        return from_config(json.loads((location / "config.json").read_text()), name)
    if location.is_file() and location.suffix == ".gguf":
        from grpo_cli.plan.gguf_header import GGUFError, architecture_fields

        try:
            return Architecture(name=name, **architecture_fields(location))
        except (GGUFError, OSError) as exc:
            raise UserError(f"cannot read the architecture from {location}: {exc}", path=path) from None
    found = lookup_builtin(name)
    if found is not None or location.exists():
        return found
    config = _hub_config(name, revision)
    return from_config(config, name) if config is not None else None


def _hub_config(name: str, revision: str | None) -> dict[str, Any] | None:
    """config.json from the hub when reachable; None offline (the caller explains what to do)."""
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(name, "config.json", revision=revision)
        return json.loads(Path(path).read_text())
    except Exception:  # offline, gated, or not a model repo: all mean "not available here"
        return None
