"""The training settings every TRL stage shares (GRPOConfig and the SFT stage's SFTConfig are both transformers
TrainingArguments): one mapping from the model and training sections, so the two stages cannot drift apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.schema import TrainingSection


def shared_trainer_args(
    model: ModelSection, training: TrainingSection, output_dir: Path, on_cpu: bool, mixed: str
) -> dict[str, Any]:
    """`on_cpu`: no GPU here (transformers then needs `use_cpu=True` to accept bf16/fp16); `mixed`: the mixed
    precision resolved on this machine (precision.precision_here)."""
    return dict(
        output_dir=str(output_dir),
        use_cpu=on_cpu,
        # Set either way: TRL's default (bf16=True) would emulate bfloat16 on CPUs that lack it.
        bf16=mixed == "bf16",
        fp16=mixed == "fp16",
        gradient_checkpointing=model.gradient_checkpointing,
        trust_remote_code=model.trust_remote_code,
        lr_scheduler_type=training.lr_scheduler_type,
        weight_decay=training.weight_decay,
        max_grad_norm=training.max_grad_norm,
        optim=training.optim,
        seed=training.seed,
        logging_steps=training.logging_steps,
        save_strategy="steps",
        save_steps=training.save_steps,
        save_total_limit=training.save_total_limit,
        report_to=training.report_to,
        disable_tqdm=True,
    )
