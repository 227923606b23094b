"""Recipe -> GRPOConfig + GRPOTrainer: the model, data, rewards and tools a recipe names, mapped onto TRL."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from grpo_cli.progress import quiet_libraries
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.precision import Precision, precision_here
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.user_code import EnvironmentSpec, RewardSpec, ToolSpec


def build_trainer(
    recipe: Recipe,
    run_dir: Path,
    callbacks: list | None = None,
    reward_funcs: list | None = None,
    tokenizer=None,
    warn=print,
    start_weights: Path | None = None,
):
    """The single, explicit mapping of a validated recipe onto TRL's GRPOTrainer. `tokenizer`: one the caller
    loaded already, since a second copy stays resident beside the first (benchmarks/cpu_memory.txt); `warn`: where
    an environment's warnings go; `start_weights`: the adapter (or model) GRPO starts from, the SFT stage's or
    lora.adapter's (start_weights.py)."""
    from transformers import PrinterCallback
    from trl import GRPOConfig

    from grpo_cli import data, models
    from grpo_cli.libraries import seams
    from grpo_cli.model_rewards.build import bind_model_rewards
    from grpo_cli.recipe.grpo_config import grpo_config_kwargs
    from grpo_cli.tools.wiring import recipe_tools
    from grpo_cli.train.recipe_trainer import RecipeTrainer

    quiet_libraries()
    seams.check_trl()  # before anything loads: a TRL without a name grpo relies on stops here, named
    tokenizer = tokenizer or models.load_tokenizer(recipe.model)
    tools, environment_factory = recipe_tools(recipe.tools, recipe.environment, recipe.model.name, tokenizer, warn)
    prepared = data.prepare(recipe.data, tokenizer, seed=recipe.training.seed, tools=tools)
    # before the model loads: too few usable rows for one step is refused here
    prepared.check_enough(recipe.generation_batch_size, recipe.grpo.num_generations, recipe.total_steps)
    precision = precision_here(recipe.model)
    engine_settings = nullcontext()
    if precision.on_cpu and recipe.grpo.use_vllm:
        from grpo_cli.train.vllm_cpu import cpu_engine_settings, prepare_environment

        seams.check_weight_sync()  # before any weight loads (preflight comes here without grpo train's runtime check)
        prepare_environment(
            recipe.model, recipe.data, recipe.grpo, recipe.generation_batch_per_process
        )  # before TRL builds the engine inside the trainer
        engine_settings = cpu_engine_settings(precision.inference_dtype)
    if precision.on_cpu:
        seams.narrow_head_tiles()  # TRL's LM-head tile width, a process global, set where GRPO is configured
    model = load_policy(recipe, precision)
    peft_config = models.lora_config(recipe.lora) if recipe.lora is not None else None
    if start_weights is not None:  # the same adapter keeps training: TRL takes the PEFT model as it is
        from grpo_cli.train.start_weights import start_from

        model, peft_config = start_from(model, start_weights, recipe.model.name, recipe.lora), None
    with engine_settings:  # TRL starts a colocated vLLM engine inside the constructor
        trainer = RecipeTrainer(
            model=model,
            reward_funcs=guarded_rewards(recipe.rewards, recipe.model, recipe.tools, recipe.environment)
            if reward_funcs is None
            else reward_funcs,
            args=GRPOConfig(**grpo_config_kwargs(recipe, run_dir, on_cpu=precision.on_cpu, mixed=precision.mixed)),
            train_dataset=prepared.dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=callbacks,
            tools=tools,
            environment_factory=environment_factory,
            mixed_precision=precision.mixed,
            zero_variance_mode=recipe.grpo.zero_variance_groups,
            zero_variance_rounds=recipe.grpo.zero_variance_rounds,
        )
    # With tqdm off (grpo_config.py) the Trainer prints each raw log dict; our display and metrics file replace it.
    trainer.remove_callback(PrinterCallback)
    bind_model_rewards(trainer)  # reward models and judges load here, where the policy is, before the first step
    return trainer, prepared


def load_policy(recipe: Recipe, precision: Precision):
    """The policy as training holds it, the SFT stage and GRPO alike: its weights in `precision.dtype`, and a LoRA run
    under autocast keeps its frozen Linears in the autocast dtype from the start (frozen_weights.py)."""
    from grpo_cli import models
    from grpo_cli.train.frozen_weights import planned_dtype

    sharded = recipe.distributed.strategy in ("zero3", "fsdp") or bool(recipe.distributed.accelerate_config)
    frozen = planned_dtype(recipe.method, recipe.model.dtype, recipe.grpo.use_vllm, sharded, precision.mixed)
    return models.load_model(recipe.model, recipe.quantization, frozen)


def guarded_rewards(
    rewards: list[RewardSpec],
    model: ModelSection,
    tools: list[ToolSpec],
    environment: EnvironmentSpec | None,
    warn=print,
) -> list:
    """`rewards:`, each behind a guard; the first also keeps the samples written to samples.jsonl, with the names of
    the run's tools (a completion that calls one is told apart). `model`: the policy's section, which a judge may be."""
    from grpo_cli.model_rewards.build import reward_functions
    from grpo_cli.reward_guard import GuardedReward

    names = None
    if tools or environment is not None:
        from grpo_cli.tools.registry import tool_names

        names = tool_names(tools, environment)
    return [
        GuardedReward(
            func, spec.timeout_s, warn, record=index == 0, tool_names=names if index == 0 else None, label=spec.name
        )
        for index, (func, spec) in enumerate(zip(reward_functions(rewards, model), rewards))
    ]
