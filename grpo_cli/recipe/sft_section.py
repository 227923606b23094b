"""The recipe's `sft:` section: supervised fine-tuning (TRL's SFTTrainer) before GRPO, so GRPO starts from a model
that already writes the asked answer format and spends its steps on the answers."""

from __future__ import annotations

from pydantic import Field

from grpo_cli.recipe.section import Section

REFERENCE = "reference"  # the recipe's training rows with their reference solutions
SELF = "self"  # the model's own completions that the recipe's reward scores right (rejection sampling)
# Learning rates commonly used for supervised fine-tuning: adapters take larger steps than whole models.
DEFAULT_LEARNING_RATE = {"lora": 1e-4, "qlora": 1e-4, "full": 2e-5}


class SftSection(Section):
    """Runs before GRPO in `grpo train`, on the recipe's model, LoRA/QLoRA settings and precision; the loss counts
    the completion tokens only. GRPO then continues from the weights it ends with."""

    source: str = Field(
        REFERENCE,
        description="`reference`: the recipe's training rows with their reference solutions, in the answer format "
        "data.answer_marker asks for (GSM8K: the worked solution, then the answer); `self`: completions sampled "
        "from the model that sft.reward scores right (rejection sampling); or a .jsonl/.json/.parquet/.csv file "
        "or hub dataset with a `messages` column or `prompt` and `completion` columns.",
        min_length=1,
    )
    config: str | None = Field(None, description="Hub dataset configuration, for a hub source.")
    split: str = Field("train", description="Hub dataset split, for a hub source.")
    count: int | None = Field(
        None,
        ge=1,
        description="Examples to take (reference, a file: the first N rows; self: the first N training prompts are "
        "sampled). Default: all. reference and self read only the rows within data.limit, never held-out ones.",
    )
    samples_per_prompt: int = Field(
        4, ge=1, le=64, description="self: completions sampled per prompt (with grpo's temperature and budget)."
    )
    reward: str = Field(
        "correctness", min_length=1, description="self: the recipe reward (by name) that decides what is right."
    )
    min_reward: float = Field(1.0, description="self: a completion is kept when the reward scores it at least this.")
    learning_rate: float | None = Field(
        None, gt=0.0, description="Default: 1e-4 with LoRA or QLoRA, 2e-5 for full fine-tuning."
    )
    num_train_epochs: float = Field(1.0, gt=0.0)
    max_steps: int = Field(-1, ge=-1, description="Optimizer steps; -1 uses num_train_epochs.")
    per_device_train_batch_size: int = Field(4, ge=1, description="Examples per micro-batch.")
    gradient_accumulation_steps: int = Field(1, ge=1)
    max_length: int = Field(
        512, ge=8, description="Tokens of prompt and completion together; longer examples are cut at the end."
    )

    def learning_rate_for(self, method: str) -> float:
        """The learning rate the SFT stage trains at, for the recipe's method (full, lora, qlora)."""
        return self.learning_rate or DEFAULT_LEARNING_RATE[method]
