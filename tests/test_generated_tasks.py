"""`data.source: generated:<task>`: seeded problems with word answers whose test split shares no problem with
training's; refused in one line where misused; trained on, validated and evaluated (base against trained, greedy
and sampled) through the CLI with real generations of a tiny model."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from typer.testing import CliRunner

from conftest import ROOT, fails_cleanly, write_recipe
from grpo_cli.cli import app
from grpo_cli.errors import UserError
from grpo_cli.recipe.generated_tasks import TASKS, generate_task

runner = CliRunner()
PARITY = "generated:parity"
EVERY = 10**6  # more than a split holds: the whole split


# A parser per task that reads a question back, and the answer worked out from it independently of the generator.
READ_BACK = {
    "parity": (
        re.compile(r"Is (\d+) an even number\? Answer yes or no\."),
        lambda n: "yes" if int(n) % 2 == 0 else "no",
    ),
    "largest": (
        re.compile(r"Which is the largest of these numbers: (\d\d), (\d\d), (\d\d)\?"),
        lambda *xs: str(max(int(x) for x in xs)),
    ),
    "products": (
        re.compile(r"What is (\d{3}) times (\d{3})\?"),  # GSM8K's form: the annotated step, then the product
        lambda a, b: f"{a} * {b} = <<{a}*{b}={int(a) * int(b)}>>{int(a) * int(b)}\n#### {int(a) * int(b)}",
    ),
}
SPACE = {"parity": 9_999, "largest": 90 * 89 * 88, "products": 900 * 900}


def questions(task: str, split: str, seed: int = 0) -> set[str]:
    return {row["question"] for row in generate_task(f"generated:{task}", split, EVERY, seed)}


def test_hand_checked_rows():
    parity = TASKS["parity"].row
    assert parity((47,)) == {"question": "Is 47 an even number? Answer yes or no.", "answer": "no"}
    assert parity((2,))["answer"] == "yes" and parity((9_998,))["answer"] == "yes" and parity((1,))["answer"] == "no"


@pytest.mark.parametrize("task", sorted(TASKS))
def test_rows_are_seeded_distinct_and_their_answers_right(task):
    source = f"generated:{task}"
    rows = generate_task(source, "train", 40, seed=3)
    assert rows == generate_task(source, "train", 40, seed=3)
    assert rows != generate_task(source, "train", 40, seed=4)
    assert len({r["question"] for r in rows}) == 40
    pattern, truth = READ_BACK[task]
    for r in rows + generate_task(source, "test", 40, seed=3):
        assert r["answer"] == truth(*pattern.fullmatch(r["question"]).groups())


@pytest.mark.parametrize("task", sorted(TASKS))
def test_the_test_split_shares_no_problem_with_training_at_any_seed(task):
    train, test = questions(task, "train"), questions(task, "test")
    assert not train & test
    assert len(train | test) == SPACE[task]  # every problem of the space, in one split only
    assert 0.15 < len(test) / SPACE[task] < 0.25  # a fifth held out
    assert questions(task, "train", seed=5) == train  # the seed orders a split; it never moves a problem across
    for split, problems in (("train", train), ("test", test)) if task == "parity" else ():
        yes = sum(row["answer"] == "yes" for row in generate_task(f"generated:{task}", split, EVERY))
        assert 0.45 < yes / len(problems) < 0.55, split  # yes as often as no: always `no` scores half
    with pytest.raises(UserError, match="splits train and test"):
        generate_task(f"generated:{task}", "validation", 4)


def test_no_one_answer_of_the_largest_task_is_a_shortcut():
    """Answering any one number gets at most 5% of 400 held-out problems right (parity's `no` gets half)."""
    answers = Counter(row["answer"] for row in generate_task("generated:largest", "test", 400))
    assert len(answers) > 50 and answers.most_common(1)[0][1] / 400 <= 0.05


def validate(*overrides: str):
    return runner.invoke(app, ["validate", str(ROOT / "recipes" / "demo_task.yaml"), *overrides])


def test_misuse_of_a_generated_task_is_one_line_naming_the_key():
    fails_cleanly(validate("data.source=generated:sort"), "data.source", "no generated task `sort`", PARITY)
    fails_cleanly(validate("data.split=validation"), "data.split", "splits train and test")
    fails_cleanly(validate("data.answer_format=gsm8k"), "data.answer_format", "plain")
    chat = validate(f"eval.source={PARITY}", "eval.protocol=chat")
    fails_cleanly(chat, "eval.protocol", "task")


def test_grpo_plan_measures_the_generated_prompts():
    result = runner.invoke(app, ["plan", str(ROOT / "recipes" / "demo_task.yaml")])
    assert result.exit_code == 0, result.output
    assert "planned for this data: its longest prompt is" in result.output
    assert "2000 prompts left" in result.output


@pytest.fixture(scope="module")
def task_run(tmp_path_factory, tiny_llama):
    """Two real GRPO steps on generated:parity with LoRA, validated before, at and after every step."""
    directory = tmp_path_factory.mktemp("generated-task")
    recipe = write_recipe(
        directory,
        tiny_llama,
        data={"source": PARITY, "answer_format": "plain", "limit": 32, "system_prompt": None},
        rewards=[{"name": "normalized_match"}],
        lora={"r": 4, "dropout": 0.0},
        validation={"every_steps": 1, "limit": 4, "batch_size": 2, "max_new_tokens": 4},
        eval={"protocol": "task", "limit": 4, "max_new_tokens": 4},
    )
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    return directory / "run", result.output


@pytest.mark.slow
def test_training_on_it_validates_the_held_out_split_and_the_report_draws_it(task_run):
    from grpo_cli.runs.report import panels_for, read_metrics

    run_dir, output = task_run
    rows = read_metrics(run_dir)
    validations = [r for r in rows if "val/problems" in r]
    assert [r["step"] for r in validations] == [0, 1, 2]
    for row in validations:
        assert row["val/problems"] == 4
        assert row["val/normalized_match/accuracy"] == row["val/normalized_match/correct"] / 4
    assert "training prompts" not in output  # the held-out slice holds none
    assert "validation on 4 held-out problems, 3 times: normalized_match best " in output
    reward_panel = panels_for(rows)[0]
    keys = ["reward", "rewards/normalized_match/mean", "val/normalized_match/accuracy"]
    assert reward_panel == ("reward; held-out accuracy (dashed)", keys)
    drawn = runner.invoke(app, ["report", str(run_dir)])
    assert drawn.exit_code == 0, drawn.output
    assert (run_dir / "report.png").stat().st_size > 0


@pytest.mark.slow
def test_base_against_trained_greedy_and_sampled_on_held_out_problems(task_run):
    run_dir, _ = task_run
    held_out = questions("parity", "test")
    for extra, folder in (([], "greedy"), (["--samples", "3", "--temperature", "1.0"], "sampled")):
        out = run_dir.parent / folder
        result = runner.invoke(app, ["eval", "compare", str(run_dir), *extra, "--output", str(out)])
        assert result.exit_code == 0, result.output
        assert "trained vs base" in result.output and "training prompts" not in result.output
        comparison = json.loads((out / "comparison.json").read_text())
        assert comparison["problems"] == 4 and set(comparison["filters"]) == {"normalized_match"}
        f = comparison["filters"]["normalized_match"]
        assert f["low"] <= f["difference"] <= f["high"]
        assert f["trained"] - f["base"] == pytest.approx(f["difference"])
        for model in ("base", "trained"):
            records = [json.loads(line) for line in (out / model / "predictions.jsonl").read_text().splitlines()]
            assert len(records) == 4 and {r["question"] for r in records} <= held_out
            assert all(r["gold"] in ("yes", "no") for r in records)
            assert json.loads((out / model / "summary.json").read_text())["data"]["source"] == PARITY
    assert comparison["sampling"]["samples"] == 3
    assert "mean@3" in result.output and "pass@3" in result.output
