"""The one place where a `Recipe` becomes `GRPOConfig` keyword arguments.

Pure Python (no trl import) so recipe validation can reuse it cheaply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_cli.recipe.precision import mixed_precision
from grpo_cli.recipe.schema import Recipe


def grpo_config_kwargs(
    recipe: Recipe, output_dir: Path, on_cpu: bool = False, mixed: str | None = None
) -> dict[str, Any]:
    """Map every first-class recipe field onto its GRPOConfig name; `trl:` passthrough entries come last.

    `on_cpu`: no GPU here; transformers then needs `use_cpu=True` to accept bf16/fp16 settings.
    `mixed`: the mixed precision resolved on this machine (`precision.mixed_precision_here`); None: by the weights.
    """
    mixed = mixed or mixed_precision(recipe, native_bf16=False)
    model, grpo, training = recipe.model, recipe.grpo, recipe.training
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        use_cpu=on_cpu,
        # Several CPU ranks talk over gloo (NCCL needs GPUs).
        **({"ddp_backend": "gloo"} if on_cpu and recipe.num_processes > 1 else {}),
        # Set either way: TRL's default (bf16=True) would emulate bfloat16 on CPUs that lack it.
        bf16=mixed == "bf16",
        fp16=mixed == "fp16",
        gradient_checkpointing=model.gradient_checkpointing,
        trust_remote_code=model.trust_remote_code,
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
        lr_scheduler_type=training.lr_scheduler_type,
        # transformers 5 folded warmup_ratio into warmup_steps: a float below 1 is a ratio of total steps.
        warmup_steps=training.warmup_ratio or training.warmup_steps,
        weight_decay=training.weight_decay,
        max_grad_norm=training.max_grad_norm,
        per_device_train_batch_size=training.per_device_train_batch_size,
        gradient_accumulation_steps=training.gradient_accumulation_steps,
        max_steps=training.max_steps,
        num_train_epochs=training.num_train_epochs,
        optim=training.optim,
        seed=training.seed,
        logging_steps=training.logging_steps,
        save_strategy="steps",
        save_steps=training.save_steps,
        save_total_limit=training.save_total_limit,
        report_to=training.report_to,
        # The tool writes its own completion samples and metrics; TRL's table printing would clutter the console.
        log_completions=False,
        disable_tqdm=True,
    )
    kwargs.update(recipe.trl)
    return kwargs
