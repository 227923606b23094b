"""The recipe schema: one typed `Recipe` that every command receives. Loading never imports torch or trl (so
`grpo validate` stays fast), except to check a `trl:` passthrough section against `GRPOConfig` itself."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, field_validator

from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.eval_section import EvalSection
from grpo_cli.recipe.health_section import HealthSection
from grpo_cli.recipe.machine import DistributedSection, HardwareSection
from grpo_cli.recipe.model_section import LoraSection, ModelSection, QuantizationSection
from grpo_cli.recipe.section import Section
from grpo_cli.recipe.sft_section import SftSection
from grpo_cli.recipe.user_code import EnvironmentSpec, RewardSpec, ToolSpec
from grpo_cli.recipe.validation_section import ValidationSection

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
Optimizer = Literal[
    "adamw_torch", "adamw_torch_fused", "adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit", "paged_adamw_32bit",
    "adafactor", "sgd",
]  # fmt: skip
Scheduler = Literal[
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup", "cosine_with_min_lr"
]

# `training.report_to`: the trackers transformers reports to (`transformers.integrations.INTEGRATION_TO_CALLBACK`,
# kept equal by a test so validation needs no torch), `none` for none and `all` for every one installed.
Tracker = Literal[
    "none",
    "all",
    "azure_ml",
    "clearml",
    "codecarbon",
    "comet_ml",
    "dagshub",
    "dvclive",
    "flyte",
    "kubeflow",
    "mlflow",
    "neptune",
    "swanlab",
    "tensorboard",
    "trackio",
    "wandb",
]


def generation_batch(per_device_batch: int, processes: int, steps_per_generation: int) -> int:
    """TRL's generation batch in completions (per-device batch x processes x steps_per_generation): whole groups."""
    return per_device_batch * processes * steps_per_generation


class GRPOSection(Section):
    num_generations: int = Field(8, ge=2, description="Completions sampled per prompt (the group size G).")
    max_completion_length: int = Field(256, ge=1)
    loss_type: LossType = "dapo"
    beta: float = Field(0.0, ge=0.0, description="KL coefficient; > 0 needs a reference model.")
    epsilon: float = Field(0.2, gt=0.0, description="Lower clipping bound.")
    epsilon_high: float | None = Field(None, gt=0.0, description="Upper clipping bound (DAPO clip-higher).")
    delta: float | None = Field(None, gt=0.0, description="Two-sided clipping of the importance ratio.")
    importance_sampling_level: Literal["token", "sequence"] | None = Field(
        None, description="Defaults to `sequence` for luspo, `token` otherwise."
    )
    mask_truncated_completions: bool = False
    scale_rewards: Literal["group", "batch", "none"] = "group"
    temperature: float = Field(1.0, gt=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    num_iterations: int = Field(1, ge=1, description="Optimisation passes per generation batch (mu).")
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0.0, le=1.0)
    use_liger_kernel: bool = Field(
        False,
        description="Liger RMSNorm/SwiGLU/RoPE kernels (CUDA only): about half their memory in training, 1.6x "
        "their time per generated token, so slower GRPO steps (benchmarks/gpu/README.md).",
    )
    zero_variance_groups: Literal["keep", "skip", "resample"] = Field(
        "keep", description="Groups whose completions all scored the same: keep (TRL), skip, resample."
    )
    zero_variance_rounds: int = Field(2, ge=1, le=16, description="resample: extra generation rounds at most per step.")
    max_tool_calling_iterations: int | None = Field(
        None,
        ge=1,
        description="With tools: tool-calling turns at most per completion (None: until the completion budget).",
    )

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _bool_scale(cls, value: Any) -> Any:
        return {True: "group", False: "none"}.get(value, value) if isinstance(value, bool) else value


class TrainingSection(Section):
    output_dir: str | None = Field(None, description="Run directory; defaults to runs/<recipe name>.")
    learning_rate: float = Field(1e-6, gt=0.0)
    lr_scheduler_type: Scheduler = "linear"
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, ge=0.0)
    per_device_train_batch_size: int = Field(8, ge=1, description="Completions (not prompts) per micro-batch.")
    gradient_accumulation_steps: int = Field(1, ge=1)
    max_steps: int = Field(-1, ge=-1, description="Optimizer steps; -1 uses num_train_epochs.")
    num_train_epochs: float = Field(1.0, gt=0.0)
    optim: Optimizer = "adamw_torch"
    seed: int = 42
    logging_steps: int = Field(1, ge=1)
    save_steps: int = Field(100, ge=1)
    save_total_limit: int | None = Field(2, ge=1)
    report_to: Annotated[list[Tracker], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)] = Field(
        default_factory=lambda: ["none"],
        description="Trackers to log to (tensorboard, trackio, wandb, ...); none, or all that are installed.",
    )
    log_completions: int = Field(4, ge=0, description="Sample completions saved per logging step.")
    health: HealthSection = Field(default_factory=HealthSection, description="The health watch; docs/health.md.")


class Recipe(Section):
    """A whole GRPO run. Absent `lora` = full fine-tuning; `quantization` + `lora` = QLoRA."""

    name: str | None = Field(None, description="Run name; defaults to the recipe file name.")
    model: ModelSection
    lora: LoraSection | None = None
    quantization: QuantizationSection | None = None
    data: DataSection = Field(default_factory=DataSection)
    rewards: list[RewardSpec] = Field(default_factory=list, description="Required to train; evaluation reads none.")
    tools: list[ToolSpec] = Field(default_factory=list, description="Functions the model may call in a completion.")
    environment: EnvironmentSpec | None = Field(
        None,
        description="A class whose reset(**row) starts each rollout "
        "and whose public methods are tools (TRL's environment_factory).",
    )
    sft: SftSection | None = Field(None, description="Supervised fine-tuning before GRPO (TRL's SFTTrainer).")
    grpo: GRPOSection = Field(default_factory=GRPOSection)
    training: TrainingSection = Field(default_factory=TrainingSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    validation: ValidationSection | None = Field(None, description="Held-out accuracy while training; absent = off.")
    hardware: HardwareSection = Field(default_factory=HardwareSection)
    distributed: DistributedSection = Field(default_factory=DistributedSection)
    trl: dict[str, Any] = Field(
        default_factory=dict, description="Any other GRPOConfig field, checked against GRPOConfig itself."
    )

    _source: Path | None = PrivateAttr(None)

    @field_validator("rewards", "tools", mode="before")
    @classmethod
    def _bare_names(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": item} if isinstance(item, str) else item for item in value]
        return value

    @property
    def run_name(self) -> str:
        return self.name or (self._source.stem if self._source else "grpo")

    @property
    def output_dir(self) -> Path:
        return Path(self.training.output_dir or f"runs/{self.run_name}")

    @property
    def method(self) -> str:
        if self.lora is None:
            return "full"
        return "qlora" if self.quantization is not None else "lora"

    @property
    def num_processes(self) -> int:
        return self.distributed.num_processes

    @property
    def steps_per_generation(self) -> int:
        return int(self.trl.get("steps_per_generation") or self.training.gradient_accumulation_steps)

    @property
    def generation_batch_size(self) -> int:
        """Completions generated at once, over all processes."""
        if self.trl.get("generation_batch_size"):
            return int(self.trl["generation_batch_size"])
        return generation_batch(
            self.training.per_device_train_batch_size, self.num_processes, self.steps_per_generation
        )

    @property
    def generation_batch_per_process(self) -> int:
        """Completions each process generates at once (its KV cache holds all of them)."""
        return self.generation_batch_size // self.num_processes

    def total_steps(self, rows: int) -> int:
        """Optimizer steps the run takes over `rows` prompts: max_steps when set, else the epochs'."""
        return self.training.max_steps if self.training.max_steps > 0 else self.optimizer_steps(rows)

    def optimizer_steps(self, rows: int) -> int:
        """Optimizer steps for `num_train_epochs` over `rows` prompts (max_steps = -1), as TRL counts them."""
        prompts_per_generation = self.generation_batch_size // self.grpo.num_generations
        generations = math.ceil(rows / prompts_per_generation)
        micro_steps = generations * self.steps_per_generation * self.grpo.num_iterations
        return math.ceil(micro_steps / self.training.gradient_accumulation_steps * self.training.num_train_epochs)

    @property
    def importance_sampling_level(self) -> str:
        return self.grpo.importance_sampling_level or ("sequence" if self.grpo.loss_type == "luspo" else "token")
