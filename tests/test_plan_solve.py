"""`grpo plan --solve KEY`: the largest value that fits, checked by planning it and the next one with overrides."""

from __future__ import annotations

import json
import shlex

import pytest
from typer.testing import CliRunner

from conftest import ROOT, fails_cleanly
from grpo_cli.cli import app
from grpo_cli.plan.solve import SOLVABLE, _largest

runner = CliRunner()
LORA = str(ROOT / "recipes/qwen2.5/0.5b_lora.yaml")  # 16 completions per micro-batch, groups of 8, 2 steps/generation
FULL = str(ROOT / "recipes/qwen2.5/1.5b_full.yaml")


def plan(*args: str) -> dict:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def solved(recipe: str, key: str, *args: str) -> dict:
    return plan(recipe, *args, "--solve", key)["solve"]


@pytest.mark.parametrize("key", SOLVABLE)
def test_the_value_found_fits_and_the_next_does_not(key):
    answer = solved(LORA, key, "--gpu", "RTX 4090")
    assert answer["key"] == key and answer["value"] > answer["current_value"]
    assert answer["next_value"] > answer["value"] and answer["budget_gib"] == 24
    assert f"{key}={answer['value']}" in answer["overrides"]
    at_value = plan(LORA, *answer["overrides"], "--gpu", "RTX 4090")
    at_next = plan(LORA, *answer["next_overrides"], "--gpu", "RTX 4090")
    assert at_value["fits"] is True and at_value["peak_nvidia_smi_gib"] == pytest.approx(answer["peak_gib"], abs=1e-4)
    assert at_next["fits"] is False and at_next["peak_nvidia_smi_gib"] == pytest.approx(
        answer["next_peak_gib"], abs=1e-4
    )
    # the recipe as given is unchanged by the search: the rest of the document is its plan
    assert plan(LORA, "--gpu", "RTX 4090")["peak_nvidia_smi_gib"] == pytest.approx(answer["current_peak_gib"], abs=1e-4)


def test_the_group_grows_with_the_micro_batch_that_counts_its_completions():
    """The plan depends on completions, not on their grouping: the group alone would never change it."""
    answer = solved(LORA, "grpo.num_generations", "--gpu", "RTX 4090")
    g = answer["value"]
    assert answer["overrides"] == [f"grpo.num_generations={g}", f"training.per_device_train_batch_size={2 * g}"]
    assert "counts completions" in answer["note"]
    assert runner.invoke(app, ["validate", LORA, *answer["overrides"]]).exit_code == 0
    table = runner.invoke(app, ["plan", LORA, "--gpu", "RTX 4090", "--solve", "grpo.num_generations"])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].startswith(f"grpo.num_generations: at most {g} fits RTX 4090 (24 GiB)")
    assert "does not fit" in lines[2] and lines[-1].strip().startswith(
        f"->  grpo train {LORA} grpo.num_generations={g}"
    )


def test_the_micro_batch_moves_in_steps_that_keep_whole_groups():
    """Groups of 8 over 2 steps per generation: only multiples of 4 make whole groups, and only those are proposed."""
    answer = solved(LORA, "training.per_device_train_batch_size", "--gpu", "RTX 4090")
    b = answer["value"]
    assert b % 4 == 0 and answer["next_value"] == b + 4 and "in steps of 4" in answer["note"]
    assert runner.invoke(app, ["validate", LORA, *answer["overrides"]]).exit_code == 0
    assert runner.invoke(app, ["validate", LORA, f"training.per_device_train_batch_size={b + 1}"]).exit_code == 2
    # a fixed generation batch: the micro-batch must divide it
    fixed = solved(LORA, "training.per_device_train_batch_size", "--gpu", "H200", "trl.generation_batch_size=64")
    assert fixed["value"] == 64 and fixed["next_value"] is None and "divides" in fixed["limit"]


def test_the_models_context_and_the_schema_bound_the_search():
    completion = solved(LORA, "grpo.max_completion_length", "--gpu", "H200")
    assert completion["value"] == 32768 - 256 and completion["next_peak_gib"] is None
    assert "32768 positions" in completion["next_refused"]
    rank = solved(LORA, "lora.r", "--gpu", "H200")
    assert rank["value"] == 4096 and "less than or equal to 4096" in rank["next_refused"]


def test_a_cpu_plan_solves_against_the_ram_given():
    answer = solved(LORA, "grpo.max_completion_length", "--device", "cpu", "--ram", "16GB")
    assert answer["budget_gib"] == 16 and answer["peak"] == "peak_rss"
    at_next = plan(LORA, *answer["next_overrides"], "--device", "cpu", "--ram", "16GB")
    assert at_next["fits"] is False and at_next["peak_rss_gib"] > 16


def test_not_even_the_smallest_value_fits_in_one_line():
    result = runner.invoke(app, ["plan", FULL, "--gpu", "4GB", "--solve", "grpo.max_completion_length"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert "not even the smallest value fits 4 GiB" in line and "grpo.max_completion_length=1 needs" in line
    as_json = runner.invoke(app, ["plan", FULL, "--gpu", "4GB", "--solve", "grpo.max_completion_length", "--json"])
    answer = json.loads(as_json.stdout)["solve"]
    assert as_json.exit_code == 1 and answer["value"] is None and answer["next_value"] == 1
    assert answer["next_peak_gib"] > 4


@pytest.mark.parametrize(
    ("recipe", "key", "words"),
    [
        (LORA, "training.learning_rate", ["--solve training.learning_rate", "not a size it can search"]),
        (LORA, "grpo.num_generation", ["--solve grpo.num_generation", "not a recipe field"]),
        (FULL, "lora.r", ["--solve lora.r", "no `lora:` section"]),
    ],
)
def test_a_key_it_cannot_solve_is_refused_with_the_keys_it_can(recipe, key, words):
    line = fails_cleanly(runner.invoke(app, ["plan", recipe, "--gpu", "24GB", "--solve", key]), *words)
    assert all(allowed in line for allowed in SOLVABLE), line


def test_the_group_size_alone_under_a_fixed_generation_batch_is_refused():
    result = runner.invoke(
        app, ["plan", LORA, "trl.generation_batch_size=64", "--gpu", "24GB", "--solve", "grpo.num_generations"]
    )
    fails_cleanly(result, "does not depend on the group size", "training.per_device_train_batch_size")


def test_an_empty_key_is_refused_not_ignored():
    fails_cleanly(runner.invoke(app, ["plan", LORA, "--gpu", "24GB", "--solve", ""]), "--solve", "not a recipe field")


def test_sizes_that_put_every_allowed_value_past_the_search_are_one_line():
    big = ["grpo.num_generations=4000000", "training.per_device_train_batch_size=4000000"]
    result = runner.invoke(
        app, ["plan", LORA, *big, "--gpu", "24GB", "--solve", "training.per_device_train_batch_size"]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    (line,) = result.output.strip().splitlines()
    assert "no value up to 1048576 is allowed with the recipe's other sizes" in line


def test_a_huge_fixed_generation_batch_is_searched_in_a_moment():
    """The micro-batch must divide the generation batch: its divisors come from pairs up to the square root, not
    from counting to 16 trillion."""
    import time

    started = time.perf_counter()
    huge = "trl.generation_batch_size=16000000000000"
    result = runner.invoke(
        app, ["plan", LORA, huge, "--gpu", "24GB", "--solve", "training.per_device_train_batch_size"]
    )
    assert "Traceback" not in result.output and time.perf_counter() - started < 20, result.output
    assert result.exit_code in (0, 1), result.output


def test_a_refused_trial_names_the_key_not_the_command_line():
    answer = solved(str(ROOT / "recipes/demo.yaml"), "lora.r", "--gpu", "200GB")
    assert answer["next_refused"].startswith("lora.r:"), answer


def test_without_a_budget_it_asks_for_one():
    result = runner.invoke(app, ["plan", str(ROOT / "recipes/demo.yaml"), "--device", "cuda", "--solve", "lora.r"])
    fails_cleanly(result, "--solve lora.r needs the memory to fit", "--gpu")


def test_the_search_finds_the_last_index_that_fits():
    for threshold in (0, 1, 2, 3, 5, 8, 1000, 4097):
        calls: list[int] = []

        def fits(index, threshold=threshold, calls=calls):
            calls.append(index)
            return index <= threshold

        assert _largest(fits) == threshold
        assert len(calls) <= 2 * max(1, threshold).bit_length() + 2


def test_the_docs_solve_examples_are_what_it_prints():
    doc = (ROOT / "docs" / "plan.md").read_text()
    for command in (
        'grpo plan recipes/qwen2.5/0.5b_lora.yaml --gpu "RTX 4090" --solve grpo.num_generations',
        "grpo plan recipes/qwen2.5/1.5b_full.yaml --gpu 8GB --solve grpo.max_completion_length",
    ):
        example = doc[doc.index(f"$ {command}") :].split("```")[0].splitlines()[1:]
        out = runner.invoke(app, shlex.split(command)[1:]).output
        assert [line for line in example if line.strip()] == out.splitlines(), command
