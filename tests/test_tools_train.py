"""Tool use in training: a real TRL step in which a tiny model calls the calculator, the call runs behind its guard,
the result is part of the next turn and out of the loss, the weights change, and the run keeps the tool figures."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from conftest import ASSETS, write_recipe
from grpo_cli.recipe.validation import load_recipe
from grpo_cli.runs.report import TOOL_KEYS, panels_for, plot_run
from grpo_cli.train.run import train
from grpo_cli.train.trainer import build_trainer
from tool_models import CALLERS, SYSTEM

pytestmark = pytest.mark.slow  # real training steps: `pytest -m 'not slow'` skips them in an inner loop

TOOL_SECTIONS = dict(
    data={"source": "generated", "limit": 32, "system_prompt": SYSTEM},
    tools=["calculator"],
    grpo={"num_generations": 4, "max_completion_length": 64, "temperature": 0.7, "max_tool_calling_iterations": 2},
    training={"per_device_train_batch_size": 8, "max_steps": 2, "learning_rate": 0.05, "log_completions": 8},
    lora={"r": 4, "alpha": 8, "dropout": 0.0},
    rewards=[{"name": "correctness"}, {"name": f"{ASSETS / 'varied_rewards.py'}:alternating"}],
)


def test_tool_calls_are_executed_masked_from_the_loss_and_counted(tmp_path, tool_model):
    recipe = load_recipe(write_recipe(tmp_path, tool_model, **TOOL_SECTIONS))
    result = train(recipe)
    assert not result.interrupted and result.global_step == 2
    metrics = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(m["loss"]) for m in metrics)
    assert any(m["tools/call_frequency"] > 0 for m in metrics), "the calculator was never called"
    for key in ("tools/failure_frequency", "tools/malformed_frequency", "tools/turns"):
        assert all(key in m and math.isfinite(m[key]) for m in metrics), key
    assert any(m["tools/turns"] > 1 for m in metrics)  # a call, its result, then another turn
    samples = [json.loads(line)["completion"] for line in (result.run_dir / "samples.jsonl").read_text().splitlines()]
    assert any("<tool_call>" in s and "<tool_response>\n5\n</tool_response>" in s for s in samples), samples
    adapter = load_file(result.final_dir / "adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k), "LoRA B starts at zero and must move"
    assert ("tool calls per completion; failed share of calls", list(TOOL_KEYS)) in panels_for(metrics)
    assert plot_run(result.run_dir).stat().st_size > 10_000


def test_tool_results_are_in_the_next_turn_and_out_of_the_loss(tmp_path, tool_model):
    """The batch TRL trains on: a called tool's answer sits between the model's turns with tool_mask 0 (so the loss
    never counts it), and the model's own tokens around it count."""
    recipe = load_recipe(write_recipe(tmp_path, tool_model, **TOOL_SECTIONS))
    recipe.output_dir.mkdir(parents=True)
    trainer, prepared = build_trainer(recipe, recipe.output_dir)
    callers = [row for row in prepared.dataset if row["question"].startswith(CALLERS)][:2]  # the model calls on these
    batch = trainer._generate_and_score_completions([row for row in callers for _ in range(4)])
    tokenizer = trainer.processing_class
    masked = [(ids, mask) for ids, mask in zip(batch["completion_ids"], batch["tool_mask"]) if (mask == 0).any()]
    assert masked, "no completion called the tool"
    for ids, mask in masked:
        tool_part = tokenizer.decode(ids[mask == 0])
        assert "<tool_response>\n5\n</tool_response>" in tool_part
        assert "<tool_call>" in tokenizer.decode(ids[(mask == 1) & (torch.arange(len(ids)) < (mask == 0).nonzero()[0])])


def test_an_environment_supplies_the_tool_and_a_reward(tmp_path, tool_model):
    sections = {
        **TOOL_SECTIONS,
        "tools": None,
        "environment": {"name": f"{ASSETS / 'tool_env.py'}:CountingCalculator", "kwargs": {"offset": 100}},
    }
    recipe = load_recipe(write_recipe(tmp_path, tool_model, **sections))
    result = train(recipe)
    assert result.global_step == 2
    metrics = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(m["tools/call_frequency"] > 0 for m in metrics)
    assert all("rewards/CountingCalculator/mean" in m for m in metrics)  # get_reward is a reward source
    samples = (result.run_dir / "samples.jsonl").read_text()
    assert "<tool_response>\\n105\\n</tool_response>" in samples  # the environment's own method answered


def test_a_template_without_tools_is_refused_before_loading(tmp_path, tiny_llama):
    from typer.testing import CliRunner

    from grpo_cli.cli import app

    recipe = write_recipe(tmp_path, tiny_llama, tools=["calculator"])
    for command in (["train"], ["preflight"], ["eval", "model", "--limit", "2", "--data", "generated"]):
        result = CliRunner().invoke(app, [*command, str(recipe)])
        assert result.exit_code == 2, (command, result.output)
        assert "cannot render tool calls" in result.output and str(tiny_llama) in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not any(tmp_path.glob("**/predictions.jsonl"))
