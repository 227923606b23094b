"""`grpo eval` under careless and hostile flags and files, driven through the real CLI on a tiny model: a verifier's
name misspelt, a sample count no evaluation can hold, a task file with its own column names. Each refusal is one line
naming the key or flag, exit 2, no traceback, before anything is written."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from conftest import fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app

runner = CliRunner()
SHORT = ["--limit", "2", "eval.batch_size=2", "eval.max_new_tokens=4"]


def test_a_misspelt_verifier_under_the_task_protocol_is_one_line_naming_it(tmp_path, tiny_llama):
    checks = tmp_path / "my_checks.py"
    checks.write_text("def check(completions, answer, **kwargs):\n    return [1.0 for _ in completions]\n")
    out = tmp_path / "out"
    for rewards, words in [
        ([{"name": "correctnes"}], ["rewards[0].name", "did you mean `correctness`"]),
        ([{"name": "correctness"}, {"name": f"{checks}:chek", "role": "verifier"}], ["rewards[1].name", "`chek`"]),
    ]:
        recipe = write_recipe(tmp_path, tiny_llama, rewards=rewards)
        result = runner.invoke(app, ["eval", "model", str(recipe), "--protocol", "task", *SHORT, "--output", str(out)])
        fails_cleanly(result, str(recipe), *words)
    assert not out.exists()


def test_an_absurd_sample_count_is_refused_before_any_prompt_is_built(tmp_path, tiny_llama, monkeypatch):
    import grpo_cli.eval.evaluate as evaluate

    def never(*args, **kwargs):
        raise AssertionError("prompts and seeds were built for a sample count that was to be refused")

    monkeypatch.setattr(evaluate, "repeated", never)
    recipe = write_recipe(tmp_path, tiny_llama)
    out = tmp_path / "out"
    for samples in ("1000000000", "1025"):
        command = [
            "eval",
            "model",
            str(recipe),
            *SHORT,
            "--samples",
            samples,
            "--temperature",
            "1.0",
            "--output",
            str(out),
        ]
        fails_cleanly(runner.invoke(app, command), f"--samples {samples}", "1024 or fewer")
    assert not out.exists()


def test_a_task_file_with_its_own_column_names_is_evaluated(tmp_path, tiny_llama):
    rows = [{"prompt": f"What is {i} plus 2?", "target": f"#### {i + 2}"} for i in range(8)]
    train = write_jsonl(rows[:6], tmp_path / "train.jsonl")
    test = write_jsonl(rows[6:], tmp_path / "test.jsonl")
    recipe = write_recipe(
        tmp_path,
        tiny_llama,
        data={"source": str(train), "prompt_column": "prompt", "answer_column": "target"},
        eval={"protocol": "task", "source": str(test)},
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"][0]["problems"] == 2
    # its columns are still checked: a file without them is refused, naming the keys that name them
    wrong = write_jsonl([{"question": "What is 1 plus 2?", "answer": "#### 3"}], tmp_path / "wrong.jsonl")
    recipe = write_recipe(
        tmp_path,
        tiny_llama,
        data={"source": str(train), "prompt_column": "prompt", "answer_column": "target"},
        eval={"protocol": "task", "source": str(wrong)},
    )
    result = runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "never")])
    fails_cleanly(result, "eval.source", "no `prompt` field", "data.prompt_column")
    assert not (tmp_path / "never").exists()
