from __future__ import annotations

import json

import pytest

from grpo_cli.data import build_prompt, prepare
from grpo_cli.errors import UserError
from grpo_cli.recipe.data_section import DataSection
from rewards.answers import extract_answer, last_number, normalize_number, numbers_equal
from rewards.gsm8k_task import generate_problems, gsm8k_gold


def test_generated_problems_are_gsm8k_format_and_seeded():
    rows = generate_problems(50, seed=3)
    assert rows == generate_problems(50, seed=3)
    assert rows != generate_problems(50, seed=4)
    for row in rows:
        gold = gsm8k_gold(row["answer"])
        assert row["answer"].rsplit("\n", 1)[-1] == f"#### {gold}"
        assert int(gold) >= 0
        assert f"={gold}>>" in row["answer"]  # the worked line carries the same result


@pytest.mark.parametrize(
    "text,expected",
    [("#### 1,234", "1234"), ("so\n#### $18", "18"), ("#### -3", "-3"), ("#### 2.50", "2.50"), ("#### 7.", "7")],
)
def test_gsm8k_gold(text, expected):
    assert gsm8k_gold(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The answer is 1,234.", "1234"),
        ("costs $5 then $7.50", "7.50"),
        ("temperature -4 degrees", "-4"),
        ("3 apples and 4 pears make 7", "7"),
        ("no numbers here", None),
        ("ends with 12.", "12"),
    ],
)
def test_last_number(text, expected):
    assert last_number(text) == expected


def test_extract_answer_prefers_answer_tag():
    assert extract_answer("I think 5 <answer>\n6\n</answer> then 9") == "6"
    assert extract_answer("<answer>none</answer> but 9") == "9"
    assert numbers_equal("6.0", "6") and not numbers_equal(None, "6") and not numbers_equal("6", "nan")
    assert normalize_number(" $1,000. ") == "1000"


def test_build_prompt_chat_and_plain():
    assert build_prompt("q?", "sys", chat=True) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q?"},
    ]
    assert build_prompt("q?", None, chat=True) == [{"role": "user", "content": "q?"}]
    assert build_prompt("q?", "sys", chat=False) == "sys\n\nq?\n"


def test_prepare_local_jsonl_with_length_filter(tmp_path, tiny_llama):
    from transformers import AutoTokenizer

    rows = [
        {"question": "Ava has 3 apples. How many?", "answer": "#### 3"},
        {"question": "word " * 200, "answer": "#### 1,000"},
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    prepared = prepare(DataSection(source=str(path), max_prompt_length=64, system_prompt="Be brief."), tokenizer)
    assert prepared.total == 2 and prepared.dropped_too_long == 1
    example = prepared.dataset[0]
    assert example["answer"] == "3"
    assert example["prompt"][0] == {"role": "system", "content": "Be brief."}


def test_prepare_reports_missing_column(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"problem": "x", "answer": "#### 1"}) + "\n")
    with pytest.raises(UserError) as err:
        prepare(DataSection(source=str(path)))
    assert err.value.problems[0].path == "data.prompt_column"
    assert "problem" in err.value.problems[0].message


def test_prepare_limit_and_shuffle():
    a = prepare(DataSection(source="generated", limit=20, shuffle_seed=1)).dataset
    b = prepare(DataSection(source="generated", limit=20, shuffle_seed=2)).dataset
    assert len(a) == 20 and a["question"] != b["question"]


def test_prepare_keeps_short_solutions_after_the_limit(tmp_path):
    rows = [{"question": f"q{i}", "answer": "step\n" * (1 + i % 3) + f"#### {i}"} for i in range(12)]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = prepare(DataSection(source=str(path), limit=9, max_solution_steps=2, system_prompt=None)).dataset
    assert kept["question"] == ["q0", "q1", "q3", "q4", "q6", "q7"]  # rows 9-11 stay out though they are short
    no_short = tmp_path / "hard.jsonl"
    no_short.write_text(json.dumps({"question": "q", "answer": "a\nb\nc\n#### 1"}) + "\n")
    with pytest.raises(UserError, match="raise it"):
        prepare(DataSection(source=str(no_short), max_solution_steps=2, system_prompt=None))
