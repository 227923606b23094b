"""Training or evaluation data in which every row is unusable: train, preflight and eval each refuse it with one line
that names the data and what a row needs, exit 2, no traceback, and nothing written."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from rewards.gsm8k_task import generate_problems

runner = CliRunner()

UNUSABLE = {
    "word_answers": lambda rows: [{**r, "answer": r["answer"].rsplit("####", 1)[0] + "#### twelve"} for r in rows],
    "empty_prompts": lambda rows: [{**r, "question": "  "} for r in rows],
    "list_prompts": lambda rows: [{**r, "question": [r["question"]]} for r in rows],
}


@pytest.mark.parametrize("kind", sorted(UNUSABLE))
def test_all_rows_unusable_is_one_line_in_train_preflight_and_eval(tmp_path, tiny_llama, kind):
    data = write_jsonl(UNUSABLE[kind](generate_problems(6)), tmp_path / "train.jsonl")
    recipe = write_recipe(tmp_path, tiny_llama, data={"source": str(data), "limit": None})
    before = recipe.read_bytes()
    for command in (["train", str(recipe)], ["preflight", str(recipe)]):
        line = fails_cleanly(runner.invoke(app, command), "no usable rows in", str(data), "data.source")
        assert "6 " in line, line  # how many rows were left out, and why
    run = tmp_path / "run"  # at most the resolved recipe: no checkpoint, no model
    assert not run.exists() or {p.name for p in run.iterdir()} <= {"recipe.yaml"}, list(run.iterdir())
    assert recipe.read_bytes() == before
    result = runner.invoke(
        app, ["eval", "model", "--model", str(tiny_llama), "--data", str(data), "--output", str(tmp_path / "out")]
    )
    fails_cleanly(result, "none of the 6 problems can be scored", "eval.source")
    assert not (tmp_path / "out" / "predictions.jsonl").exists()


def test_too_few_usable_rows_names_the_data_source(tmp_path, tiny_llama):
    rows = generate_problems(1) + UNUSABLE["word_answers"](generate_problems(2, seed=3))
    data = write_jsonl(rows, tmp_path / "few.jsonl")
    recipe = write_recipe(tmp_path, tiny_llama, data={"source": str(data), "limit": None})
    fails_cleanly(runner.invoke(app, ["train", str(recipe)]), f"only 1 usable prompt(s) in {data}", "data.source")


def test_export_of_a_mistyped_run_says_it_does_not_exist(tmp_path):
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    result = runner.invoke(app, ["export", str(tmp_path / "runs" / "dmeo"), "--merge", str(tmp_path / "out")])
    fails_cleanly(
        result,
        f"run directory {tmp_path / 'runs' / 'dmeo'} does not exist",
        f"did you mean {tmp_path / 'runs' / 'demo'}?",
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # training starts: the step's rewards fail
def test_a_failing_reward_is_named_as_the_recipe_names_it(tmp_path, tiny_llama):
    score = "def score(prompts=None, completions=None, **kw):\n    {}\n"
    (tmp_path / "a_rewards.py").write_text(score.format("return [0.0 for c in completions]"))
    (tmp_path / "b_rewards.py").write_text(score.format("raise KeyError('gold')"))
    rewards = [{"name": f"{tmp_path / 'a_rewards.py'}:score"}, {"name": f"{tmp_path / 'b_rewards.py'}:score"}]
    recipe = write_recipe(tmp_path, tiny_llama, rewards=rewards)
    line = fails_cleanly(runner.invoke(app, ["train", str(recipe)]), f"reward `{tmp_path / 'b_rewards.py'}:score`")
    assert "a_rewards.py" not in line, line


def test_a_data_line_longer_than_any_prompt_is_refused_fast_in_bounded_memory(tmp_path, tiny_llama):
    """One 64 MiB line: `plan` (which reads every row) and `validate` (which reads the first rows) refuse it by line
    number without reading it whole, let alone tokenizing it."""
    import tracemalloc

    data = tmp_path / "train.jsonl"
    with open(data, "w", encoding="utf-8") as handle:
        handle.write('{"question": "')
        for _ in range(64):
            handle.write("x " * 2**19)
        handle.write('", "answer": "#### 1"}\n')
    recipe = write_recipe(tmp_path, tiny_llama, data={"source": str(data), "limit": None})
    for command in (["plan", str(recipe), "--device", "cpu", "--ram", "8GB"], ["validate", str(recipe)]):
        tracemalloc.start()
        try:
            result = runner.invoke(app, command)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        fails_cleanly(result, "data.source", f"line 1 of {data} is longer than 4 MiB", "split or remove that row")
        assert peak < 32 * 2**20, f"{command[0]}: {peak / 2**20:.0f} MiB"
    # past the rows validate reads: plan still finds it, by its number
    rows = "".join(json.dumps(row) + "\n" for row in generate_problems(30))
    data.write_text(rows + '{"question": "' + "x " * 2**21 + '", "answer": "#### 1"}\n', encoding="utf-8")
    result = runner.invoke(app, ["plan", str(recipe), "--device", "cpu", "--ram", "8GB"])
    fails_cleanly(result, "data.source", f"line 31 of {data} is longer than 4 MiB")


def test_a_directory_named_like_a_data_file_is_refused_naming_it(tmp_path, tiny_llama):
    folder = tmp_path / "train.jsonl"
    folder.mkdir()
    write_jsonl([{"q": "What is 1 plus 1?", "a": "#### 2"}] * 8, folder / "part.jsonl")
    recipe = write_recipe(tmp_path, tiny_llama, data={"source": str(folder), "limit": None})
    for command in (["validate", str(recipe)], ["train", str(recipe)]):
        fails_cleanly(runner.invoke(app, command), "data.source", f"{folder} is a directory, not a .jsonl file")
    assert not (tmp_path / "run").exists()
    # the task protocol reads data.source without validating it first: refused where it is loaded, by the same line
    result = runner.invoke(
        app, ["eval", "model", str(recipe), "--protocol", "task", "--limit", "2", "--output", str(tmp_path / "out")]
    )
    fails_cleanly(result, "data.source", f"{folder} is a directory, not a .jsonl file")
    assert not (tmp_path / "out").exists()
