"""Several processes: `grpo train` relaunches itself through `accelerate launch` (DDP, FSDP, DeepSpeed ZeRO).

The engine is accelerate's; this module only picks TRL's shipped config for `distributed.strategy`, sets the run's
own keys on it, and builds the launch command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from grpo_cli.recipe.machine import DistributedSection
from grpo_cli.recipe.model_section import ModelSection
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.layout import ACCELERATE_CONFIG_FILE, RANK_RECIPE_FILE

LAUNCHED_ENV = "GRPO_LAUNCHED"  # set for the launched ranks: they train instead of launching again


def is_launched_rank() -> bool:
    return os.environ.get(LAUNCHED_ENV) == "1"


def process_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def close_process_group() -> None:
    """A finished rank waits for the others, then closes its process group while the interpreter is still whole.
    Left open, gloo's worker threads may still hold tensors when Python finalizes, and the rank can abort after a
    finished run ("terminate called without an active exception", SIGABRT; pytorch/pytorch#190489), which fails the
    whole launch: seen once in CI, on both DDP tests, after both ranks had saved."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def wants_launch(d: DistributedSection) -> bool:
    return not is_launched_rank() and (d.num_processes > 1 or d.accelerate_config is not None)


def check_engine(d: DistributedSection) -> None:
    """ZeRO needs DeepSpeed installed; say so before any rank starts rather than in eight tracebacks."""
    import importlib.util

    from grpo_cli.errors import UserError

    if d.accelerate_config is None and d.zero_stage is not None and importlib.util.find_spec("deepspeed") is None:
        raise UserError(
            'DeepSpeed is not installed: `pip install deepspeed` (or pip install -e ".[deepspeed]"), '
            "or use distributed.strategy=fsdp on GPUs (ddp on a CPU)",
            path="distributed.strategy",
        )


# What FSDP does on a CPU, seen on two gloo ranks (docs/multi-gpu.md, benchmarks/distributed_cpu/): with
# use_cpu=True accelerate wraps the model in DDP whatever the config says; without it transformers refuses bf16
# ("Your setup doesn't support bf16/gpu. You need to assign use_cpu if you want to train the model on CPU."), and in
# float32 the second rank's first batch is empty (IndexError in TRL's shuffle_sequence_dict). DeepSpeed's ZeRO-2 and
# ZeRO-3 run there (its CPU accelerator).
FSDP_ON_CPU = (
    "FSDP does not run on a CPU: accelerate wraps the model in DDP instead (docs/multi-gpu.md); use "
    "distributed.strategy=ddp, or zero2/zero3 with DeepSpeed installed"
)


def check_strategy_here(d: DistributedSection) -> None:
    """Refuse a strategy this machine would silently replace, before any rank starts."""
    from grpo_cli.errors import UserError

    if d.num_processes < 2 or d.accelerate_config is not None or d.strategy != "fsdp":
        return
    import torch

    if not torch.cuda.is_available():
        raise UserError(FSDP_ON_CPU, path="distributed.strategy")


# TRL ships one accelerate config per strategy (trl/accelerate_configs/, the files its docs launch with).
TRL_CONFIGS = {"ddp": "multi_gpu", "fsdp": "fsdp2", "zero2": "zero2", "zero3": "zero3"}


def accelerate_config(d: DistributedSection, model: ModelSection, on_cpu: bool) -> dict[str, Any]:
    """TRL's shipped accelerate config for the recipe's strategy, with this run's keys set on top.

    On CPU the ranks still start through the torchrun-based launcher (accelerate's own CPU mode needs mpirun); each
    rank then runs on the CPU over gloo (GRPOConfig use_cpu=True, ddp_backend=gloo). Mixed precision is the recipe's,
    resolved on this machine (recipe/precision.py), as each rank's GRPOConfig resolves it."""
    import importlib.util

    from grpo_cli.errors import UserError
    from grpo_cli.recipe.precision import precision_here

    spec = importlib.util.find_spec("trl")
    path = Path(list(spec.submodule_search_locations)[0]) / "accelerate_configs" / f"{TRL_CONFIGS[d.strategy]}.yaml"
    if not path.is_file():
        from importlib.metadata import version

        raise UserError(
            f"the installed trl {version('trl')} ships no {path.name} accelerate config; write your own "
            "with `accelerate config` and set distributed.accelerate_config",
            path="distributed.strategy",
        )
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config.update(
        num_processes=d.num_processes,
        num_machines=d.num_machines,
        machine_rank=d.machine_rank,
        mixed_precision=precision_here(model, on_cpu).mixed,
    )
    if d.main_process_ip:
        config["main_process_ip"] = d.main_process_ip
    if d.main_process_port:
        config["main_process_port"] = d.main_process_port
    return config


def write_accelerate_config(d: DistributedSection, model: ModelSection, directory: Path, on_cpu: bool) -> Path:
    """The user's own accelerate config when the recipe names one, else one generated into the run directory."""
    if d.accelerate_config:
        return Path(d.accelerate_config).expanduser()
    path = directory / ACCELERATE_CONFIG_FILE
    path.write_text(yaml.safe_dump(accelerate_config(d, model, on_cpu), sort_keys=False), encoding="utf-8")
    return path


def launch_command(config: Path, train_args: list[str]) -> list[str]:
    """`accelerate launch --config_file CONFIG -m grpo_cli train ...`: the same command line, once per rank."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config),
        "-m",
        "grpo_cli",
        "train",
        *train_args,
    ]


def launch(recipe: Recipe, resume: bool, echo=print) -> int:
    """Check and create the run directory once, write the accelerate config and the resolved recipe, then start
    every rank on that recipe (so no rank reads the user's YAML or re-applies overrides)."""
    import torch

    from grpo_cli.runs.checkpoints import prepare_run_dir
    from grpo_cli.runs.saved_recipe import write_resolved_recipe
    from grpo_cli.train.runtime import check_runtime

    check_runtime(recipe)
    check_strategy_here(recipe.distributed)
    check_engine(recipe.distributed)
    prepare_run_dir(recipe, resume)
    on_cpu = not torch.cuda.is_available()
    config = write_accelerate_config(recipe.distributed, recipe.model, recipe.output_dir, on_cpu)
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
