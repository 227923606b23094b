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
    predicted = memory_plan(ran, architectures.resolve(ran.model), "cpu").peak_tensors
    assert abs(predicted - measured) / measured < 0.15, (predicted / 2**20, measured / 2**20)


def test_phase_peaks_see_each_phase_of_real_steps(tmp_path, tiny_llama):
    """CUDA has no tensor tracker: measure_peak splits the allocator's peak at the trainer's own phase boundaries.
    Here a step counter stands in for torch.cuda's peak reader, so the boundaries of two real steps are checked."""
    from grpo_cli.preflight.trackers import PhasePeaks
    from grpo_cli.train.trainer import build_trainer

    recipe = load_recipe(write_recipe(tmp_path, tiny_llama, training={"max_steps": 2, "output_dir": str(tmp_path)}))
    trainer, _ = build_trainer(recipe, tmp_path / "run")
    boundaries: list[str] = []
    peaks = PhasePeaks(lambda: len(boundaries))
    original = peaks.switch
    peaks.switch = lambda phase: (boundaries.append(f"{peaks.phase}->{phase}"), original(phase))
    peaks.install(trainer)
    trainer.train()
    step = ["training->generation", "generation->training", "training->optimizer", "optimizer->training"]
    assert boundaries == step * 2
    assert set(peaks.peaks) == {"training", "generation", "optimizer"}
