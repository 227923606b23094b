"""User tools and environments that misbehave, driven through the real CLI on the tiny tool model: a tool that is not
a plain function, an environment whose reset raises or returns what TRL cannot use, whose get_reward returns text or
a list, or NaN. Each is one line naming the entry and what to do, exit 2, no traceback; NaN is a warning. User code
that prints keeps off stdout under --json, which carries the document alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ASSETS, fails_cleanly, write_recipe
from grpo_cli.cli import app
from tool_models import SYSTEM

runner = CliRunner()

PARTIAL_TOOL = '''
import functools

def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first
        b: the second
    """
    return a + b

plus_two = functools.partial(add, b=2)
'''


def environment_recipe(tmp_path: Path, model: Path, environment: str) -> Path:
    return write_recipe(
        tmp_path,
        model,
        data={"source": "generated", "limit": 16, "system_prompt": SYSTEM},
        environment={"name": f"{ASSETS / 'faulty_env.py'}:{environment}"},
        grpo={"num_generations": 2, "max_completion_length": 48, "max_tool_calling_iterations": 1},
        training={"per_device_train_batch_size": 4, "max_steps": 1},
        eval={"source": "generated", "max_new_tokens": 48, "batch_size": 4},
    )


def test_a_partial_as_a_tool_is_refused_with_what_to_do(tmp_path, tiny_llama):
    (tmp_path / "my_tools.py").write_text(PARTIAL_TOOL)
    recipe = write_recipe(tmp_path, tiny_llama, tools=[f"{tmp_path / 'my_tools.py'}:plus_two"])
    for command in ("validate", "train"):
        line = fails_cleanly(runner.invoke(app, [command, str(recipe)]), "tools[0].name", "functools.partial")
        assert "define a function" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # builds tool_model (training steps)
def test_an_environment_whose_reset_raises_stops_eval_in_one_line(tmp_path, tool_model):
    recipe = environment_recipe(tmp_path, tool_model, "RaisingReset")
    result = runner.invoke(app, ["eval", "model", str(recipe), "--limit", "4", "--output", str(tmp_path / "eval")])
    line = fails_cleanly(result, "environment", "RaisingReset`: reset raised RuntimeError", "the simulator is down")
    assert "run the same command again" in line


@pytest.mark.parametrize(
    "environment, words",
    [
        ("ListReset", ["ListReset`: reset returned ['Use the calculator.'] (list)", "or None"]),
        ("StringReward", ["StringReward`: get_reward returned 'high' (str)", "one number"]),
        ("ListReward", ["ListReward`: get_reward returned [1.0, 0.0] (list)", "one number"]),
    ],
)
@pytest.mark.slow  # builds tool_model (training steps)
def test_an_environment_returning_what_trl_cannot_use_stops_training_in_one_line(
    tmp_path, tool_model, environment, words
):
    line = fails_cleanly(runner.invoke(app, ["train", str(environment_recipe(tmp_path, tool_model, environment))]))
    assert line.startswith("environment: environment `"), line
    for word in [*words, "no step had finished"]:
        assert word in line, line
    assert not (tmp_path / "run" / "final").exists()


@pytest.mark.slow  # builds tool_model (training steps)
def test_preflight_stops_on_an_environment_reward_trl_cannot_use(tmp_path, tool_model):
    recipe = environment_recipe(tmp_path, tool_model, "StringReward")
    line = fails_cleanly(runner.invoke(app, ["preflight", str(recipe), "--prompts", "2"]))
    assert "StringReward`: get_reward returned 'high' (str)" in line and "run the same command again" in line


@pytest.mark.slow  # builds tool_model (training steps)
def test_a_nan_reward_from_an_environment_is_warned_and_not_judged(tmp_path, tool_model):
    result = runner.invoke(app, ["train", str(environment_recipe(tmp_path, tool_model, "NanReward"))])
    assert result.exit_code == 0, result.output
    # The console wraps long lines at its width, and the environment's path (the checkout's) sets where.
    output = " ".join(result.output.split())
    assert output.count("get_reward returned nan; that rollout counts as not judged") == 1, result.output
    assert (tmp_path / "run" / "final").is_dir()


@pytest.mark.slow  # builds tool_model (training steps)
def test_user_code_that_prints_keeps_off_the_json_document(tmp_path, tool_model):
    recipe = write_recipe(
        tmp_path,
        tool_model,
        data={"source": "generated", "limit": 16, "system_prompt": SYSTEM},
        tools=[{"name": f"{ASSETS / 'faulty_tools.py'}:chatty"}],
        grpo={"num_generations": 2, "max_completion_length": 96, "max_tool_calling_iterations": 2},
        eval={"source": "generated", "max_new_tokens": 96, "batch_size": 4},
    )
    result = runner.invoke(
        app, ["eval", "model", str(recipe), "--limit", "6", "--output", str(tmp_path / "eval"), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "chatty tool: computing" in result.stderr  # the tiny model calls it on some problems
    assert json.loads(result.stdout)["results"][0]["problems"] == 6  # stdout is the document alone


@pytest.mark.slow  # preflight's real steps
def test_a_reward_that_prints_keeps_off_the_preflight_json_document(tmp_path, tiny_llama):
    (tmp_path / "loud.py").write_text(
        "def score(completions=None, **kw):\n"
        "    print('loud reward scoring', len(completions))\n"
        "    return [0.0] * len(completions)\n"
    )
    recipe = write_recipe(tmp_path, tiny_llama, rewards=[{"name": f"{tmp_path / 'loud.py'}:score"}])
    result = runner.invoke(app, ["preflight", str(recipe), "--json", "--prompts", "2"])
    assert result.exit_code == 0, result.output
    assert "loud reward scoring" in result.stderr
    assert "loud reward" not in result.stdout and isinstance(json.loads(result.stdout), dict)
