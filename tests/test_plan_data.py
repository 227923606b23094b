"""`grpo plan` for the data at hand: the peak at the longest prompt that survives the recipe's filters, beside the
bound at the recipe's limits; the fallback when the data cannot be read; the cache; train's RAM check."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import write_jsonl, write_recipe
from grpo_cli import data, models
from grpo_cli.cli import app
from grpo_cli.plan import architectures
from grpo_cli.plan.data_lengths import read_data_lengths
from grpo_cli.plan.memory import memory_plan
from grpo_cli.recipe.validation import load_recipe

runner = CliRunner()


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))


def planned(recipe_path, *args) -> dict:
    result = runner.invoke(app, ["plan", str(recipe_path), *args, "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def prepared_lengths(recipe_path) -> list[int]:
    recipe = load_recipe(recipe_path)
    tokenizer = models.load_tokenizer(recipe.model)
    return data.prepare(recipe.data, tokenizer, seed=recipe.training.seed).prompt_lengths


def test_plan_sizes_sequences_at_the_longest_prompt_training_will_see(tiny_qwen2, tmp_path):
    path = write_recipe(tmp_path, tiny_qwen2, data={"max_prompt_length": 200})
    lengths = prepared_lengths(path)
    plan = planned(path)
    assert plan["planned_for"] == "data" and plan["data"] == {"longest_prompt_tokens": max(lengths), "prompts": 32}
    assert plan["prompt_tokens"] == max(lengths) < 200 == plan["limits"]["prompt_tokens"]
    assert plan["peak_rss_gib"] < plan["limits"]["peak_rss_gib"]
    recipe = load_recipe(path, scope="plan")
    at_data = memory_plan(recipe, architectures.resolve(recipe.model), "cpu", prompt_tokens=max(lengths))
    assert plan["peak_tensors_gib"] == round(at_data.peak_tensors / 2**30, 4)

    table = runner.invoke(app, ["plan", str(path), "--device", "cpu"]).output
    assert f"longest prompt is {max(lengths)} tokens" in table and "at the recipe's limits (200 prompt" in table


def test_the_recipes_filters_decide_the_longest_prompt(tiny_qwen2, tmp_path):
    rows = [{"question": "What is 2 + 3?", "answer": "#### 5"}] * 8
    rows += [{"question": "Count: " + "one two three " * 40 + "How many words?", "answer": "#### 120"}]
    source = write_jsonl(rows, tmp_path / "train.jsonl")
    path = write_recipe(tmp_path, tiny_qwen2, data={"source": str(source), "max_prompt_length": 60})
    plan = planned(path)
    assert plan["data"]["prompts"] == 8  # the long question is dropped, as training drops it
    assert plan["prompt_tokens"] == max(prepared_lengths(path)) <= 60


def test_data_that_cannot_be_read_offline_falls_back_to_the_limits_in_one_line(tiny_qwen2, tmp_path):
    path = write_recipe(tmp_path, tiny_qwen2, data={"source": "openai/gsm8k", "config": "main"})
    plan = planned(path)
    assert plan["planned_for"] == "limits" and plan["data"] is None
    assert plan["prompt_tokens"] == plan["limits"]["prompt_tokens"] and "openai/gsm8k" in plan["data_note"]
    table = runner.invoke(app, ["plan", str(path), "--device", "cpu"]).output
    assert "not a local file: planned at the recipe's limits" in table


@pytest.mark.parametrize("text, words", [("", "is empty"), ("\n  \n", "holds no rows")])
def test_an_empty_data_file_plans_at_the_limits_saying_what_validate_says(tiny_qwen2, tmp_path, text, words):
    (tmp_path / "train.jsonl").write_text(text)
    path = write_recipe(tmp_path, tiny_qwen2, data={"source": str(tmp_path / "train.jsonl")})
    plan = planned(path)
    assert plan["planned_for"] == "limits" and words in plan["data_note"], plan["data_note"]


def test_lengths_are_cached_on_the_file_and_measured_again_when_it_changes(tiny_qwen2, tmp_path, monkeypatch):
    from grpo_cli.plan import data_lengths

    source = write_jsonl([{"question": "What is 2 + 3?", "answer": "#### 5"}] * 8, tmp_path / "train.jsonl")
    recipe = load_recipe(write_recipe(tmp_path, tiny_qwen2, data={"source": str(source)}))
    first, _ = read_data_lengths(recipe)
    measure = data_lengths._measure

    def not_again(model, data, seed, tools):
        raise AssertionError("measured again")

    monkeypatch.setattr(data_lengths, "_measure", not_again)
    assert read_data_lengths(recipe)[0] == first  # from the cache
    write_jsonl([{"question": "What is 2 + 3? " * 5, "answer": "#### 5"}] * 8, source)
    lengths, note = read_data_lengths(recipe)
    assert lengths is None and "measured again" in note  # the changed file is not taken from the cache
    monkeypatch.setattr(data_lengths, "_measure", measure)
    assert read_data_lengths(recipe)[0].longest_prompt > first.longest_prompt


def test_train_checks_ram_with_the_same_figure_as_the_plan(tiny_qwen2, tmp_path, monkeypatch):
    from grpo_cli.plan import gpus
    from grpo_cli.train.runtime import memory_at_start

    path = write_recipe(tmp_path, tiny_qwen2, data={"max_prompt_length": 500})  # within its 512 positions
    plan = planned(path)
    between = (plan["peak_rss_gib"] + plan["limits"]["peak_rss_gib"]) / 2 * 2**30
    monkeypatch.setattr(gpus, "available_ram", lambda: between)
    assert memory_at_start(load_recipe(path)) == []  # enough for this data, though not for the limits
    monkeypatch.setattr(gpus, "available_ram", lambda: plan["peak_rss_gib"] * 0.9 * 2**30)
    assert "expects a peak RSS" in memory_at_start(load_recipe(path))[0]


def full_lengths(recipe, tools=None) -> tuple[int, int]:
    tokenizer = models.load_tokenizer(recipe.model)
    prepared = data.prepare(recipe.data, tokenizer, seed=recipe.training.seed, tools=tools)
    return max(prepared.prompt_lengths), len(prepared.prompt_lengths)


def test_once_a_folder_was_seen_the_plan_counts_without_torch_the_tokens_training_counts(tiny_qwen2, tmp_path):
    from grpo_cli.plan.light_tokenizer import longest_prompt, remember_class

    recipe = load_recipe(write_recipe(tmp_path, tiny_qwen2, data={"limit": 200, "max_prompt_length": 64}))
    # a folder not seen yet: the full tokenizer decides
    assert longest_prompt(recipe.model, recipe.data, recipe.training.seed) is None
    remember_class(models.load_tokenizer(recipe.model))  # as the first plan of the folder does
    assert longest_prompt(recipe.model, recipe.data, recipe.training.seed) == full_lengths(recipe)

    rows = [{"question": f"Q{i}: what is {i} + {i}? " * (1 + i % 7), "answer": f"#### {2 * i}"} for i in range(60)]
    rows += [{"question": "", "answer": "#### 1"}, {"question": "no number", "answer": "#### many"}]
    source = write_jsonl(rows, tmp_path / "rows.jsonl")
    recipe = load_recipe(
        write_recipe(tmp_path, tiny_qwen2, data={"source": str(source), "limit": 55, "max_prompt_length": 90})
    )
    assert longest_prompt(recipe.model, recipe.data, recipe.training.seed) == full_lengths(recipe)

    code = (
        "import sys; from grpo_cli.cli import app; "
        f"app(['plan', {str(tmp_path / 'recipe.yaml')!r}, 'data.limit=50', '--device', 'cpu', '--json'], "
        "standalone_mode=False); print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
    longest, prompts = full_lengths(load_recipe(tmp_path / "recipe.yaml", ["data.limit=50"]))
    planned = json.loads("\n".join(done.stdout.strip().splitlines()[:-1]))
    assert planned["data"] == {"longest_prompt_tokens": longest, "prompts": prompts}


@pytest.mark.slow  # builds tool_model (training steps)
def test_the_tool_descriptions_count_in_both_ways(tool_model, tmp_path):
    from grpo_cli.plan.light_tokenizer import longest_prompt, remember_class
    from grpo_cli.tools.registry import guarded_tools

    recipe = load_recipe(write_recipe(tmp_path, tool_model, tools=[{"name": "calculator"}]))
    remember_class(models.load_tokenizer(recipe.model))
    tools = guarded_tools(recipe.tools)
    with_tools = longest_prompt(recipe.model, recipe.data, recipe.training.seed, tools)
    assert (
        with_tools == full_lengths(recipe, tools)
        and with_tools[0] > longest_prompt(recipe.model, recipe.data, recipe.training.seed)[0]
    )
