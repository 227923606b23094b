"""grpo.zero_variance_groups: skip, on a tiny model: groups whose completions all scored the same leave the loss."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from conftest import write_recipe
from grpo_cli.cli import app
from grpo_cli.train.zero_variance import skip_rows, zero_variance_groups

pytestmark = pytest.mark.slow  # real training steps: `pytest -m 'not slow'` skips them in an inner loop

runner = CliRunner()

REWARDS = '''
CALLS = {}


def flat_first_round(completions, trainer_state=None, **kwargs):
    """Constant in a step's first generation round, varying in every extra round."""
    CALLS[trainer_state.global_step] = CALLS.get(trainer_state.global_step, 0) + 1
    if CALLS[trainer_state.global_step] == 1:
        return [1.0 for _ in completions]
    return [float(len(c[0]["content"]) % 5) + 0.01 * i for i, c in enumerate(completions)]


def constant(completions, **kwargs):
    return [1.0 for _ in completions]


def half_flat(prompts, completions, **kwargs):
    """Constant for prompts whose text sums to an even number, varying with the completion otherwise."""
    out = []
    for prompt, completion in zip(prompts, completions):
        flat = sum(map(ord, prompt[-1]["content"])) % 2 == 0
        out.append(1.0 if flat else float(len(completion[0]["content"]) % 5))
    return out
'''


def trainable(run_dir):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "final" / "adapter_model.safetensors"))


def run(tmp_path, tiny_llama, reward: str, steps: int = 3, **grpo):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    grpo = {"num_generations": 4, "zero_variance_groups": "skip", **grpo}
    recipe = write_recipe(
        tmp_path,
        tiny_llama,
        rewards=[{"name": f"{tmp_path / 'my_rewards.py'}:{reward}"}],
        lora={"r": 4, "dropout": 0.0},
        grpo=grpo,
        training={"max_steps": steps, "per_device_train_batch_size": 16, "save_steps": 100},
    )
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


def test_the_tolerance_is_preflights():
    rewards = torch.tensor([[1.0], [1.0], [1.0], [1.0], [0.0], [2.0], [1.0], [1.0], [0.5], [0.5004], [0.5], [0.5]])
    assert zero_variance_groups(rewards, torch.tensor([1.0]), 4).tolist() == [True, False, True]


def test_all_groups_flat_trains_nothing_and_does_not_crash(tmp_path, tiny_llama):
    metrics = run(tmp_path, tiny_llama, "constant")
    assert [m["zero_variance/groups_skipped"] for m in metrics] == [4.0, 4.0, 4.0]
    assert all(m["loss"] == 0.0 for m in metrics)
    weights = trainable(tmp_path / "run")  # LoRA starts with lora_B at zero: still zero, nothing was learned
    assert all(torch.count_nonzero(t) == 0 for name, t in weights.items() if "lora_B" in name)


def test_groups_with_variance_still_train(tmp_path, tiny_llama):
    metrics = run(tmp_path, tiny_llama, "half_flat", steps=4)
    skipped = [m["zero_variance/groups_skipped"] for m in metrics]
    assert 0 < sum(skipped) < 16, skipped  # some groups flat, some not
    weights = trainable(tmp_path / "run")
    assert any(torch.count_nonzero(t) > 0 for name, t in weights.items() if "lora_B" in name)
    assert all(torch.isfinite(torch.tensor(m["loss"])) for m in metrics)


def test_keep_counts_flat_groups_that_trls_batch_deviation_misses(tmp_path, tiny_llama):
    """With `keep` every group trains, and the flat ones are still counted: under scale_rewards: batch, TRL's
    frac_reward_zero_std tests the batch's deviation and reads 0 while some groups are flat."""
    metrics = run(tmp_path, tiny_llama, "half_flat", steps=4, zero_variance_groups="keep", scale_rewards="batch")
    flat = [m["zero_variance/groups_flat"] for m in metrics]
    assert 0 < sum(flat) < 16, flat
    assert all(m["frac_reward_zero_std"] == 0.0 for m in metrics)
    assert not any("zero_variance/groups_skipped" in m for m in metrics)
    weights = trainable(tmp_path / "run")
    assert any(torch.count_nonzero(t) > 0 for name, t in weights.items() if "lora_B" in name)


def flat_and_informative_output() -> tuple[dict, torch.Tensor]:
    """What TRL's generate-and-score returns for two groups of 2 rows, the first group flat."""
    output = {
        "prompt_ids": torch.tensor([[1, 2], [1, 2], [3, 4], [3, 4]]),
        "completion_ids": torch.tensor([[5, 6, 0], [5, 7, 8], [9, 0, 0], [9, 9, 0]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]]),
        "advantages": torch.tensor([0.0, 0.0, -1.0, 1.0]),
        "num_items_in_batch": torch.tensor(10),
    }
    return output, torch.tensor([False, False, True, True])


def test_several_micro_batches_mask_the_flat_rows_instead_of_dropping_them():
    """A generation batch split over micro-batches keeps its rows (the split is TRL's); the flat group's tokens
    leave the loss and its token count."""
    output, keep = flat_and_informative_output()
    skipped = skip_rows(dict(output), keep, one_micro_batch=False, gather=lambda x: x)
    assert skipped["completion_ids"].shape[0] == 4
    assert skipped["completion_mask"].tolist() == [[0, 0, 0], [0, 0, 0], [1, 0, 0], [1, 1, 0]]
    assert int(skipped["num_items_in_batch"]) == 3


def test_one_micro_batch_drops_the_flat_rows():
    output, keep = flat_and_informative_output()
    skipped = skip_rows(dict(output), keep, one_micro_batch=True, gather=lambda x: x)
    assert skipped["completion_ids"].tolist() == [[9, 0, 0], [9, 9, 0]]
    assert skipped["advantages"].tolist() == [-1.0, 1.0] and int(skipped["num_items_in_batch"]) == 3


def test_micro_batches_of_one_generation_batch_are_masked(tmp_path, tiny_llama):
    """Several micro-batches per generation, some groups flat: a real run finishes, skips groups, and learns from
    the others."""
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    recipe = write_recipe(
        tmp_path,
        tiny_llama,
        rewards=[{"name": f"{tmp_path / 'my_rewards.py'}:half_flat"}],
        lora={"r": 4, "dropout": 0.0},
        grpo={"num_generations": 4, "zero_variance_groups": "skip"},
        training={
            "max_steps": 2,
            "per_device_train_batch_size": 8,
            "gradient_accumulation_steps": 2,
            "save_steps": 100,
        },
    )
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and all(math.isfinite(m["loss"]) for m in metrics)
    skipped = [m["zero_variance/groups_skipped"] for m in metrics]
    assert 0 < sum(skipped) < 8, skipped  # some of the 2 x 4 groups flat, some not
    weights = trainable(tmp_path / "run")
    assert any(torch.count_nonzero(t) > 0 for name, t in weights.items() if "lora_B" in name)


def test_resample_fills_the_batch_with_informative_groups(tmp_path, tiny_llama):
    metrics = run(tmp_path, tiny_llama, "flat_first_round", steps=2, zero_variance_groups="resample")
    assert [m["zero_variance/groups_flat"] for m in metrics] == [4.0, 4.0]  # the first round of each step
    assert [m["zero_variance/extra_rounds"] for m in metrics] == [1.0, 1.0]
    assert [m["zero_variance/groups_skipped"] for m in metrics] == [0.0, 0.0]
    weights = trainable(tmp_path / "run")
    assert any(torch.count_nonzero(t) > 0 for name, t in weights.items() if "lora_B" in name)


def test_each_resampling_round_counts_its_tokens_afresh(tmp_path, tiny_llama, monkeypatch):
    import re

    from grpo_cli.train.display import TrainingDisplay

    seen: list[str] = []
    monkeypatch.setattr(TrainingDisplay, "phase", lambda self, text: seen.append(text))
    run(tmp_path, tiny_llama, "flat_first_round", steps=1, zero_variance_groups="resample")
    counts = [
        (m.group(1), int(m.group(2)), int(m.group(3)))
        for m in map(re.compile(r"(?: \(round (\d)\))?: token (\d+)/(\d+)").search, seen)
        if m
    ]
    assert any(name is None for name, _, _ in counts) and any(name == "2" for name, _, _ in counts), seen
    assert all(token <= budget for _, token, budget in counts), seen


def test_resample_stops_at_its_bound(tmp_path, tiny_llama):
    metrics = run(tmp_path, tiny_llama, "constant", steps=1, zero_variance_groups="resample", zero_variance_rounds=2)
    assert metrics[0]["zero_variance/extra_rounds"] == 2.0 and metrics[0]["zero_variance/groups_skipped"] == 4.0


def test_resample_needs_one_process(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama, grpo={"zero_variance_groups": "resample"})
    result = runner.invoke(app, ["validate", str(recipe), "distributed.num_processes=2"])
    assert result.exit_code == 2 and "grpo.zero_variance_groups" in result.output and "skip" in result.output
