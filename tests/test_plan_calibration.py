"""Re-measure two small configurations with real TRL steps and hold `grpo plan` to its bound (15%).

If a TRL or transformers upgrade changes how much memory a step takes, this fails before users find out.
"""

from __future__ import annotations

import pytest

from conftest import write_recipe
from grpo_cli.plan import architectures
from grpo_cli.plan.memory import memory_plan
from grpo_cli.preflight.measure import measure_peak
from grpo_cli.recipe.validation import load_recipe

pytestmark = pytest.mark.slow  # real training steps: `pytest -m 'not slow'` skips them in an inner loop


@pytest.fixture(scope="module")
def small_llama(tmp_path_factory):
    from tiny_models import build_model

    return build_model(tmp_path_factory.mktemp("small-llama"), "llama", hidden=256, layers=4)


@pytest.mark.parametrize(
    "sections",
    [
        dict(
            model={"dtype": "bfloat16", "gradient_checkpointing": False},
            grpo={"num_generations": 4, "max_completion_length": 48},
        ),
        dict(
            model={"dtype": "bfloat16", "gradient_checkpointing": True},
            lora={"r": 8, "dropout": 0.0},
            grpo={"num_generations": 4, "max_completion_length": 48, "beta": 0.04},
        ),
    ],
    ids=["full", "lora-gc-beta"],
)
def test_plan_within_bound_of_measured_peak(tmp_path, small_llama, sections):
    sections["model"]["name"] = str(small_llama)
    recipe = load_recipe(write_recipe(tmp_path, small_llama, training={"per_device_train_batch_size": 4}, **sections))
    measured, ran = measure_peak(recipe)
    predicted = memory_plan(ran, architectures.resolve(ran), "cpu").peak_tensors
    assert abs(predicted - measured) / measured < 0.15, (predicted / 2**20, measured / 2**20)
