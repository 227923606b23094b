"""The SFT stage under careless and hostile input: every case one line naming the key or file, nothing lost."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from grpo_cli.errors import UserError
from grpo_cli.recipe.sft_checks import same_model
from grpo_cli.recipe.sft_section import SftSection
from grpo_cli.train.sft_example_checks import fit_max_length, read_examples, validation_questions_in
from grpo_cli.train.sft_examples import SftExamples, dataset_examples

LORA = {"r": 4, "alpha": 8, "dropout": 0.0}
QUESTION = "A farmer has twelve cows and buys seven more at the market on Monday. How many cows does he have now?"


def sft_file(tmp_path, rows):
    return str(write_jsonl(rows, tmp_path / "section.jsonl"))


def test_a_max_length_that_cuts_every_completion_away_is_one_line_before_training(tmp_path, tiny_llama):
    source = sft_file(tmp_path, [{"prompt": QUESTION, "completion": "19"}] * 4)
    sft = {"source": source, "max_steps": 1, "max_length": 8}
    path = write_recipe(tmp_path, tiny_llama, lora=LORA, sft=sft)
    result = CliRunner().invoke(app, ["train", str(path)])
    fails_cleanly(result, "sft.max_length", "every SFT prompt", "set sft.max_length above")
    assert not (tmp_path / "run" / "sft" / "checkpoint-1").exists()


def test_examples_whose_prompt_fills_max_length_are_dropped_and_counted(tiny_llama):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    rows = [{"prompt": QUESTION, "completion": "19"}, {"prompt": "2+2?", "completion": "4"}]
    kept, note = fit_max_length(12, SftExamples(rows), tokenizer)
    assert kept.rows == rows[1:] and kept.source["cut_by_max_length"] == 1
    assert "1 of 2 examples dropped" in note and "sft.max_length=12" in note
    assert fit_max_length(512, SftExamples(rows), tokenizer) == (SftExamples(rows), None)


def test_prompts_that_are_lists_of_numbers_are_not_examples(tmp_path, tiny_llama):
    source = sft_file(tmp_path, [{"prompt": [1, 2, 3], "completion": [4]}, {"prompt": 7, "completion": 8}])
    path = write_recipe(tmp_path, tiny_llama, lora=LORA, sft={"source": source, "max_steps": 1})
    result = CliRunner().invoke(app, ["train", str(path)])
    fails_cleanly(result, "sft.source", source, "no usable example")
    assert not (tmp_path / "run").exists()


def test_rows_dropped_for_lacking_an_assistant_turn_are_said_on_the_console_line(tmp_path):
    good = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    bad = {"messages": [{"role": "user", "content": "3+3?"}]}
    examples = dataset_examples(SftSection(source=sft_file(tmp_path, [good, bad, bad])))
    assert len(examples.rows) == 1
    assert "(2 of its 3 rows without an assistant turn after a user turn, dropped)" in examples.describe()


def test_a_cut_examples_file_on_resume_is_one_line_naming_it(tmp_path):
    kept = tmp_path / "examples.jsonl"
    kept.write_text(json.dumps({"prompt": "2+2?", "completion": "4"}) + '\n{"prompt": "3+3?", "compl', encoding="utf-8")
    with pytest.raises(UserError) as caught:
        read_examples(kept)
    problem = caught.value.problems[0]
    assert problem.path == "sft" and f"{kept} line 2 is cut" in problem.message


def test_an_adapter_of_another_hub_model_is_not_taken_for_this_one():
    """Neither name is a folder here, so neither resolves: two unknowns are not the same model."""
    assert not same_model("someone/Other-Model-1B", "Qwen/Qwen2.5-0.5B-Instruct")
    assert same_model("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")


def test_sft_examples_that_ask_validation_problems_are_counted():
    rows = [
        {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}],
            "completion": [],
        },
        {"prompt": f"Question: {QUESTION}\nAnswer:", "completion": "19"},
        {"prompt": "Something else entirely?", "completion": "no"},
    ]
    assert validation_questions_in(SftExamples(rows), [QUESTION, "Unrelated?"]) == 2
    assert validation_questions_in(SftExamples(rows), [["a conversation"], ""]) == 0
