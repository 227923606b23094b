"""Rewards that are models: a reward model (a sequence classifier) and LLM judges, built tiny and random in temporary
folders, scored behind the reward guard, planned without weights, checked offline, and trained with."""

from __future__ import annotations

import json
import math
import re
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from conftest import fails_cleanly, write_recipe
from grpo_cli.cli import app
from grpo_cli.model_rewards.build import reward_functions
from grpo_cli.model_rewards.judge import Judge, fill, parse_scale
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.validation import load_recipe
from grpo_cli.reward_guard import GuardedReward
from grpo_cli.train.run import train

runner = CliRunner()
PROMPTS = [[{"role": "user", "content": f"What is {n} plus {n}?"}] for n in (2, 3, 4, 5)]
COMPLETIONS = [[{"role": "assistant", "content": text}] for text in ("4", "It is 6.", "8", "The sum is 10.")]
JUDGE_PROMPT = "Question: {question}\nReply: {completion}\nGold: {reference}\nIs the reply right? Answer yes or no."


def build_classifier(directory: Path, positions: int = 512, nan_head: bool = False) -> Path:
    """A random LlamaForSequenceClassification with one output and the tests' tokenizer."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from tiny_models import build_tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(directory)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config)
    if nan_head:
        with torch.no_grad():
            model.score.weight.fill_(float("nan"))
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory) -> Path:
    return build_classifier(tmp_path_factory.mktemp("tiny-reward-model"))


def recipe_with(policy: Path, *rewards: dict) -> Recipe:
    return Recipe.model_validate({"model": {"name": str(policy), "dtype": "float32"}, "rewards": list(rewards)})


def functions_of(recipe: Recipe) -> list:
    return reward_functions(recipe.rewards, recipe.model)


def test_entries_are_named_after_their_model(reward_model, tiny_llama):
    recipe = recipe_with(
        tiny_llama,
        {"model": f"{reward_model}/"},
        {"judge": {"model": "policy", "prompt": "{completion}"}},
        {"judge": {"model": str(tiny_llama), "prompt": "{completion}"}},
        {"model": str(reward_model), "name": "helpful"},
    )
    assert [s.name for s in recipe.rewards] == [reward_model.name, "judge", f"judge_{tiny_llama.name}", "helpful"]
    assert [f.__name__ for f in functions_of(recipe)] == [s.name for s in recipe.rewards]


def test_reward_model_scores_the_models_own_words_the_same_in_any_batch(reward_model, tiny_llama):
    one, four = (
        functions_of(recipe_with(tiny_llama, {"model": str(reward_model), "batch_size": size, "dtype": "float32"}))[0]
        for size in (1, 4)
    )
    scored = one(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=None)
    assert four(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=None) == pytest.approx(scored, abs=1e-5)
    assert len(set(scored)) > 1 and all(math.isfinite(v) for v in scored)
    # A tool's answer between the model's turns is not the model's: the score is that of the model's words alone.
    with_tool = [
        [
            {"role": "assistant", "content": "It is "},
            {"role": "tool", "content": "999"},
            {"role": "assistant", "content": "6."},
        ]
    ]
    plain = [[{"role": "assistant", "content": "It is 6."}]]
    assert one(prompts=PROMPTS[1:2], completions=with_tool, completion_ids=None) == pytest.approx(
        one(prompts=PROMPTS[1:2], completions=plain, completion_ids=None)
    )
    assert not any(p.requires_grad for p in one.model.parameters()) and not one.model.training


def test_nan_scores_count_as_not_judged_with_one_warning(tmp_path, tiny_llama):
    broken = build_classifier(tmp_path / "nan-rm", nan_head=True)
    warnings: list[str] = []
    func = functions_of(recipe_with(tiny_llama, {"model": str(broken), "dtype": "float32"}))[0]
    guarded = GuardedReward(func, warn=warnings.append, label="nan-rm")
    assert guarded(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=None) == [None] * 4
    assert len(warnings) == 1 and "NaN or infinity for 4 of 4" in warnings[0]


def test_yes_no_judge_is_a_probability_and_scale_counts_what_it_cannot_read(tiny_llama):
    recipe = recipe_with(
        tiny_llama,
        {"judge": {"model": str(tiny_llama), "prompt": JUDGE_PROMPT}, "dtype": "float32"},
        {"judge": {"model": str(tiny_llama), "prompt": "{completion} Score 0-10:", "score": "scale_0_10"}, "name": "s"},
    )
    yes_no, scale = functions_of(recipe)
    logged: dict[str, float] = {}
    columns = {"answer": ["4", "6", "8", "10"], "log_metric": logged.__setitem__}
    values = yes_no(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=None, **columns)
    assert all(0.0 < v < 1.0 for v in values) and len(set(values)) > 1
    scores = scale(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=None, **columns)
    assert all(0.0 <= v <= 1.0 for v in scores)
    assert 0 <= logged["scoring/s/unparsed"] <= sum(v == 0.0 for v in scores)
    assert logged[f"scoring/judge_{tiny_llama.name}/seconds"] > 0


def test_scale_and_prompt_filling():
    readings = [parse_scale(t) for t in ("7", "Score: 8/10", " 10.", "9.5 out of 10", "11", "none")]
    assert readings == [0.7, 0.8, 1.0, 0.95, None, None]
    # out of range or no number of its own: unparsed (scored 0 and counted), never a digit read out of `-3` or `1e3`
    odd = [parse_scale(t) for t in ("-3", "1e3", "99999999999999999999", "", "v2", "٨", "I give it 8.")]
    assert odd == [None, None, None, None, None, 0.8, 0.8]
    assert fill("{question}|{completion}|{reference}|{x}|{}", "q", "c {reference}", "r") == "q|c {reference}|r|{x}|{}"


def test_policy_judge_uses_the_trainers_model_in_eval_mode_then_trains_on(tiny_llama):
    from grpo_cli import models

    recipe = recipe_with(tiny_llama, {"judge": {"model": "policy", "prompt": JUDGE_PROMPT}})
    policy, tokenizer = models.load_model(recipe.model), models.load_tokenizer(recipe.model)
    policy.train()
    modes: list[bool] = []
    policy.model.layers[0].register_forward_hook(lambda module, args, out: modes.append(module.training))
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(unwrap_model=lambda m: m, device=torch.device("cpu")),
        model=policy,
        processing_class=tokenizer,
        generation_context=nullcontext,
    )
    judge = functions_of(recipe)[0]
    assert isinstance(judge, Judge)
    judge.bind(trainer)
    values = judge(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=None, answer=["4", "6", "8", "10"])
    assert judge.model is policy  # no second copy
    assert modes == [False] and policy.training  # judged in eval mode, back in train mode after
    assert all(p.grad is None for p in policy.parameters()) and all(0.0 < v < 1.0 for v in values)


# ---------------------------------------------------------------- offline checks: one line each through the CLI


def validate(tmp_path: Path, model_dir: Path, reward: dict, **sections):
    rewards = [{"name": "correctness"}, reward]
    return runner.invoke(app, ["validate", str(write_recipe(tmp_path, model_dir, rewards=rewards, **sections))])


def one_line(result, *words: str) -> None:
    fails_cleanly(result, *words)
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_model_id_not_found_offline_is_one_line(tmp_path, tiny_llama):
    one_line(
        validate(tmp_path, tiny_llama, {"model": "nobody-here/no-such-reward-model"}), "rewards[1].model", "offline"
    )


def test_a_folder_that_is_neither_classifier_nor_causal_lm_is_one_line(tmp_path, tiny_llama):
    folder = tmp_path / "masked-lm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"], "model_type": "bert"}))
    one_line(validate(tmp_path, tiny_llama, {"model": str(folder)}), "BertForMaskedLM", "neither")
    # A causal LM where a reward model is named: asked to be a judge instead.
    one_line(validate(tmp_path, tiny_llama, {"model": str(tiny_llama)}), "causal LM", "judge")


def test_a_judge_prompt_without_completion_is_one_line(tmp_path, tiny_llama):
    judge = {"judge": {"model": "policy", "prompt": "Is {question} answered? yes or no"}}
    one_line(validate(tmp_path, tiny_llama, judge), "rewards[1].judge.prompt", "{completion}")
    unknown = {"judge": {"model": "policy", "prompt": "{completion} for {questoin}"}}
    one_line(validate(tmp_path, tiny_llama, unknown), "{questoin}")


def test_a_reward_model_shorter_than_prompt_and_completion_is_one_line(tmp_path, tiny_llama):
    short = build_classifier(tmp_path / "short-rm", positions=32)
    result = validate(tmp_path, tiny_llama, {"model": str(short)}, data={"max_prompt_length": 64})
    one_line(result, "rewards[1].model", "32 tokens", "64 + 8")


def test_validate_says_what_it_cannot_check_without_weights(tmp_path, tiny_llama, reward_model):
    result = validate(tmp_path, tiny_llama, {"model": str(reward_model), "max_length": 256})
    assert result.exit_code == 0, result.output
    assert "# not checked without the weights" in result.output and f"`{reward_model.name}`" in result.output


# ---------------------------------------------------------------- the plan


def plan_terms(recipe: Path, *args: str) -> dict[str, dict]:
    result = runner.invoke(app, ["plan", str(recipe), *args, "--json"])
    assert result.exit_code == 0, result.output
    return {t["name"]: t for t in json.loads(result.stdout)["terms"]}


def test_plan_has_a_line_per_reward_model_and_judge_from_config_alone(tmp_path, tiny_llama, reward_model):
    from transformers import AutoModelForSequenceClassification

    rewards = [
        {"name": "correctness"},
        {"model": str(reward_model), "dtype": "float32", "batch_size": 2},
        {"judge": {"model": "policy", "prompt": JUDGE_PROMPT}},
        {"judge": {"model": str(tiny_llama), "prompt": "{completion}", "score": "scale_0_10"}, "device": "cpu"},
    ]
    recipe = write_recipe(tmp_path, tiny_llama, rewards=rewards)
    terms = plan_terms(recipe, "--gpu", "24GB")
    real = sum(p.numel() for p in AutoModelForSequenceClassification.from_pretrained(reward_model).parameters())
    weights = terms[f"reward model {reward_model.name}: weights"]
    assert weights["gib"] == pytest.approx(real * 4 / 2**30, abs=1e-4) and weights["phase"] == "static"
    assert terms["judge: weights"]["gib"] == 0.0 and "no second copy" in terms["judge: weights"]["formula"]
    assert terms["judge: scoring"]["phase"] == "generation"
    cpu_judge = f"judge_{tiny_llama.name}"
    assert {terms[f"{cpu_judge}: {part}"]["phase"] for part in ("weights", "scoring", "KV cache")} == {"off-GPU"}
    # A model kept on the CPU is not in the GPU's figure.
    (tmp_path / "without").mkdir()
    without = write_recipe(tmp_path / "without", tiny_llama, rewards=rewards[:3])
    peak = json.loads(runner.invoke(app, ["plan", str(recipe), "--gpu", "24GB", "--json"]).stdout)["peak_tensors_gib"]
    alone = json.loads(runner.invoke(app, ["plan", str(without), "--gpu", "24GB", "--json"]).stdout)
    assert peak == alone["peak_tensors_gib"]


# ---------------------------------------------------------------- real GRPO steps


def trained(tmp_path: Path, model_dir: Path, rewards: list[dict], **sections):
    recipe = load_recipe(write_recipe(tmp_path, model_dir, rewards=rewards, **sections))
    result = train(recipe)
    metrics = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert not result.interrupted and result.global_step == recipe.training.max_steps
    assert [m["step"] for m in metrics] == list(range(1, recipe.training.max_steps + 1))
    assert all(math.isfinite(m["loss"]) for m in metrics)
    return result, metrics


@pytest.mark.slow
def test_training_with_a_reward_model_and_a_judge_model(tmp_path, tiny_llama, reward_model):
    from safetensors.torch import load_file

    judge = {"model": str(tiny_llama), "prompt": "{completion} Score 0-10:", "score": "scale_0_10", "max_new_tokens": 2}
    rewards = [
        {"name": "correctness"},
        {"model": str(reward_model), "dtype": "float32", "weight": 0.5, "batch_size": 3},
        {"judge": judge, "dtype": "float32", "weight": 0.5},
    ]
    result, metrics = trained(tmp_path, tiny_llama, rewards)
    for name in (reward_model.name, f"judge_{tiny_llama.name}"):
        assert all(f"rewards/{name}/mean" in m and m[f"scoring/{name}/seconds"] > 0 for m in metrics), metrics[0]
    assert all(f"scoring/judge_{tiny_llama.name}/unparsed" in m for m in metrics)
    before, after = load_file(tiny_llama / "model.safetensors"), load_file(result.final_dir / "model.safetensors")
    assert any(not torch.equal(before[k].float(), after[k].float()) for k in before), "no weight changed"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lora", "full"])
def test_training_with_the_policy_as_its_own_judge(tmp_path, tiny_llama, method):
    from safetensors.torch import load_file

    rewards = [{"name": "correctness"}, {"judge": {"model": "policy", "prompt": JUDGE_PROMPT}, "batch_size": 4}]
    lora = {"lora": {"r": 4, "alpha": 8, "dropout": 0.0}} if method == "lora" else {}
    result, metrics = trained(tmp_path, tiny_llama, rewards, **lora)
    assert all("rewards/judge/mean" in m and 0.0 < m["rewards/judge/mean"] < 1.0 for m in metrics), metrics[0]
    if method == "lora":
        adapter = load_file(result.final_dir / "adapter_model.safetensors")
        assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k), "LoRA B starts at 0 and must move"
    else:  # the judge scored with the weights being trained, and training still changed them
        before, after = load_file(tiny_llama / "model.safetensors"), load_file(result.final_dir / "model.safetensors")
        assert any(not torch.equal(before[k].float(), after[k].float()) for k in before), "no weight changed"


def test_the_memory_table_in_docs_is_what_grpo_plan_prints():
    from conftest import ROOT

    judge = ["rewards.5.judge.model=policy", "rewards.5.judge.prompt=Is this right? {completion} Answer yes or no."]
    overrides = {
        "none": [],
        "reward model, 0.5B": ["rewards.5.model=Qwen/Qwen2.5-0.5B-Instruct"],
        "reward model, 1.5B": ["rewards.5.model=Qwen/Qwen2.5-1.5B-Instruct"],
        "reward model, 7B": ["rewards.5.model=Qwen/Qwen2.5-7B-Instruct"],
        "reward model, 7B, `device: cpu`": ["rewards.5.model=Qwen/Qwen2.5-7B-Instruct", "rewards.5.device=cpu"],
        "`judge: {model: policy}`, yes_no": judge,
    }
    doc = (ROOT / "docs" / "rewards.md").read_text()
    rows = re.findall(
        r"^\| (none|reward model, [^|]+|`judge[^|]+) \| ([^|]+) \| ([^|]+) \| "
        r"([\d.]+) GiB \| ([\d.]+) GiB \| ([\d.]+) GiB to spare \|$",
        doc,
        re.MULTILINE,
    )
    assert [row[0] for row in rows] == list(overrides)
    for label, weights, scoring, tensors, smi, spare in rows:
        args = ["plan", str(ROOT / "recipes/qwen2.5/0.5b_lora.yaml"), "--gpu", "24GB", *overrides[label]]
        out = runner.invoke(app, args, env={"COLUMNS": "200"}).output
        assert f"max_memory_allocated): {tensors} GiB" in out and f"CUDA context): {smi} GiB" in out, (
            label,
            out[-500:],
        )
        assert f"with {spare} GiB to spare" in out, label
        for figure in (weights, scoring):
            shown = figure.split(" GiB")[0]
            assert shown in ("-", "none") or f" {shown}  " in out, (label, figure)


@pytest.mark.slow
def test_preflight_times_scoring_as_its_own_phase(tmp_path, reward_model, tiny_llama):
    rewards = [{"name": "correctness"}, {"model": str(reward_model), "dtype": "float32"}]
    recipe = write_recipe(tmp_path, tiny_llama, rewards=rewards)
    result = runner.invoke(app, ["preflight", str(recipe), "--json", "--prompts", "4", "--gpu", "24GB"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert 0 < data["scoring_s"] <= data["generation_s"] <= data["step_s"]
    assert [r["name"] for r in data["rewards"]] == ["correctness", reward_model.name]


def test_the_audit_scores_reward_models_and_judges_only_with_models(tmp_path, tiny_llama, reward_model):
    judge = {"judge": {"model": str(tiny_llama), "prompt": JUDGE_PROMPT}, "weight": 0.5}
    rewards = [{"name": "correctness"}, {"model": str(reward_model), "name": "rm", "weight": 0.5}, judge]
    recipe = write_recipe(tmp_path, tiny_llama, rewards=rewards)
    without = json.loads(runner.invoke(app, ["audit", str(recipe), "--json", "--rows", "4"]).stdout)
    assert [r["audited"] for r in without["rewards"]] == [True, False, False]
    result = runner.invoke(app, ["audit", str(recipe), "--json", "--rows", "4", "--models"])
    assert result.exit_code == 0, result.output
    audited = json.loads(result.stdout)
    assert [r["audited"] for r in audited["rewards"]] == [True, True, True] and audited["prompts"] == 4
    reference = next(p for p in audited["probes"] if p["probe"] == "reference")
    assert all(isinstance(reference["rewards"][name], float) for name in ("rm", f"judge_{tiny_llama.name}"))
