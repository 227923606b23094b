"""The recipe sections about the machine a run goes on rather than what it trains: the GPU `grpo plan` fits it to,
the processes `accelerate launch` starts, and the model's shape when no config says it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grpo_cli.recipe.section import Section


class ArchitectureSection(Section):
    """The model's shape, for `grpo plan` when it cannot be read from a config.json or the built-in table."""

    hidden_size: int = Field(ge=1)
    num_layers: int = Field(ge=1)
    num_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    max_position_embeddings: int | None = Field(None, ge=1, description="Context length it was trained for.")


class HardwareSection(Section):
    gpu: str | None = Field(None, description="GPU name for `grpo plan` (e.g. A100-80GB, RTX 4090).")
    gpu_memory_gb: float | None = Field(None, gt=0.0, description="Memory per GPU, when the name is not enough.")


class DistributedSection(Section):
    """Several processes (GPUs, or CPU ranks over gloo) through `accelerate launch`; the recipe stays the same."""

    num_processes: int = Field(1, ge=1, description="Processes in total (all machines), usually one per GPU.")
    strategy: Literal["ddp", "fsdp", "zero2", "zero3"] = Field(
        "ddp",
        description="ddp: full copy per GPU; zero2: shard optimizer states and gradients; "
        "zero3 / fsdp: shard the weights too.",
    )
    accelerate_config: str | None = Field(None, description="Your own accelerate config file (replaces strategy).")
    num_machines: int = Field(1, ge=1)
    machine_rank: int = Field(0, ge=0)
    main_process_ip: str | None = None
    main_process_port: int | None = Field(None, ge=1, le=65535)

    @property
    def zero_stage(self) -> int | None:
        """DeepSpeed ZeRO stage of the strategy (2 or 3), None for DDP and FSDP."""
        return {"zero2": 2, "zero3": 3}.get(self.strategy)
