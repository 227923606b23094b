"""Several processes through accelerate: generated configs, batch rules, per-GPU plans, and a real 2-rank run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import yaml
from accelerate.commands.config.config_args import load_config_from_file
from safetensors.torch import load_file

from conftest import ASSETS, write_recipe
from grpo_cli.errors import UserError
from grpo_cli.plan import architectures
from grpo_cli.plan.memory import memory_plan
from grpo_cli.recipe.validation import load_recipe
from grpo_cli.train.distributed import close_process_group, launch_command, write_accelerate_config

pytestmark = pytest.mark.slow  # real training steps: `pytest -m 'not slow'` skips them in an inner loop


def recipe_with(tmp_path, tiny_llama, **distributed):
    return load_recipe(write_recipe(tmp_path, tiny_llama, distributed=distributed))


@pytest.mark.parametrize(
    "strategy, kind, check",
    [
        ("ddp", "MULTI_GPU", lambda c: c.deepspeed_config == {} and c.fsdp_config == {}),
        ("zero2", "DEEPSPEED", lambda c: c.deepspeed_config["zero_stage"] == 2),
        (
            "zero3",
            "DEEPSPEED",
            lambda c: c.deepspeed_config["zero_stage"] == 3 and c.deepspeed_config["zero3_init_flag"],
        ),
        ("fsdp", "FSDP", lambda c: c.fsdp_config["fsdp_version"] == 2),
    ],
)
def test_generated_configs_load_in_accelerate(tmp_path, tiny_llama, strategy, kind, check):
    recipe = recipe_with(tmp_path, tiny_llama, num_processes=4, strategy=strategy)
    path = write_accelerate_config(recipe.distributed, recipe.model, tmp_path, on_cpu=False)
    config = load_config_from_file(str(path))  # accelerate's own loader rejects unknown keys and bad values
    assert config.distributed_type.value == kind
    assert config.num_processes == 4 and config.num_machines == 1
    assert (
        str(getattr(config.mixed_precision, "value", config.mixed_precision)) == "no"
    )  # the tiny recipe trains in float32
    assert check(config)


def test_multi_node_settings_reach_accelerate(tmp_path, tiny_llama):
    recipe = recipe_with(
        tmp_path,
        tiny_llama,
        num_processes=16,
        num_machines=2,
        machine_rank=1,
        main_process_ip="10.0.0.1",
        main_process_port=29500,
        strategy="zero3",
    )
    path = write_accelerate_config(recipe.distributed, recipe.model, tmp_path, on_cpu=False)
    config = load_config_from_file(str(path))
    assert (config.num_machines, config.machine_rank, config.main_process_ip, config.main_process_port) == (
        2,
        1,
        "10.0.0.1",
        29500,
    )
    command = launch_command(tmp_path / "c.yaml", ["recipe.yaml", "training.max_steps=5"])
    assert command[1:6] == ["-m", "accelerate.commands.launch", "--config_file", str(tmp_path / "c.yaml"), "-m"]
    assert command[-3:] == ["train", "recipe.yaml", "training.max_steps=5"]


def test_users_own_accelerate_config_is_used_as_is(tmp_path, tiny_llama):
    own = tmp_path / "mine.yaml"
    own.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 2\n")
    recipe = recipe_with(tmp_path, tiny_llama, num_processes=2, accelerate_config=str(own))
    assert write_accelerate_config(recipe.distributed, recipe.model, tmp_path / "run", on_cpu=False) == own
    with pytest.raises(UserError) as missing:
        recipe_with(tmp_path, tiny_llama, accelerate_config=str(tmp_path / "nope.yaml"))
    assert "distributed.accelerate_config" in str(missing.value)


def test_batch_rule_counts_processes(tmp_path, tiny_llama):
    # per-device 4 x 3 processes = 12 completions: not whole groups of 8.
    path = write_recipe(tmp_path, tiny_llama, grpo={"num_generations": 8}, distributed={"num_processes": 3})
    with pytest.raises(UserError) as bad:
        load_recipe(path)
    message = str(bad.value)
    assert "4 x 3 process(es)" in message and "distributed.num_processes=2" in message
    with pytest.raises(UserError) as machines:
        recipe_with(tmp_path, tiny_llama, num_processes=3, num_machines=2)
    assert "distributed.num_processes" in str(machines.value)


def test_plan_divides_what_each_strategy_shards():
    def plan(strategy: str, n: int = 8):
        recipe = load_recipe(
            "recipes/qwen2.5/7b_full_8gpu.yaml", [f"distributed.strategy={strategy}", f"distributed.num_processes={n}"]
        )
        return memory_plan(recipe, architectures.resolve(recipe.model))

    ddp, zero2, zero3, single = plan("ddp"), plan("zero2"), plan("zero3"), plan("ddp", 1)
    assert zero3.term("weights").bytes == pytest.approx(ddp.term("weights").bytes / 8)
    assert zero2.term("weights").bytes == ddp.term("weights").bytes
    assert zero2.term("gradients").bytes == pytest.approx(zero3.term("gradients").bytes)
    assert zero3.term("optimizer states").bytes == pytest.approx(7.6156e9 * 12 / 8, rel=0.01)  # fp32 master + Adam
    assert zero3.peak_tensors < zero2.peak_tensors < ddp.peak_tensors
    assert ddp.term("DDP gradient buckets").bytes == ddp.term("gradients").bytes
    assert single.peak_tensors < ddp.peak_tensors  # one process: no buckets


@pytest.mark.parametrize("zero_variance", ["keep", "skip"])
def test_two_cpu_processes_ddp_over_gloo(tmp_path, tiny_llama, zero_variance):
    """A real 2-rank GRPO run on the CPU through `grpo train --num-processes 2` (accelerate launch + gloo), full
    fine-tuning, with TRL's handling of flat groups and with skipping them (ranks may keep different row counts)."""
    # A reward that varies within each group, so advantages (and so gradients) are not all zero.
    rewards = [{"name": f"{ASSETS / 'varied_rewards.py'}:digit_share"}, {"name": "correctness"}]
    recipe = write_recipe(
        tmp_path,
        tiny_llama,
        rewards=rewards,
        grpo={"zero_variance_groups": zero_variance},
        training={"max_steps": 2, "per_device_train_batch_size": 2},
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "train", str(recipe), "--num-processes", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]  # the launcher exits 0 only when every rank did
    run_dir = tmp_path / "run"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["world_size"] == 2 and math.isfinite(m["loss"]) for m in metrics)
    assert all(("zero_variance/groups_skipped" in m) == (zero_variance == "skip") for m in metrics)
    assert (run_dir / "accelerate_config.yaml").exists()
    # The ranks loaded the resolved recipe the launcher wrote, not the user's file plus overrides again.
    launched = yaml.safe_load((run_dir / "launch_recipe.yaml").read_text())
    assert launched["training"]["max_steps"] == 2 and launched["distributed"]["num_processes"] == 2
    assert launched["training"]["output_dir"] == str(run_dir)
    before = load_file(tiny_llama / "model.safetensors")
    after = load_file(run_dir / "final" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before if k in after)


def test_a_finished_rank_closes_its_process_group(tmp_path):
    """What each launched rank does after training: the gloo group is destroyed before the interpreter exits."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert dist.is_initialized()
    close_process_group()
    assert not dist.is_initialized()
    close_process_group()  # and nothing to do where no group was started


def test_zero_without_deepspeed_is_one_clear_line(tmp_path, tiny_llama):
    import importlib.util

    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("DeepSpeed is installed here")
    recipe = write_recipe(tmp_path, tiny_llama)
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "train", str(recipe), "--num-processes", "2", "--strategy", "zero3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "distributed.strategy" in done.stderr and "pip install deepspeed" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_fsdp_on_a_cpu_is_refused_by_validate_and_train_before_any_rank_starts(tmp_path, tiny_llama):
    """On a CPU accelerate would run DDP under the name FSDP (docs/multi-gpu.md): one line instead."""
    if torch.cuda.is_available():
        pytest.skip("FSDP runs on a GPU")
    recipe = write_recipe(tmp_path, tiny_llama)
    for command in (
        ["validate", str(recipe), "distributed.num_processes=2", "distributed.strategy=fsdp"],
        ["train", str(recipe), "--num-processes", "2", "--strategy", "fsdp"],
    ):
        done = subprocess.run([sys.executable, "-m", "grpo_cli", *command], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, (command, done.stderr[-2000:])
        assert "distributed.strategy: FSDP does not run on a CPU" in done.stderr and "strategy=ddp" in done.stderr
        assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()
    planned = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpo_cli",
            "plan",
            str(recipe),
            "distributed.num_processes=2",
            "distributed.strategy=fsdp",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert planned.returncode == 0 and "FSDP does not run on a CPU" in planned.stdout, planned.stdout[-1500:]
