"""`grpo eval` as subcommands (model, run, compare, curve) of a handful of options each, and the spellings before them
still working for one release, with one line that says the new one. (tests/test_eval.py drives the old spellings on
purpose: every case there goes through the rewriting.)"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly
from grpo_cli.cli import app
from grpo_cli.cli.eval_legacy import subcommand_args

runner = CliRunner()
SUBCOMMANDS = ("model", "run", "compare", "curve")


def options_of(subcommand: str) -> list[str]:
    """The options `grpo eval SUBCOMMAND --help` lists, --help left out."""
    import typer.main

    group = typer.main.get_command(app).commands["eval"]
    command = group.commands[subcommand]
    return [name for p in command.params if p.param_type_name == "option" for name in p.opts]


def test_eval_help_lists_subcommands_and_says_what_it_evaluates():
    result = runner.invoke(app, ["eval", "--help"])
    assert result.exit_code == 0, result.output
    for name in SUBCOMMANDS:
        assert name in result.output
    assert "own task" in result.output and "GSM8K held-out accuracy" not in result.output


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_each_subcommand_takes_at_most_ten_options(subcommand):
    options = options_of(subcommand)
    assert 0 < len(options) <= 10, options
    assert "--help" not in options


def test_old_spellings_become_the_subcommand_that_does_the_same():
    assert subcommand_args(["recipe.yaml", "--limit", "5"]) == ["model", "recipe.yaml", "--limit", "5"]
    assert subcommand_args(["--model", "m", "--split", "train", "--max-new-tokens=8", "--json"]) == [
        "model",
        "--model",
        "m",
        "--json",
        "eval.split=train",
        "eval.max_new_tokens=8",
    ]
    assert subcommand_args(["--compare", "runs/a", "--base", "b", "--seed", "1"]) == [
        "compare",
        "runs/a",
        "--base",
        "b",
        "eval.seed=1",
    ]
    assert subcommand_args(["r.yaml", "--run", "runs/a", "--top-p", "0.9"]) == [
        "run",
        "runs/a",
        "--recipe",
        "r.yaml",
        "eval.top_p=0.9",
    ]
    assert subcommand_args(["--checkpoints", "runs/a", "--batch-size", "4"])[:2] == ["curve", "runs/a"]


def test_the_old_spelling_says_the_new_one_and_gives_the_same_result(tmp_path, tiny_llama):
    common = ["--data", "generated", "--limit", "2", "--json"]
    old_spelling = [
        "eval",
        "--model",
        str(tiny_llama),
        *common,
        "--max-new-tokens",
        "4",
        "--output",
        str(tmp_path / "a"),
    ]
    old = runner.invoke(app, old_spelling)
    assert old.exit_code == 0, old.output
    notice = [line for line in old.stderr.splitlines() if line.startswith("notice:")]
    assert len(notice) == 1 and "grpo eval model --model" in notice[0] and "eval.max_new_tokens=4" in notice[0]
    new_spelling = ["eval", "model", "--model", str(tiny_llama), *common, "eval.max_new_tokens=4"]
    new = runner.invoke(app, [*new_spelling, "--output", str(tmp_path / "b")])
    assert new.exit_code == 0, new.output
    assert "notice:" not in new.stderr
    before, after = json.loads(old.stdout)["results"][0], json.loads(new.stdout)["results"][0]
    assert before["max_new_tokens"] == after["max_new_tokens"] == 4 and before["filters"] == after["filters"]
    completions = [(tmp_path / d / "predictions.jsonl").read_text() for d in ("a", "b")]
    assert completions[0] == completions[1]


def test_mistakes_only_the_old_spelling_can_make_are_one_line(tmp_path):
    fails_cleanly(runner.invoke(app, ["eval", "--run", "a", "--compare", "b"]), "give one of --run, --compare")
    fails_cleanly(runner.invoke(app, ["eval", "--model", "m", "--base", "b"]), "--base", "--compare")
    fails_cleanly(runner.invoke(app, ["eval", "--run", "a", "--adapter", "x"]), "--adapter")
    fails_cleanly(runner.invoke(app, ["eval", "--limit"]), "--limit needs a value")


def test_a_flag_a_subcommand_does_not_take_is_named(tmp_path):
    result = runner.invoke(app, ["eval", "run", str(tmp_path), "--split", "train"])
    assert result.exit_code == 2 and "--split" in result.output
