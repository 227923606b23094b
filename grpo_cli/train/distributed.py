"""Several processes: `grpo train` relaunches itself through `accelerate launch` (DDP, FSDP, DeepSpeed ZeRO).

The engine is accelerate's; this module only writes its config from `distributed.strategy` (the same keys as
`accelerate config` writes and as TRL's examples/accelerate_configs use) and builds the launch command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from grpo_cli.recipe.schema import Recipe

LAUNCHED_ENV = "GRPO_LAUNCHED"  # set for the launched ranks: they train instead of launching again
CONFIG_FILE = "accelerate_config.yaml"
RANK_RECIPE_FILE = "launch_recipe.yaml"  # the resolved recipe (file + overrides) every rank loads


def is_launched_rank() -> bool:
    return os.environ.get(LAUNCHED_ENV) == "1"


def process_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def wants_launch(recipe: Recipe) -> bool:
    return not is_launched_rank() and (recipe.num_processes > 1 or recipe.distributed.accelerate_config is not None)


def check_engine(recipe: Recipe) -> None:
    """ZeRO needs DeepSpeed installed; say so before any rank starts rather than in eight tracebacks."""
    import importlib.util

    from grpo_cli.errors import UserError

    if recipe.distributed.accelerate_config is None and recipe.distributed.strategy in ("zero2", "zero3") \
            and importlib.util.find_spec("deepspeed") is None:
        raise UserError("DeepSpeed is not installed: `pip install deepspeed` (or pip install -e \".[deepspeed]\"), "
                        "or use distributed.strategy=fsdp", path="distributed.strategy")


def accelerate_config(recipe: Recipe, on_cpu: bool) -> dict[str, Any]:
    """An accelerate config for the recipe's strategy (what `accelerate config` would write)."""
    d = recipe.distributed
    mixed = {"bfloat16": "bf16", "float16": "fp16"}.get(recipe.model.dtype, "no")
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        # On CPU the ranks still start through the torchrun-based launcher (accelerate's own CPU mode needs
        # mpirun); each rank then runs on the CPU over gloo (GRPOConfig use_cpu=True, ddp_backend=gloo).
        "distributed_type": "MULTI_GPU",
        "downcast_bf16": "no",
        "machine_rank": d.machine_rank,
        "main_training_function": "main",
        "mixed_precision": "no" if on_cpu else mixed,
        "num_machines": d.num_machines,
        "num_processes": d.num_processes,
        "rdzv_backend": "static",
        "same_network": True,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": False,
    }
    if d.main_process_ip:
        config["main_process_ip"] = d.main_process_ip
    if d.main_process_port:
        config["main_process_port"] = d.main_process_port
    if d.strategy in ("zero2", "zero3"):
        config["distributed_type"] = "DEEPSPEED"
        config["deepspeed_config"] = {
            "deepspeed_multinode_launcher": "standard",
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
            "zero_stage": 3 if d.strategy == "zero3" else 2,
            **({"zero3_init_flag": True, "zero3_save_16bit_model": True} if d.strategy == "zero3" else {}),
        }
    elif d.strategy == "fsdp":
        config["distributed_type"] = "FSDP"
        config["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_activation_checkpointing": False,  # the model's own gradient checkpointing is used
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_offload_params": False,
            "fsdp_reshard_after_forward": True,
            "fsdp_state_dict_type": "FULL_STATE_DICT",  # the final model is saved whole, loadable anywhere
        }
    return config


def write_accelerate_config(recipe: Recipe, directory: Path, on_cpu: bool) -> Path:
    """The user's own accelerate config when the recipe names one, else one generated into the run directory."""
    if recipe.distributed.accelerate_config:
        return Path(recipe.distributed.accelerate_config).expanduser()
    path = directory / CONFIG_FILE
    path.write_text(yaml.safe_dump(accelerate_config(recipe, on_cpu), sort_keys=False), encoding="utf-8")
    return path


def launch_command(config: Path, train_args: list[str]) -> list[str]:
    """`accelerate launch --config_file CONFIG -m grpo_cli train ...`: the same command line, once per rank."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
            "-m", "grpo_cli", "train", *train_args]


def launch(recipe: Recipe, resume: bool, echo=print) -> int:
    """Check and create the run directory once, write the accelerate config and the resolved recipe, then start
    every rank on that recipe (so no rank reads the user's YAML or re-applies overrides)."""
    import torch

    from grpo_cli.train.run_dir import prepare_run_dir, write_resolved_recipe
    from grpo_cli.train.runtime import check_runtime

    check_runtime(recipe)
    check_engine(recipe)
    prepare_run_dir(recipe, resume)
    config = write_accelerate_config(recipe, recipe.output_dir, on_cpu=not torch.cuda.is_available())
    rank_recipe = recipe.output_dir / RANK_RECIPE_FILE
    write_resolved_recipe(recipe, rank_recipe)
    echo(f"launching {recipe.num_processes} processes ({recipe.distributed.strategy}) with accelerate: {config}")
    return relaunch(config, [str(rank_recipe), *(["--resume"] if resume else [])])


def relaunch(config: Path, train_args: list[str]) -> int:
    env = {**os.environ, LAUNCHED_ENV: "1"}
    try:
        return subprocess.run(launch_command(config, train_args), env=env).returncode
    except KeyboardInterrupt:  # accelerate forwards the signal; the ranks checkpoint and stop on their own
        return 130
