"""A user's own JSONL through `data.source` and `eval.protocol: task`: the three row shapes it reads (question and
answer, another prompt column, chat `messages`), and one line, exit 2, for each bad input: rows without a reference
answer, a verifier that passes none of the references, an answer that is a list or an object."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from grpo_cli.data import build_prompt, split_reference
from grpo_cli.recipe.data_section import DataSection

runner = CliRunner()
CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Peru", "Lima")] * 2
SHORT = ["--limit", "4", "eval.batch_size=4", "eval.max_new_tokens=4"]


def own_recipe(tmp_path, tiny_llama, rows, **data):
    source = write_jsonl(rows, tmp_path / "my.jsonl")
    sections = {"source": str(source), "limit": None, "answer_format": "plain", **data}
    return write_recipe(
        tmp_path, tiny_llama, data=sections, rewards=[{"name": "normalized_match"}], eval={"protocol": "task"}
    )


def questions(column="question", answer="answer"):
    return [{column: f"What is the capital of {country}?", answer: city} for country, city in CAPITALS]


def conversations(**beside):
    return [
        {"messages": [{"role": "user", "content": f"Capital of {country}?"}, {"role": "assistant", "content": city}]}
        | beside
        for country, city in CAPITALS
    ]


def predictions(directory):
    """The records in the data's order (they are written as each problem finishes)."""
    records = [json.loads(line) for line in (directory / "predictions.jsonl").read_text().splitlines()]
    return sorted(records, key=lambda record: record["index"])


def test_a_closing_assistant_turn_is_the_reference_unless_the_row_has_an_answer():
    data = DataSection(prompt_column="messages", answer_format="plain")
    row = conversations()[0]
    assert split_reference(row, data) == {"messages": [row["messages"][0]], "answer": "Paris"}
    assert split_reference({**row, "answer": "Lyon"}, data)["answer"] == "Lyon"  # the row's own answer wins
    assert split_reference({**row, "answer": "Lyon"}, data)["messages"] == [row["messages"][0]]  # never prompted


def test_a_conversation_keeps_its_own_system_turn_and_gets_the_recipes_otherwise():
    user = [{"role": "user", "content": "Capital of Peru?"}]
    system = {"role": "system", "content": "Be brief."}
    assert (
        build_prompt(user, "Reply with one word.", True)
        == [{"role": "system", "content": "Reply with one word."}] + user
    )
    assert build_prompt([system, *user], "Reply with one word.", True) == [system, *user]


def test_question_and_answer_rows_validate_and_evaluate_without_settings(tmp_path, tiny_llama):
    recipe = own_recipe(tmp_path, tiny_llama, questions())
    assert runner.invoke(app, ["validate", str(recipe)]).exit_code == 0
    result = runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    assert [r["gold"] for r in predictions(tmp_path / "out")] == ["Paris", "Tokyo", "Rome", "Lima"]


def test_a_prompt_column_is_named_in_the_recipe_and_the_refusal_says_which(tmp_path, tiny_llama):
    recipe = own_recipe(tmp_path, tiny_llama, questions(column="prompt"))
    line = fails_cleanly(runner.invoke(app, ["validate", str(recipe)]), "my.jsonl", "has no `question` field")
    assert line.endswith("set data.prompt_column: prompt"), line
    named = own_recipe(tmp_path, tiny_llama, questions(column="prompt"), prompt_column="prompt")
    assert runner.invoke(app, ["validate", str(named)]).exit_code == 0


def test_chat_messages_are_asked_as_a_conversation_and_scored_against_the_closing_turn(tmp_path, tiny_llama):
    recipe = own_recipe(tmp_path, tiny_llama, conversations(), prompt_column="messages", system_prompt=None)
    assert runner.invoke(app, ["validate", str(recipe)]).exit_code == 0  # no `answer` field needed
    result = runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    records = predictions(tmp_path / "out")
    assert [r["gold"] for r in records] == ["Paris", "Tokyo", "Rome", "Lima"]
    assert records[0]["question"] == [{"role": "user", "content": "Capital of France?"}]  # the answer is not asked


def test_rows_without_a_reference_are_refused_when_none_has_one(tmp_path, tiny_llama):
    recipe = own_recipe(tmp_path, tiny_llama, [{**row, "answer": None} for row in questions()])
    train = ["train", str(recipe)]
    evaluate = ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "out")]  # reads the first 4 rows
    for command, rows in ((train, 8), (evaluate, 4)):
        line = fails_cleanly(runner.invoke(app, command), "my.jsonl", f"{rows} without a reference answer in `answer`")
        assert "its reference answer in `answer`" in line, line
    assert not (tmp_path / "run").exists() and not (tmp_path / "out" / "predictions.jsonl").exists()


def test_rows_without_a_reference_are_counted_when_evaluating(tmp_path, tiny_llama):
    rows = [{**row, "answer": "" if i == 1 else row["answer"]} for i, row in enumerate(questions())]
    recipe = own_recipe(tmp_path, tiny_llama, rows)
    result = runner.invoke(app, ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "left out 1 problem(s) that cannot be scored" in result.output


@pytest.mark.slow
def test_rows_without_a_reference_are_counted_in_a_training_warning(tmp_path, tiny_llama):
    rows = [{**row, "answer": None if i % 4 == 0 else row["answer"]} for i, row in enumerate(questions())]
    recipe = own_recipe(tmp_path, tiny_llama, rows)
    result = runner.invoke(app, ["train", str(recipe), "training.max_steps=1"])
    assert result.exit_code == 0, result.output
    assert "left out 2 of 8 rows: without a reference answer in `answer`" in result.output


@pytest.mark.parametrize("command", ["train", "preflight", "eval"])
def test_a_verifier_that_passes_none_of_the_references_is_refused_before_anything_loads(tmp_path, tiny_llama, command):
    recipe = own_recipe(tmp_path, tiny_llama, questions())
    args = [command, str(recipe), "rewards=[{name: correctness}]"]  # a number check on word answers
    args += ["--output", str(tmp_path / "out")] if command == "eval" else []
    line = fails_cleanly(runner.invoke(app, args), "rewards[0]", "`correctness` passes none of the first 8 reference")
    assert "my.jsonl" in line and "`Paris`" in line and "normalized_match" in line, line
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()


def test_a_user_verifier_reading_a_column_the_data_lacks_is_refused_with_its_failure(tmp_path, tiny_llama):
    check = tmp_path / "my_check.py"
    check.write_text("def judge(completions, solution, **kwargs):\n    return [1.0 for _ in completions]\n")
    recipe = own_recipe(tmp_path, tiny_llama, questions())
    rewards = f"rewards=[{{name: '{check}:judge', role: verifier}}]"
    line = fails_cleanly(runner.invoke(app, ["train", str(recipe), rewards]), "passes none", "solution")
    assert "rewards[0]" in line, line


def test_a_verifier_that_passes_some_references_is_not_refused(tmp_path, tiny_llama):
    rows = [{"question": "What is 2 + 2?", "answer": 4}] + questions()  # one number among the words
    recipe = own_recipe(tmp_path, tiny_llama, rows)
    args = ["eval", "model", str(recipe), "rewards=[{name: correctness}]", *SHORT, "--output", str(tmp_path / "out")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output


def test_a_list_answer_is_refused_by_validate_naming_the_line(tmp_path, tiny_llama):
    rows = questions()
    rows[2]["answer"] = ["Rome", "Roma"]
    recipe = own_recipe(tmp_path, tiny_llama, rows)
    fails_cleanly(runner.invoke(app, ["validate", str(recipe)]), "line 3 of", "`answer` is a JSON list", "one answer")


def test_an_object_answer_past_the_first_lines_is_refused_when_the_rows_are_read(tmp_path, tiny_llama):
    rows = questions() * 4  # 32 rows: validate reads the first 20
    rows[25] = {**rows[25], "answer": {"city": "Rome"}}
    recipe = own_recipe(tmp_path, tiny_llama, rows)
    assert runner.invoke(app, ["validate", str(recipe)]).exit_code == 0
    for command in (["train", str(recipe)], ["eval", "model", str(recipe), *SHORT, "--output", str(tmp_path / "out")]):
        fails_cleanly(runner.invoke(app, command), "data.answer_column", "holds an object", "one answer per row")


@pytest.mark.parametrize(
    "turn",
    [
        {"role": "narrator", "content": "Once upon a time."},  # a role no chat template renders
        {"role": "user", "content": 123},  # content that is not text: arrow would refuse the column mid-run
        {"role": "user", "content": ["a", "b"]},
    ],
)
def test_a_conversation_with_a_turn_templates_cannot_render_is_left_out_and_counted(turn):
    from grpo_cli.data import keep_rows

    data = DataSection(prompt_column="messages", answer_format="plain", limit=None)
    rows = [split_reference(r, data) for r in conversations()]
    odd = {"messages": [turn, {"role": "user", "content": "Capital of Chile?"}], "answer": "Santiago"}
    kept, unusable = keep_rows([*rows, odd], data)
    assert len(kept) == len(rows) and list(unusable.values()) == [1]
    assert "has a turn that is not system/user/assistant/tool with text content" in next(iter(unusable))


def test_mixed_answers_are_kept_and_an_enormous_one_is_left_out_and_counted():
    from grpo_cli.data import MAX_ANSWER_CHARS, keep_rows

    data = DataSection(answer_format="plain", limit=None)
    answers = [42, "42", "forty-two", 3.5, "9" * (MAX_ANSWER_CHARS + 1)]
    kept, unusable = keep_rows([{"question": f"q{i}?", "answer": a} for i, a in enumerate(answers)], data)
    assert [r["answer"] for r in kept] == answers[:4]
    assert unusable == {"`answer` longer than 10,000 characters": 1}
