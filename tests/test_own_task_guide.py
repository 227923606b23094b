"""docs/eval.md's "Your own task in ten minutes", run as written from an empty folder: its data script, its recipe
and its commands in order, with a tiny model in place of the demo model and a step or two in place of the run."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from grpo_cli.cli import app

GUIDE_TITLE = "## Your own task in ten minutes"
COMMANDS = [
    "grpo validate my_task.yaml",
    "grpo preflight my_task.yaml",
    "grpo train my_task.yaml",
    "grpo eval compare runs/my_task",
]
# What the test changes, as overrides on the commands that take the recipe: the model, and sizes that keep it fast.
SMALL = [
    "data.max_prompt_length=256",  # the tiny tokenizer spends more tokens on a prompt
    "sft.count=4",
    "sft.per_device_train_batch_size=2",
    "sft.max_length=256",
    "training.max_steps=1",
    "training.per_device_train_batch_size=4",
    "grpo.num_generations=2",
    "grpo.max_completion_length=4",
    "eval.limit=6",
    "eval.batch_size=6",
    "eval.max_new_tokens=4",
]


def guide() -> str:
    text = (ROOT / "docs" / "eval.md").read_text(encoding="utf-8")
    start = text.index(GUIDE_TITLE)
    end = text.find("\n## ", start + len(GUIDE_TITLE))
    return text[start : end if end != -1 else None]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", guide(), flags=re.S)


def guide_commands() -> list[str]:
    """The `grpo` lines of the guide's bash blocks, without their comments."""
    lines = [line.split("  #")[0].strip() for block in blocks("bash") for line in block.splitlines()]
    return [line for line in lines if line.startswith("grpo ")]


def test_the_guide_has_one_data_script_one_recipe_and_these_commands_in_order():
    assert len(blocks("python")) == 1 and len(blocks("yaml")) == 1
    assert blocks("yaml")[0].startswith("# my_task.yaml")
    assert guide_commands() == COMMANDS


@pytest.mark.slow
def test_the_guide_runs_from_an_empty_folder_to_a_compared_result(tmp_path, tiny_llama, monkeypatch):
    monkeypatch.chdir(tmp_path)
    subprocess.run([sys.executable, "-c", blocks("python")[0]], cwd=tmp_path, check=True)
    (tmp_path / "my_task.yaml").write_text(blocks("yaml")[0], encoding="utf-8")
    runner = CliRunner()
    outputs = []
    for command in guide_commands():
        args = shlex.split(command)[1:]
        if args[1] == "my_task.yaml":  # validate, preflight, train: the recipe with the test's overrides
            args += [f"model.name={tiny_llama}", *SMALL] + (["--prompts", "2"] if args[0] == "preflight" else [])
        result = runner.invoke(app, args)
        assert result.exit_code == 0, f"{command}\n{result.output}"
        outputs.append(result.output)
    validated, preflight, trained, compared = outputs
    assert "# OK: my_task.yaml" in validated
    assert "constant answers to every prompt earn" in preflight  # the constant-policy line
    assert "saved adapter" in trained and (tmp_path / "runs" / "my_task" / "final").is_dir()
    # the shortcut report of both sides and the trained model against always giving the commonest reference answer
    assert "majority baseline: always" in compared and "shortcut:" in compared
    comparison = json.loads(next((tmp_path / "runs" / "my_task" / "eval").rglob("comparison.json")).read_text())
    assert comparison["problems"] == 6 and "majority_baseline" in comparison
