"""`grpo preflight` on a tiny model: real sampling, real training steps, rewards that vary, stay constant or raise."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import write_recipe
from grpo_cli.cli import app
from grpo_cli.preflight.measure import StepMeasurement
from grpo_cli.preflight.run import expected_step_seconds
from grpo_cli.preflight.sampling import SampledGroups
from grpo_cli.recipe.schema import Recipe

pytestmark = pytest.mark.slow  # real training steps: `pytest -m 'not slow'` skips them in an inner loop

REWARDS = """
def constant(completions, **kwargs):
    return [1.0 for _ in completions]


def characters(completions, **kwargs):
    return [float(len(c[0]["content"])) for c in completions]


def words(completions, **kwargs):
    return ["many" for _ in completions]


def picky(completions, **kwargs):
    if any(len(c[0]["content"]) % 2 for c in completions):
        raise ValueError("odd length")
    return [0.5 for _ in completions]
"""


def preflight(tmp_path, tiny_llama, rewards, *args):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    recipe = write_recipe(
        tmp_path, tiny_llama, rewards=[{"name": f"{tmp_path / 'my_rewards.py'}:{r}"} for r in rewards]
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine")
    result = CliRunner().invoke(app, ["preflight", str(recipe), "--json", "--prompts", "6", *args])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]  # the run directory is untouched
    return json.loads(result.stdout)


def test_varying_and_failing_rewards_with_all_fields(tmp_path, tiny_llama):
    data = preflight(tmp_path, tiny_llama, ["characters", "picky", "words"], "--gpu", "24GB")
    assert data["prompts"] == 6 and data["completions"] == 12
    assert data["zero_variance_share"] < 1.0  # character counts differ within a group
    characters, picky, words = data["rewards"]
    assert characters["failed"] == 0 and characters["std"] > 0 and characters["min"] < characters["max"]
    assert 0 < picky["failed"] < 12 and "raised: ValueError: odd length" in picky["error"]
    assert words["failed"] == 12 and "returned 'many' (str)" in words["error"]
    assert any("picky failed on" in a["reason"] for a in data["advice"])
    assert data["measured_peak_gib"] > 0 and data["planned_peak_gib"] > 0 and abs(data["peak_error_pct"]) < 100
    assert data["measured_peak_rss_gib"] > data["measured_peak_gib"] and data["planned_peak_rss_gib"] > 0
    assert data["step_s"] > 0 and 0 <= data["generation_s"] <= data["step_s"]
    assert data["total_steps"] == 2 and 0 < data["eta_s"] <= data["eta_worst_s"] * 1.001
    assert data["fits"] is True and data["gpu_gib"] == 24
    assert data["truncated_share"] == 1.0  # random weights never say end-of-sequence within 8 tokens
    assert any("grpo.max_completion_length=16" in a["overrides"] for a in data["advice"])


def _step_for(data_prompt: int, mean_completion: float, batch_share: float) -> tuple[float, float]:
    """The ETA model's step for a recipe without data.max_prompt_length, measured at a 30-token calibration prompt
    and the full 8-token budget in 2.0 s, 1.5 s of it generating."""
    recipe = Recipe.model_validate(
        {"model": {"name": "tiny"}, "data": {"source": "generated"}, "rewards": [{"name": "correctness"}]}
    )
    recipe = recipe.model_copy(update={"grpo": recipe.grpo.model_copy(update={"max_completion_length": 8})})
    assert recipe.data.max_prompt_length is None
    ran = recipe.model_copy(update={"data": recipe.data.model_copy(update={"max_prompt_length": 30})})
    measured = StepMeasurement(1.0, 1.0, None, [2.0], [1.5], "cpu", ran)
    groups = SampledGroups(
        prompts=2,
        completions=4,
        zero_variance_share=0.0,
        truncated_share=0.0,
        mean_completion_tokens=mean_completion,
        batch_length_share=batch_share,
        tokens_per_second=0.0,
        longest_prompt_tokens=data_prompt,
    )
    return expected_step_seconds(recipe.data, recipe.grpo, measured, groups, 2.0, 1.5)


def test_eta_counts_the_datas_prompts_when_completions_are_empty():
    """Empty sampled completions still cost a step: the prompts from the data are trained on and pass through
    generation. The data's prompt length, not the calibration prompt's, sets the training part."""
    empty, worst = _step_for(data_prompt=30, mean_completion=0.0, batch_share=0.0)
    assert 0 < empty < worst
    assert empty == pytest.approx(1.5 / 8 + 0.5 * 30 / 38)  # one token of generation; training over the prompts
    assert worst == pytest.approx(2.0)  # the data's prompts as long as the measured one: the measured step
    longer, longer_worst = _step_for(data_prompt=90, mean_completion=0.0, batch_share=0.0)
    assert longer - empty == pytest.approx(0.5 * 60 / 38) and longer_worst > worst
    sampled, _ = _step_for(data_prompt=30, mean_completion=4.0, batch_share=0.5)
    assert empty < sampled == pytest.approx(1.5 * 0.5 + 0.5 * 34 / 38)


def test_constant_reward_has_no_signal_and_gets_advice(tmp_path, tiny_llama):
    data = preflight(tmp_path, tiny_llama, ["constant"])
    assert data["zero_variance_share"] == 1.0
    (constant,) = data["rewards"]
    assert constant["std"] == 0 and constant["min"] == constant["max"] == 1.0
    reasons = [a["reason"] for a in data["advice"]]
    assert any("same reward for every completion" in r for r in reasons)
    assert any("grpo.num_generations=4" in a["overrides"] for a in data["advice"])
    assert any("cannot steer learning" in r for r in reasons)


def test_human_output_names_the_three_answers(tmp_path, tiny_llama):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    recipe = write_recipe(tmp_path, tiny_llama, rewards=[{"name": f"{tmp_path / 'my_rewards.py'}:constant"}])
    result = CliRunner().invoke(app, ["preflight", str(recipe), "--prompts", "2"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # One line each for fit, time and signal, with their figures; advice as a runnable command line.
    assert any(line.startswith("fit") and "measured peak" in line and "GiB" in line for line in lines), result.stdout
    assert any(line.startswith("time") and "s a step" in line for line in lines), result.stdout
    assert any(line.startswith("signal") and "2 prompts" in line for line in lines), result.stdout
    assert any(line.strip().startswith(f"grpo train {recipe} grpo.num_generations=") for line in lines), result.stdout
    # Where it is while it works: a line per phase in a log (a status line in a terminal).
    for phase in (
        "loading the model",
        "sampling for the learning signal: batch 1/1",
        "timing training step 1/2",
        "timing training step 2/2 at full length (tracking live tensors",
    ):
        assert phase in result.stderr, result.stderr


def test_validation_while_training_is_timed_and_its_passes_counted(tmp_path, tiny_llama):
    """A recipe that validates: one batch of the held-out slice is timed and the passes are counted (before the
    first step, every 2nd, after the last: 4 for 5 steps)."""
    recipe = write_recipe(
        tmp_path,
        tiny_llama,
        data={"source": "generated:parity", "answer_format": "plain", "limit": 32, "system_prompt": None},
        rewards=[{"name": "normalized_match"}],
        training={"max_steps": 5},
        validation={"every_steps": 2, "limit": 6, "batch_size": 4, "max_new_tokens": 4},
        eval={"protocol": "task"},
    )
    result = CliRunner().invoke(app, ["preflight", str(recipe), "--json", "--prompts", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    v = data["validation"]
    assert v["problems"] == 6 and v["timed_problems"] == 4 and v["passes"] == 4
    # Both are rounded to ms after eta = 4 x the unrounded pass: 4 x 0.5 ms + 0.5 ms apart at most.
    assert v["pass_s"] > 0 and v["eta_s"] == pytest.approx(4 * v["pass_s"], abs=0.0025 + 1e-9)
    assert "timing validation: one batch of 4 held-out problems" in result.stderr
