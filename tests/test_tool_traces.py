"""Worked solutions as calculator traces for the SFT stage: GSM8K's `<<expression=result>>` notes become tool calls,
the calculator's answers tool turns, and a row whose notes the calculator cannot reproduce is dropped and counted."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from conftest import ASSETS, ROOT, fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.generated_tasks import generate_task
from grpo_cli.recipe.user_code import ToolSpec
from grpo_cli.tools.traces import calculator_trace
from grpo_cli.train.sft_examples import reference_examples

GSM8K_SOLUTION = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)
CALCULATOR = [ToolSpec(name="calculator")]


def _call(expression: str) -> list[dict]:
    return [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}]


def test_each_annotation_becomes_a_call_the_tools_answer_and_the_text_that_follows():
    worked = GSM8K_SOLUTION.split("####")[0]
    trace = calculator_trace(worked, "#### 72")
    assert trace.calls == 2
    assert trace.messages == [
        {"role": "assistant", "content": "Natalia sold 48/2 =", "tool_calls": _call("48/2")},
        {"role": "tool", "name": "calculator", "content": "24"},
        {"role": "assistant", "content": "24 clips in May.\nNatalia sold 48+24 =", "tool_calls": _call("48+24")},
        {"role": "tool", "name": "calculator", "content": "72"},
        {"role": "assistant", "content": "72 clips altogether in April and May.\n#### 72"},
    ]


def test_a_solution_without_annotations_is_one_turn_without_calls():
    trace = calculator_trace("She has 3 apples.\n", "#### 3")
    assert trace.calls == 0
    assert trace.messages == [{"role": "assistant", "content": "She has 3 apples.\n#### 3"}]


@pytest.mark.parametrize(
    "note, why",
    [
        ("<<48/2>>", "no `expression=result` form"),
        ("<<10/3=3.33>>", "the calculator gives 3.333333333333"),
        ("<<48/2=25>>", "the calculator gives 24"),
        ("<<import os=1>>", "not an arithmetic expression"),
        ("<<2**99999=1>>", "exponent larger than"),
        ("<<48/2=>>", "no result after `=`"),
        ("<<5/0=0>>", "division by zero"),
        ("<<1+<<2+3=5>>=6>>", "a nested or unclosed annotation"),
        ("<<48/2=24", "a nested or unclosed annotation"),
        ("<<" + "9" * 100_000 + "*9=1>>", ""),  # refused fast, whatever the reason
    ],
)
def test_an_annotation_the_calculator_cannot_reproduce_makes_the_row_malformed(note, why):
    trace = calculator_trace(f"Half is {note}24 clips.\n", "#### 24")
    assert trace.messages is None
    assert why in trace.problem


def test_a_result_too_small_for_the_shown_places_is_rounded_not_a_traceback():
    """1/2**1100 is a finite decimal of 1100 places: more than the calculator writes out, so it is rounded."""
    from grpo_cli.tools.calculator import calculator

    assert calculator("1/2**1100") == "0"
    assert calculator_trace("Tiny: <<1/2**1100=0>>0.\n", "#### 0").calls == 1


def test_annotated_results_are_compared_as_numbers_not_strings():
    trace = calculator_trace("Total: <<1200/2=600.0>>600 and <<3*0.5=1.50>>1.50 and <<2000-800=1,200>>1,200", "#### 1")
    assert trace.calls == 3


def test_reference_sft_with_the_calculator_writes_traces_and_counts_dropped_rows(tmp_path):
    rows = [
        {"question": "How many clips?", "answer": GSM8K_SOLUTION},
        {"question": "Broken note?", "answer": "Half is <<48/2=25>>25.\n#### 25"},
        {"question": "No steps?", "answer": "She has 3.\n#### 3"},
    ]
    data = DataSection(source=str(write_jsonl(rows, tmp_path / "train.jsonl")), answer_marker="hashes")
    examples = reference_examples(data, None, seed=0, tools=CALCULATOR)
    assert [len(e["completion"]) for e in examples.rows] == [5, 1]
    assert examples.source["malformed"] == 1 and examples.source["tool_calls"] == 2
    assert examples.source["without_calls"] == 1
    assert "the calculator gives 24" in examples.source["malformed_examples"][0]
    assert "1 rows dropped for a malformed annotation" in examples.describe()
    schema = json.loads(examples.rows[0]["tools"])
    assert [t["function"]["name"] for t in schema] == ["calculator"]  # rendered into the prompt as GRPO renders it
    without_tools = reference_examples(data, None, seed=0)
    assert "<<" not in without_tools.rows[0]["completion"][0]["content"]  # no calculator: the notes are dropped
    assert len(without_tools.rows) == 3


def test_generated_products_carry_an_annotated_step_that_becomes_one_call():
    rows = generate_task("generated:products", "train", 20, seed=3)
    for row in rows:
        a, b = (int(w) for w in row["question"].removeprefix("What is ").removesuffix("?").split(" times "))
        trace = calculator_trace(row["answer"].split("####")[0], f"#### {a * b}")
        assert trace.calls == 1
        assert trace.messages[1]["content"] == str(a * b)
    test = {r["question"] for r in generate_task("generated:products", "test", 2000, seed=3)}
    assert test.isdisjoint(r["question"] for r in generate_task("generated:products", "train", 2000, seed=3))


def test_a_chat_template_of_trls_lets_a_model_without_tools_in_its_template_carry_calls(tmp_path, tiny_llama):
    from grpo_cli.models import load_tokenizer
    from grpo_cli.recipe.model_section import ModelSection
    from grpo_cli.tools.template import check_tool_template

    tokenizer = load_tokenizer(ModelSection(name=str(tiny_llama), chat_template="qwen2_5"))
    check_tool_template(tokenizer, str(tiny_llama))  # raises when TRL could not render or parse calls
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": _call("1+1")}],
        tokenize=False,
    )
    assert '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>' in rendered


def test_an_unknown_chat_template_is_one_line_naming_the_key(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama, model={"name": str(tiny_llama), "chat_template": "qwen9"})
    result = CliRunner().invoke(app, ["validate", str(recipe)])
    fails_cleanly(result, "model.chat_template", "qwen9", "qwen2_5")
    missing = write_recipe(tmp_path, tiny_llama, model={"name": str(tiny_llama), "chat_template": "mine.jinja"})
    fails_cleanly(CliRunner().invoke(app, ["validate", str(missing)]), "model.chat_template", "mine.jinja")


@pytest.mark.slow  # real SFT and GRPO steps
def test_a_sft_on_traces_trains_the_models_turns_only_then_grpo_calls_the_tool(tmp_path, tool_model):
    import math

    from safetensors.torch import load_file

    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.run import train
    from grpo_cli.train.sft import sft_setup, sft_trainer
    from grpo_cli.train.sft_examples import training_examples

    recipe = load_recipe(
        write_recipe(
            tmp_path,
            tool_model,  # TRL's Qwen2.5 template, so TRL can tell the model's turns from the tool's
            data={
                "source": "generated:products",
                "limit": 64,
                "system_prompt": "Use the calculator.",
                "answer_marker": "hashes",
            },
            tools=["calculator"],
            sft={"source": "reference", "count": 8, "max_steps": 2, "max_length": 1024, "learning_rate": 0.01},
            lora={"r": 4, "alpha": 8, "dropout": 0.0},
            # a reward that differs within every group: GRPO has an advantage whatever the tiny model writes
            rewards=[{"name": "correctness"}, {"name": f"{ASSETS / 'varied_rewards.py'}:alternating"}],
            grpo={"num_generations": 2, "max_completion_length": 16, "max_tool_calling_iterations": 1},
        )
    )
    examples = training_examples(recipe.sft, recipe.data, recipe.tools, recipe.training.seed)
    trainer = sft_trainer(recipe.sft, recipe.training, tmp_path / "sft", sft_setup(recipe), examples.rows, [])
    assert trainer.args.assistant_only_loss
    row = trainer.train_dataset[0]
    tokenizer = trainer.processing_class
    trained = tokenizer.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])
    product = examples.rows[0]["completion"][1]["content"]
    assert "<tool_call>" in trained and f"#### {product}" in trained  # the call and the answer are learned
    assert "<tool_response>" not in trained  # the tool's answer is read, not learned
    everything = tokenizer.decode(row["input_ids"])
    assert everything.count(product) == 3 and trained.count(product) == 2  # the closing turn's two, not the tool's

    result = train(recipe)
    rows = [json.loads(line) for line in (result.run_dir / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rows] == [1, 2] and all(math.isfinite(m["loss"]) for m in rows)
    source = json.loads((result.run_dir / "sft" / "source.json").read_text())
    assert source["tool_calls"] == 8 and source["malformed"] == 0
    assert not result.interrupted and result.global_step == recipe.training.max_steps
    metrics = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(m["loss"]) and "tools/call_frequency" in m for m in metrics)
    adapter = load_file(result.final_dir / "adapter_model.safetensors")
    after_sft = load_file(result.run_dir / "sft" / "final" / "adapter_model.safetensors")
    assert any(not torch.equal(adapter[k], after_sft[k]) for k in after_sft), "GRPO moved the SFT adapter"


def test_the_console_line_and_run_summary_show_the_tool_figures_of_a_tool_run():
    import io

    from rich.console import Console

    from grpo_cli.train.display import TrainingDisplay

    out = io.StringIO()
    display = TrainingDisplay(Console(file=out, width=200), total_steps=2)
    tools = {"tools/call_frequency": 0.75, "tools/malformed_frequency": 0.25, "tools/failure_frequency": 0.0}
    display.update({"step": 1, "reward": 0.5, "loss": 0.1, "step_time_s": 1.0, **tools, "tools/turns": 1.5})
    line = out.getvalue().strip().splitlines()[-1]
    assert "calls 0.75" in line and "malformed 0.25" in line and "tool errors 0" in line and "turns 1.5" in line
    Console(file=out, width=200).print(display.summary())
    assert "tools/call_frequency" in out.getvalue().split("run summary")[-1]
    display.update({"step": 2, "reward": 0.5, "loss": 0.1, "step_time_s": 1.0})  # a run without tools: no columns
    assert "calls" not in out.getvalue().strip().splitlines()[-1]
    Console(file=out, width=200).print(display.summary())
    assert "tools/call_frequency" not in out.getvalue().split("run summary")[-1]  # the last step had no tool keys


def _tiny_with_markers(tmp_path, tiny_llama):
    """The tiny model's folder with `<tool_call>`/`</tool_call>` as added tokens, as Qwen2.5's tokenizer has them."""
    import shutil

    from transformers import AutoTokenizer

    folder = tmp_path / "with-markers"
    shutil.copytree(tiny_llama, folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.add_tokens(["<tool_call>", "</tool_call>"])
    tokenizer.save_pretrained(str(folder))
    return folder, tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])


def test_text_tokens_write_the_markers_as_ordinary_pieces_and_trl_still_parses_the_call(tmp_path, tiny_llama):
    from grpo_cli.models import load_tokenizer
    from grpo_cli.recipe.model_section import ModelSection
    from grpo_cli.tools.template import check_tool_template

    folder, marker_ids = _tiny_with_markers(tmp_path, tiny_llama)
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>'
    atomic = load_tokenizer(ModelSection(name=str(folder), chat_template="qwen2_5"))
    assert set(marker_ids) <= set(atomic.encode(call, add_special_tokens=False))

    section = ModelSection(name=str(folder), chat_template="qwen2_5", text_tokens=["<tool_call>", "</tool_call>"])
    tokenizer = load_tokenizer(section)
    ids = tokenizer.encode(call, add_special_tokens=False)
    assert not set(marker_ids) & set(ids)
    assert len(ids) > len(atomic.encode(call, add_special_tokens=False))
    assert tokenizer.decode(ids) == call
    check_tool_template(tokenizer, str(folder))  # the template renders and TRL's parser reads the call back


def test_a_text_token_the_tokenizer_lacks_is_one_line_naming_the_key(tmp_path, tiny_llama):
    from grpo_cli.errors import UserError
    from grpo_cli.models import load_tokenizer
    from grpo_cli.recipe.model_section import ModelSection

    folder, _ = _tiny_with_markers(tmp_path, tiny_llama)
    with pytest.raises(UserError) as caught:
        load_tokenizer(ModelSection(name=str(folder), text_tokens=["<tool_cal>"]))
    assert caught.value.problems[0].path == "model.text_tokens"
    assert "<tool_cal>" in str(caught.value) and "<tool_call>" in str(caught.value)


def test_a_reference_sft_that_could_write_no_call_is_refused_at_validate():
    recipe = str(ROOT / "recipes" / "demo_tools.yaml")
    result = CliRunner().invoke(app, ["validate", recipe, "data.answer_format=plain"])
    fails_cleanly(result, "sft.source", "no example would call a tool")
