"""`grpo preflight`'s constant policies (preflight/constant_policy.py): the most common reference answers given to
every training prompt, scored by the recipe's own reward functions on constant completions, against the base model's
mean verifier reward."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from conftest import write_jsonl, write_recipe
from grpo_cli.preflight.constant_policy import ConstantPolicies, ConstantPolicy, constant_policies, verifier_reward
from grpo_cli.recipe.schema import Recipe

# A user's verifier that records what it receives and pays only an answer marked with <answer>, in chat form.
TAGGED = """
SEEN = []


def tagged(prompts, completions, answer, **kwargs):
    SEEN.append(completions[0])
    out = []
    for completion, gold in zip(completions, answer):
        assert isinstance(completion, list) and completion[0]["role"] == "assistant", completion
        text = completion[0]["content"]
        out.append(1.0 if text.startswith("<answer>") and gold in text else 0.0)
    return out
"""


def parity_recipe(tmp_path, rewards, **data):
    """Yes/no questions, 12 of the 16 references `no` (no model is loaded: the rewards score constant text)."""
    rows = [{"question": f"Is {n} even? Answer yes or no.", "answer": "yes" if n < 4 else "No"} for n in range(16)]
    write_jsonl(rows, tmp_path / "parity.jsonl")
    path = write_recipe(
        tmp_path,
        tmp_path / "no-model-needed",
        data={"source": str(tmp_path / "parity.jsonl"), "answer_format": "plain", "limit": None, **data},
        rewards=rewards,
    )
    return Recipe.model_validate(yaml.safe_load(path.read_text()))


def inputs(recipe: Recipe) -> tuple:
    """What preflight gives constant_policies: the data, the rewards, their callables and the training seed."""
    from grpo_cli.model_rewards.build import reward_functions

    return recipe.data, recipe.rewards, reward_functions(recipe.rewards, recipe.model), recipe.training.seed


def test_each_common_answer_is_scored_by_the_recipes_verifier_as_a_constant_completion(tmp_path):
    shaping = {"name": "length_target", "kwargs": {"target": 8}, "weight": 0.5}  # not a verifier: not counted
    recipe = parity_recipe(tmp_path, [{"name": "normalized_match", "weight": 2.0}, shaping])
    result = constant_policies(*inputs(recipe), base_reward=0.3)
    assert result.rows == 16 and result.base_reward == 0.3
    no, yes = result.policies
    assert (no.answer, no.share, no.completion) == ("No", 12 / 16, "No")  # as the data writes it; bare wins a tie
    assert no.reward == pytest.approx(2.0 * 12 / 16)  # the verifier's weight: as training sums rewards
    assert yes.reward == pytest.approx(2.0 * 4 / 16)
    assert result.best is no
    assert result.warning.startswith("answering `No` to everything earns 1.50; the base model earns 0.30")


def test_no_warning_when_the_base_model_earns_as_much(tmp_path):
    recipe = parity_recipe(tmp_path, [{"name": "normalized_match"}])
    assert constant_policies(*inputs(recipe), base_reward=0.75).warning is None  # `No` earns 0.75: not more
    assert constant_policies(*inputs(recipe), base_reward=None).warning is None  # the base's reward is unknown


def test_a_users_verifier_receives_chat_completions_and_the_marked_form_counts_when_it_earns_more(tmp_path):
    (tmp_path / "my_check.py").write_text(TAGGED)
    rewards = [{"name": f"{tmp_path / 'my_check.py'}:tagged", "role": "verifier"}]
    result = constant_policies(*inputs(parity_recipe(tmp_path, rewards)), base_reward=0.0)
    no = result.policies[0]
    assert no.completion == "<answer>\nNo\n</answer>" and no.reward == pytest.approx(12 / 16)
    assert "answering `No` (as `<answer>No</answer>`) to everything earns 0.75" in result.warning

    from rewards.registry import load_user_module

    my_check = load_user_module(str(tmp_path / "my_check.py"))  # the module the registry imported: what it received
    assert my_check.SEEN == [  # the first completion of each call: 2 answers, bare and marked, in the chat form
        [{"role": "assistant", "content": "No"}],
        [{"role": "assistant", "content": "<answer>\nNo\n</answer>"}],
        [{"role": "assistant", "content": "yes"}],
        [{"role": "assistant", "content": "<answer>\nyes\n</answer>"}],
    ]


def test_recipes_without_references_or_verifiers_have_no_constant_policies(tmp_path):
    shaping_only = [{"name": "length_target", "kwargs": {"target": 8}}]
    assert constant_policies(*inputs(parity_recipe(tmp_path, shaping_only)), base_reward=0.1) is None
    no_answers = parity_recipe(tmp_path, [{"name": "normalized_match"}], answer_column=None)
    assert constant_policies(*inputs(no_answers), base_reward=0.1) is None


def test_the_base_models_reward_is_the_weighted_sum_of_its_verifier_means(tmp_path):
    rewards = [
        {"name": "normalized_match", "weight": 2.0},
        {"name": "length_target", "kwargs": {"target": 8}, "weight": 0.5},
    ]
    recipe = parity_recipe(tmp_path, rewards)
    assert verifier_reward(recipe.rewards, [0.25, 0.9]) == 0.5  # the shaping reward's 0.9 is left out
    assert verifier_reward(recipe.rewards, [None, 0.9]) is None


def test_no_warning_for_a_constant_that_earns_more_only_below_the_printed_precision():
    rare = ConstantPolicies(500, 0.0, [ConstantPolicy("48", "48", 0.002, 0.002)])  # every answer different
    assert rare.warning is None
    assert ConstantPolicies(500, 0.0, [ConstantPolicy("48", "48", 0.02, 0.02)]).warning is not None


def test_the_advice_carries_the_warning_line():
    from grpo_cli.preflight.advice import advise
    from grpo_cli.preflight.sampling import SampledGroups
    from grpo_cli.recipe.schema import Recipe

    recipe = Recipe.model_validate(
        {"model": {"name": "tiny"}, "data": {"source": "generated"}, "rewards": [{"name": "correctness"}]}
    )
    groups = SampledGroups(2, 8, 0.0, 0.0, 4.0, 0.5, 10.0)
    constants = ConstantPolicies(16, 0.31, [ConstantPolicy("no", "no", 0.53, 0.53)])
    reasons = [a.reason for a in advise(recipe, groups, _plan(), 1.0, 10.0, 2, None, 24.0, None, constants)]
    assert any(r.startswith("answering `no` to everything earns 0.53; the base model earns 0.31") for r in reasons)
    quiet = ConstantPolicies(16, 0.6, [ConstantPolicy("no", "no", 0.53, 0.53)])
    reasons = [a.reason for a in advise(recipe, groups, _plan(), 1.0, 10.0, 2, None, 24.0, None, quiet)]
    assert not any("to everything" in r for r in reasons)


def _plan():
    from types import SimpleNamespace

    return SimpleNamespace(gpu_bytes=None)  # no GPU named: no fit advice


@pytest.mark.slow
def test_preflight_reports_the_constant_answers_and_warns_when_one_out_earns_the_base(tmp_path, tiny_llama):
    from grpo_cli.cli import app

    rows = [{"question": f"Is {n} even? Answer yes or no.", "answer": "yes" if n < 4 else "no"} for n in range(16)]
    write_jsonl(rows, tmp_path / "parity.jsonl")
    recipe = write_recipe(
        tmp_path,
        tiny_llama,
        data={"source": str(tmp_path / "parity.jsonl"), "answer_format": "plain", "limit": None},
        rewards=[{"name": "normalized_match"}],
    )
    result = CliRunner().invoke(app, ["preflight", str(recipe), "--json", "--prompts", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    constants = data["constant_policies"]
    assert constants["rows"] == 16 and [p["answer"] for p in constants["policies"]] == ["no", "yes"]
    assert constants["policies"][0]["reward"] == 0.75 and constants["policies"][1]["reward"] == 0.25
    (normalized_match,) = data["rewards"]
    assert constants["base_reward"] == normalized_match["mean"]
    assert constants["base_reward"] < 0.75  # a random tiny model does not answer `no`
    warning = constants["warning"]
    assert warning.startswith(
        f"answering `no` to everything earns 0.75; the base model earns {normalized_match['mean']:.2f}"
    )
    assert warning in [a["reason"] for a in data["advice"]]
    shortcut = [f for f in data["audit"]["findings"] if f["kind"] == "shortcut"]  # the reward audit, first section
    assert shortcut and shortcut[0]["probes"][0] == "always `no` (commonest)" and shortcut[0]["share"] == 0.75

    human = CliRunner().invoke(app, ["preflight", str(recipe), "--prompts", "2"])
    assert human.exit_code == 0, human.output
    assert "constant answers to every prompt earn `no` 0.75, `yes` 0.25" in human.stdout
    assert human.stdout.startswith("rewards  audit of 16 training prompts: 1 finding(s)")
    assert "advice answering `no` to everything earns 0.75" in " ".join(human.stdout.split())
