"""The one place where a `Recipe` becomes `GRPOConfig` keyword arguments.

Pure Python (no trl import) so recipe validation can reuse it cheaply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_cli.recipe.precision import mixed_precision
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.trainer_args import shared_trainer_args


def grpo_config_kwargs(
    recipe: Recipe, output_dir: Path, on_cpu: bool = False, mixed: str | None = None
) -> dict[str, Any]:
    """Map every first-class recipe field onto its GRPOConfig name; `trl:` passthrough entries come last.

    `on_cpu`: no GPU here; transformers then needs `use_cpu=True` to accept bf16/fp16 settings.
    `mixed`: the mixed precision resolved on this machine (`precision.precision_here`); None: by the weights.
    """
    mixed = mixed or mixed_precision(recipe.model, native_bf16=False)
    grpo, training = recipe.grpo, recipe.training
    kwargs: dict[str, Any] = dict(
        **shared_trainer_args(recipe.model, training, output_dir, on_cpu, mixed),
        # Several CPU ranks talk over gloo (NCCL needs GPUs).
        **({"ddp_backend": "gloo"} if on_cpu and recipe.num_processes > 1 else {}),
        # GRPO
        num_generations=grpo.num_generations,
        max_completion_length=grpo.max_completion_length,
        loss_type=grpo.loss_type,
        beta=grpo.beta,
        epsilon=grpo.epsilon,
        epsilon_high=grpo.epsilon_high,
        delta=grpo.delta,
        importance_sampling_level=recipe.importance_sampling_level,
        mask_truncated_completions=grpo.mask_truncated_completions,
        scale_rewards=grpo.scale_rewards,
        temperature=grpo.temperature,
        top_p=grpo.top_p,
        top_k=grpo.top_k,
        num_iterations=grpo.num_iterations,
        use_vllm=grpo.use_vllm,
        vllm_mode=grpo.vllm_mode,
        vllm_gpu_memory_utilization=grpo.vllm_gpu_memory_utilization,
        use_liger_kernel=grpo.use_liger_kernel,
        max_tool_calling_iterations=grpo.max_tool_calling_iterations,
        reward_weights=[spec.weight for spec in recipe.rewards],
        # Optimisation
        learning_rate=training.learning_rate,
        # transformers 5 folded warmup_ratio into warmup_steps: a float below 1 is a ratio of total steps.
        warmup_steps=training.warmup_ratio or training.warmup_steps,
        per_device_train_batch_size=training.per_device_train_batch_size,
        gradient_accumulation_steps=training.gradient_accumulation_steps,
        max_steps=training.max_steps,
        num_train_epochs=training.num_train_epochs,
        # The tool writes its own completion samples and metrics; TRL's table printing would clutter the console.
        log_completions=False,
    )
    kwargs.update(recipe.trl)
    return kwargs
