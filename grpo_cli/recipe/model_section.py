"""`model:`, `lora:` and `quantization:`: the weights a run starts from and how they are trained."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from grpo_cli.recipe.machine import ArchitectureSection
from grpo_cli.recipe.section import Section

Dtype = Literal["bfloat16", "float16", "float32"]
# YAML reads a bare `no` as false
MixedPrecision = Annotated[Literal["auto", "bf16", "fp16", "no"], BeforeValidator(lambda v: "no" if v is False else v)]
# One name where a list is expected is a list of one
Names = Annotated[list[str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)]


class ModelSection(Section):
    name: str = Field(
        description="Hub id (Qwen/Qwen2.5-0.5B-Instruct), local model directory, or a .gguf file.", min_length=1
    )
    dtype: Dtype = Field("bfloat16", description="Weight dtype. TRL would load float32 if none were given.")
    mixed_precision: MixedPrecision = Field(
        "auto",
        description="Matmuls in bf16/fp16 under autocast; weights, gradients and optimizer stay in dtype. "
        "auto: bfloat16 weights -> bf16, float16 -> fp16, float32 -> bf16 where the hardware computes bfloat16 "
        "natively (GPUs with bf16, CPUs with AVX512-BF16 or AMX), else no.",
    )
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"] = "sdpa"
    gradient_checkpointing: bool = Field(True, description="Recompute activations in backward to save memory.")
    trust_remote_code: bool = Field(
        False, description="Run Python code shipped with the model. Off unless you trust it."
    )
    revision: str | None = Field(None, description="Hub branch, tag or commit.")
    tokenizer: str | None = Field(None, description="Tokenizer id or directory when it differs from the model's.")
    chat_template: str | None = Field(
        None,
        min_length=1,
        description="Instead of the tokenizer's: a template TRL ships (qwen2_5) or a .jinja file.",
    )
    text_tokens: list[str] = Field([], max_length=32, description="Added tokens written as plain text (docs/tools.md).")
    architecture: ArchitectureSection | None = Field(
        None,
        description="Shape for `grpo plan` when neither a config.json, a .gguf header nor the built-in table has it.",
    )


class LoraSection(Section):
    r: int = Field(16, ge=1, le=4096, description="LoRA rank.")
    alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: Names = Field(
        default_factory=lambda: ["all-linear"],
        description="Module names to adapt, or `all-linear` for every Linear layer except the output head.",
    )
    bias: Literal["none", "all", "lora_only"] = "none"
    use_rslora: bool = False
    adapter: str | None = Field(
        None, description="Start from this PEFT adapter (folder or hub id) trained on model.name with this r and alpha."
    )


class QuantizationSection(Section):
    bits: Literal[4, 8] = Field(4, description="4 = QLoRA (NF4/FP4), 8 = LLM.int8 base weights.")
    quant_type: Literal["nf4", "fp4"] = "nf4"
    double_quant: bool = Field(True, description="Quantize the block scales too (saves ~0.4 bit/param).")
    compute_dtype: Dtype | None = Field(None, description="Matmul dtype; defaults to model.dtype.")
