"""Tool use in evaluation: eval's own loop gives TRL's token sequences under greedy decoding, records each problem's
calls, reports tool figures, and resumes like any evaluation."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import write_recipe
from grpo_cli.cli import app
from grpo_cli.generation.continuous import ContinuousGenerator
from grpo_cli.generation.tool_loop import ToolLoop
from grpo_cli.recipe.validation import load_recipe
from grpo_cli.tools.registry import guarded_tools
from grpo_cli.train.trainer import build_trainer
from tool_models import SYSTEM

pytestmark = pytest.mark.slow  # every test builds the tool_model fixture (training steps)

runner = CliRunner()
BUDGET = 96


def tool_recipe(tmp_path, model, **extra):
    sections = dict(
        data={"source": "generated", "limit": 16, "system_prompt": SYSTEM},
        tools=["calculator"],
        grpo={"num_generations": 2, "max_completion_length": BUDGET, "max_tool_calling_iterations": 2},
        training={"per_device_train_batch_size": 8, "max_steps": 1},
        eval={"source": "generated", "max_new_tokens": BUDGET, "batch_size": 4},
    )
    sections.update(extra)
    return write_recipe(tmp_path, model, **sections)


def test_eval_loop_gives_trls_token_sequences_under_greedy_decoding(tmp_path, tool_model):
    recipe = load_recipe(tool_recipe(tmp_path, tool_model, trl={"generation_kwargs": {"do_sample": False}}))
    recipe.output_dir.mkdir(parents=True)
    trainer, prepared = build_trainer(recipe, recipe.output_dir)
    rows = [prepared.dataset[i] for i in range(8)]
    batch = trainer._generate_and_score_completions([row for row in rows for _ in range(2)])  # 2 per group
    trl_completion_ids = [
        ids[mask.bool()].tolist() for ids, mask in zip(batch["completion_ids"], batch["completion_mask"])
    ][::2]
    tokenizer = trainer.processing_class
    engine = ContinuousGenerator(trainer.model, tokenizer, BUDGET, [], max_length=2048)
    loop = ToolLoop(engine, tokenizer, guarded_tools(recipe.tools), None, BUDGET, 2)
    examples = [{"index": i, "prompt": row["prompt"], "answer": row["answer"]} for i, row in enumerate(rows)]
    results = sorted((r for chunk in loop.run(examples, batch_size=3) for r in chunk), key=lambda r: r.index)
    assert [r.completion_ids for r in results] == trl_completion_ids
    called = [r for r in results if r.extra["tools"]["calls"]]
    assert called and len(called) < len(results), "the tiny model should call the tool on some problems only"
    for result in called:
        assert result.extra["tool_calls"][0] == {
            "name": "calculator",
            "arguments": {"expression": "2 + 3"},
            "result": "5",
            "ok": True,
        }
        assert "<tool_response>\n5\n</tool_response>" in result.extra["transcript"]
        assert "5" not in result.text.replace("#### 5", "")  # the scored text is the model's own turns


def test_grpo_eval_with_tools_records_calls_and_resumes(tmp_path, tool_model):
    recipe = tool_recipe(tmp_path, tool_model)
    out = tmp_path / "eval"
    first = runner.invoke(app, ["eval", "model", str(recipe), "--limit", "6", "--output", str(out), "--json"])
    assert first.exit_code == 0, first.output
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in records) == list(range(6))
    assert all({"tool_calls", "tools", "transcript"} <= set(r) for r in records)
    assert any(r["tools"]["calls"] for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tools"]["calls_per_completion"] == sum(r["tools"]["calls"] for r in records) / 6
    assert {"failure_rate", "malformed_per_completion", "turns_per_completion"} <= set(summary["tools"])
    again = runner.invoke(app, ["eval", "model", str(recipe), "--limit", "6", "--output", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()] == records
    other = runner.invoke(
        app, ["eval", "model", str(recipe), "--limit", "6", "--output", str(out), "grpo.max_tool_calling_iterations=1"]
    )
    assert other.exit_code == 2 and "other settings" in other.output


def test_preflight_reports_the_tool_figures_of_sampled_groups(tmp_path, tool_model):
    recipe = tool_recipe(
        tmp_path,
        tool_model,
        grpo={
            "num_generations": 4,
            "max_completion_length": BUDGET,
            "temperature": 0.7,
            "max_tool_calling_iterations": 2,
        },
    )
    result = runner.invoke(app, ["preflight", str(recipe), "--json", "--prompts", "6"])
    assert result.exit_code == 0, result.output
    tools = json.loads(result.stdout)["tools"]
    assert tools["calls_per_completion"] > 0 and tools["turns_per_completion"] > 1
    assert 0 <= tools["failure_rate"] <= 1 and 0 <= tools["completions_with_malformed"] <= 1
    shown = runner.invoke(app, ["preflight", str(recipe), "--prompts", "6"])
    assert shown.exit_code == 0 and "calls per completion" in shown.output
