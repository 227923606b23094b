"""`grpo eval` with eval.protocol: task: the recipe's own data, scored by its verifier and format rewards, with real
generations of a tiny model."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from conftest import fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from grpo_cli.eval.stats import wilson_interval

runner = CliRunner()
SHORT = ["--limit", "6", "eval.batch_size=3", "eval.max_new_tokens=6"]


def predictions(directory):
    return [json.loads(line) for line in (directory / "predictions.jsonl").read_text().splitlines()]


def task_recipe(tmp_path, tiny_llama, **sections):
    rewards = [
        {"name": "correctness"},  # a verifier by default
        {"name": "strict_format", "weight": 0.2},  # a format by default
        {"name": "length_target", "kwargs": {"target": 8}, "weight": 0.5},  # shaping: not scored
    ]
    return write_recipe(tmp_path, tiny_llama, rewards=sections.pop("rewards", rewards), **sections)


def test_task_protocol_scores_with_the_recipes_verifiers_and_format_rewards(tmp_path, tiny_llama):
    recipe = task_recipe(tmp_path, tiny_llama, eval={"protocol": "task"})
    out = tmp_path / "out"
    result = runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["results"][0]
    records = predictions(out)
    assert summary["protocol"] == "task" and summary["problems"] == 6 == len(records)
    assert set(summary["filters"]) == {"correctness"}  # shaping rewards are not accuracy
    correct = sum(r["correct"]["correctness"] for r in records)
    assert summary["filters"]["correctness"]["correct"] == correct
    assert summary["filters"]["correctness"]["ci95"] == list(wilson_interval(correct, 6))
    assert summary["format_rate"] == sum(bool(r["formatted"]) for r in records) / 6
    # the raw verifier score is kept beside the verdict
    assert all(r["extracted"]["correctness"] in (0.0, 1.0) for r in records)
    settings = json.loads((out / "settings.json").read_text())
    assert settings["source"] == "generated" and [s["name"] for s in settings["scorers"]] == [
        "correctness",
        "strict_format",
    ]


def test_a_recipe_without_a_format_reward_reports_no_format_rate(tmp_path, tiny_llama):
    recipe = task_recipe(
        tmp_path,
        tiny_llama,
        eval={"protocol": "task"},
        rewards=[{"name": "correctness"}, {"name": "length_target", "kwargs": {"target": 8}}],
    )
    result = runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["results"][0]
    assert summary["format_rate"] is None
    assert "accuracy_well_formed" not in summary["filters"]["correctness"]


def test_a_user_reward_marked_verifier_with_its_own_pass_score(tmp_path, tiny_llama):
    scorer = tmp_path / "my_check.py"
    scorer.write_text(
        "def half(completions, answer, **kwargs):\n"
        "    return [0.5 for _ in completions]\n"  # always half: counts as right only at pass_score <= 0.5
    )
    rewards = [{"name": f"{scorer}:half", "role": "verifier", "pass_score": 0.5}]
    recipe = task_recipe(tmp_path, tiny_llama, eval={"protocol": "task"}, rewards=rewards)
    result = runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    f = json.loads(result.stdout)["results"][0]["filters"][f"{scorer}:half"]
    assert f["correct"] == 6 and f["accuracy"] == 1.0


def test_evaluating_the_training_rows_warns_with_the_count(tmp_path, tiny_llama):
    rows = [{"question": f"What is {i} plus 1?", "answer": f"#### {i + 1}"} for i in range(8)]
    data = write_jsonl(rows, tmp_path / "rows.jsonl")
    recipe = task_recipe(tmp_path, tiny_llama, data={"source": str(data)}, eval={"protocol": "task"})
    result = runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "6 of the 6 evaluated prompts are also training prompts" in result.output


def test_task_mistakes_are_one_line_naming_the_key(tmp_path, tiny_llama):
    def eval_with(**sections):
        recipe = task_recipe(tmp_path, tiny_llama, **{"eval": {"protocol": "task"}, **sections})
        return runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "never")])

    fails_cleanly(eval_with(rewards=[{"name": "length_target", "kwargs": {"target": 8}}]), "rewards", "verifier")
    fails_cleanly(eval_with(rewards=[{"name": "strict_format", "role": "verifier"}]), "rewards[0].role", "form")
    fails_cleanly(eval_with(data={"answer_column": None}), "data.answer_column")
    empty = write_jsonl([{"question": "", "answer": "#### 1"}], tmp_path / "empty.jsonl")
    fails_cleanly(eval_with(eval={"protocol": "task", "source": str(empty)}), "eval.source")
    assert not (tmp_path / "never").exists()  # refused before any file
