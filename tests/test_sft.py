"""The SFT stage before GRPO (`sft:`): real TRL SFTTrainer and GRPOTrainer runs on tiny models; GRPO starts from
exactly the weights the SFT stage ended with; the examples come from reference solutions, the model's own verified
samples or a file; bad input is one line with nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback
from typer.testing import CliRunner

from conftest import ASSETS, fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from grpo_cli.recipe.validation import load_recipe
from grpo_cli.train import run as run_module
from grpo_cli.train.callbacks import InterruptCallback

REWARDS = [{"name": f"{ASSETS / 'varied_rewards.py'}:digit_share"}, {"name": "correctness"}]
LORA = {"r": 4, "alpha": 8, "dropout": 0.0}
HASHES = {"source": "generated", "limit": 32, "system_prompt": "Answer briefly.", "answer_marker": "hashes"}
SFT = {"source": "reference", "count": 8, "max_steps": 2, "max_length": 128, "learning_rate": 0.01}


def recipe_file(tmp_path: Path, model_dir: Path, **sections) -> Path:
    sections = {"rewards": REWARDS, "data": HASHES, "sft": SFT, "lora": LORA, **sections}
    return write_recipe(tmp_path, model_dir, **sections)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class FirstStepWeights(TrainerCallback):
    """The trainable weights as GRPO's first optimizer step of this process begins (before it generates or updates
    anything): step 0's, or a resumed run's first."""

    def __init__(self):
        self.weights: dict[str, torch.Tensor] | None = None

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if self.weights is None:
            self.weights = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def watch_first_step(monkeypatch) -> FirstStepWeights:
    """Add the snapshot callback to the GRPO trainer `grpo train` builds."""
    seen = FirstStepWeights()
    build = run_module.build_trainer

    def build_and_watch(*args, **kwargs):
        trainer, prepared = build(*args, **kwargs)
        trainer.add_callback(seen)
        return trainer, prepared

    monkeypatch.setattr(run_module, "build_trainer", build_and_watch)
    return seen


@pytest.mark.slow  # real SFT and GRPO steps
def test_reference_sft_then_grpo_trains_the_same_adapter_from_where_it_ended(tmp_path, tiny_llama, monkeypatch):
    seen = watch_first_step(monkeypatch)
    recipe = load_recipe(recipe_file(tmp_path, tiny_llama))
    result = run_module.train(recipe)
    stage_dir = result.run_dir / "sft"

    sft_metrics = read_jsonl(stage_dir / "metrics.jsonl")
    assert [m["step"] for m in sft_metrics] == [1, 2] and all(math.isfinite(m["loss"]) for m in sft_metrics)
    examples = read_jsonl(stage_dir / "examples.jsonl")
    assert len(examples) == 8 and json.loads((stage_dir / "source.json").read_text())["examples"] == 8
    for example in examples:  # the worked solution without calculator notes, then GSM8K's marker
        text = example["completion"][0]["content"]
        assert "<<" not in text and text.splitlines()[-1].startswith("#### ")
        assert example["prompt"][0] == {"role": "system", "content": "Answer briefly."}

    adapter = load_file(stage_dir / "final" / "adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k), "the SFT stage moved LoRA B off zero"
    assert seen.weights, "GRPO ran a step"
    started = {k.replace(".default", ""): v for k, v in seen.weights.items()}
    assert set(started) == set(adapter), "GRPO trains the SFT stage's adapter, no other weights"
    for name, tensor in adapter.items():
        assert torch.equal(started[name], tensor), name

    assert not result.interrupted and result.global_step == recipe.training.max_steps
    grpo = load_file(result.final_dir / "adapter_model.safetensors")
    assert set(grpo) == set(adapter) and any(not torch.equal(grpo[k], adapter[k]) for k in adapter)
    assert (stage_dir / "recipe.yaml").is_file() and (result.run_dir / "checkpoint-2").is_dir()


@pytest.mark.slow  # real SFT and GRPO steps
def test_full_finetune_sft_is_grpo_start_and_kl_reference(tmp_path, tiny_llama, monkeypatch):
    seen = watch_first_step(monkeypatch)
    recipe = load_recipe(recipe_file(tmp_path, tiny_llama, lora=None, grpo={"beta": 0.1, "num_generations": 2}))
    result = run_module.train(recipe)
    after_sft = load_file(result.run_dir / "sft" / "final" / "model.safetensors")
    base = load_file(tiny_llama / "model.safetensors")
    assert any(not torch.equal(after_sft[k], base[k]) for k in base), "the SFT stage changed the model"
    # GRPO's first step starts from exactly the saved SFT weights (not from the base it loaded)
    common = [k for k in after_sft if k in (seen.weights or {})]
    assert len(common) == len(after_sft) - ("lm_head.weight" not in seen.weights and "lm_head.weight" in after_sft)
    for name in common:
        assert torch.equal(seen.weights[name], after_sft[name]), name
    kl = [m["kl"] for m in read_jsonl(result.run_dir / "metrics.jsonl")]
    # step 1 scores before any GRPO update: zero KL means the reference is the SFT-trained model GRPO starts from
    assert abs(kl[0]) < 1e-6 and max(kl[1:]) > 1e-6, kl


@pytest.mark.slow  # real SFT and GRPO steps
def test_qlora_sft_hands_its_adapter_to_grpo(tmp_path, tiny_llama, monkeypatch):
    pytest.importorskip("bitsandbytes")
    seen = watch_first_step(monkeypatch)
    model = {"name": str(tiny_llama), "dtype": "float32", "gradient_checkpointing": True}
    quantization = {"bits": 4, "quant_type": "nf4", "compute_dtype": "float32"}
    path = recipe_file(tmp_path, tiny_llama, model=model, quantization=quantization, training={"max_steps": 1})
    result = run_module.train(load_recipe(path))
    assert result.global_step == 1 and result.final_dir is not None
    adapter = load_file(result.run_dir / "sft" / "final" / "adapter_model.safetensors")
    started = {k.replace(".default", ""): v for k, v in seen.weights.items()}
    assert set(started) == set(adapter) and any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)
    for name, tensor in adapter.items():  # TRL keeps QLoRA adapters in bfloat16 in both stages
        assert torch.equal(started[name].float(), tensor.float()), name


@pytest.mark.slow  # real SFT and GRPO steps
def test_self_sampled_sft_keeps_only_what_the_reward_scores_right(tmp_path, tiny_llama):
    sft = {
        **SFT,
        "source": "self",
        "samples_per_prompt": 2,
        "reward": f"{ASSETS / 'sft_rewards.py'}:even_answer",
    }
    rewards = [*REWARDS, {"name": sft["reward"], "weight": 0.0}]
    recipe = load_recipe(recipe_file(tmp_path, tiny_llama, sft=sft, rewards=rewards, training={"max_steps": 1}))
    result = CliRunner().invoke(app, ["train", str(recipe._source)])
    assert result.exit_code == 0, result.output
    stage_dir = recipe.output_dir / "sft"
    source = json.loads((stage_dir / "source.json").read_text())
    from rewards.gsm8k_task import generate_problems

    golds = [int(row["answer"].split("####")[-1]) for row in generate_problems(32, seed=recipe.training.seed)[:8]]
    even = [g for g in golds if g % 2 == 0]
    assert 0 < len(even) < len(golds), "the seed's problems must have both kinds for this test to mean anything"
    assert (source["prompts"], source["samples"], source["kept"]) == (8, 16, len(even))
    examples = read_jsonl(stage_dir / "examples.jsonl")
    kept_golds = [int(e["completion"][0]["content"].rsplit("#### ", 1)[1]) for e in examples]
    assert kept_golds == even, "exactly the verified problems, each with the asked marker added"
    assert source["marked"] == len(even)
    assert "kept of 16 completions sampled for 8 training prompts" in result.output


def stop_during_step_one(monkeypatch, which: int) -> None:
    """The `which`-th InterruptCallback of a process (0: the SFT stage's, 1: GRPO's) acts as if Ctrl-C came during
    step 1: the step finishes, a checkpoint is saved, training stops."""
    created = []
    original = InterruptCallback.__init__

    def init(self):
        original(self)
        self.requested = len(created) == which
        created.append(self)

    monkeypatch.setattr(InterruptCallback, "__init__", init)


@pytest.mark.slow  # real SFT and GRPO steps
def test_resume_continues_whichever_stage_was_interrupted(tmp_path, tiny_llama, monkeypatch):
    path = recipe_file(tmp_path, tiny_llama)
    stop_during_step_one(monkeypatch, which=0)
    stopped = CliRunner().invoke(app, ["train", str(path)])
    assert stopped.exit_code == 130, stopped.output
    run_dir = tmp_path / "run"
    assert (run_dir / "sft" / "checkpoint-1").is_dir() and not (run_dir / "sft" / "final").exists()

    again = CliRunner().invoke(app, ["train", str(path)])
    fails_cleanly(again, "an SFT stage in sft/", "--resume")

    monkeypatch.undo()
    stop_during_step_one(monkeypatch, which=1)
    resumed = CliRunner().invoke(app, ["train", str(path), "--resume"])
    assert resumed.exit_code == 130, resumed.output
    assert "sft: resuming from checkpoint-1" in resumed.output
    assert [m["step"] for m in read_jsonl(run_dir / "sft" / "metrics.jsonl")] == [1, 2]
    assert (run_dir / "sft" / "final").is_dir() and (run_dir / "checkpoint-1").is_dir()

    monkeypatch.undo()
    done = CliRunner().invoke(app, ["train", str(path), "--resume"])
    assert done.exit_code == 0, done.output
    assert (
        "SFT finished earlier (8 examples from reference)" in done.output
        and "resuming from checkpoint-1" in done.output
    )
    assert [m["step"] for m in read_jsonl(run_dir / "sft" / "metrics.jsonl")] == [1, 2], "never redone"
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]


@pytest.mark.slow  # real SFT and GRPO steps
def test_resumed_grpo_after_a_sft_trains_on_from_its_checkpoint(tmp_path, tiny_llama, monkeypatch):
    """With beta > 0 TRL keeps a frozen `ref` copy of the SFT stage's adapter in a sub-folder of each checkpoint, and
    transformers resumes only sub-folders: the trained adapter silently restarted from the SFT stage's weights."""
    path = recipe_file(tmp_path, tiny_llama, grpo={"beta": 0.04})
    stop_during_step_one(monkeypatch, which=1)
    stopped = CliRunner().invoke(app, ["train", str(path)])
    assert stopped.exit_code == 130, stopped.output
    checkpoint = tmp_path / "run" / "checkpoint-1"
    assert (checkpoint / "ref" / "adapter_model.safetensors").is_file()
    trained = load_file(checkpoint / "adapter_model.safetensors")
    sft_adapter = load_file(tmp_path / "run" / "sft" / "final" / "adapter_model.safetensors")
    assert any(not torch.equal(trained[k], sft_adapter[k]) for k in trained), "GRPO's step 1 moved the adapter"

    monkeypatch.undo()
    seen = watch_first_step(monkeypatch)
    done = CliRunner().invoke(app, ["train", str(path), "--resume"])
    assert done.exit_code == 0, done.output
    resumed = {n.replace(".default.", "."): w for n, w in seen.weights.items()}
    assert resumed.keys() == trained.keys()
    assert all(torch.equal(resumed[k], trained[k]) for k in trained), "step 2 starts from checkpoint-1's adapter"
    kl = [m["kl"] for m in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert len(kl) == 2 and kl[1] > 0, kl


def test_restore_trained_adapter_reads_the_root_adapter_beside_a_ref_subfolder(tmp_path, tiny_llama):
    """What transformers before 5.25 (vLLM's pin) skips on resume: the trained adapter at the checkpoint's root."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from grpo_cli.train.stage import restore_trained_adapter

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_llama), config)
    model.add_adapter("ref", config)
    model.save_pretrained(tmp_path / "checkpoint-1")  # root: default; ref/: the frozen copy
    assert (tmp_path / "checkpoint-1" / "ref" / "adapter_model.safetensors").is_file()
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if ".default." in n}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".default." in name:
                param.zero_()  # the weights a run started from
    restore_trained_adapter(model, tmp_path / "checkpoint-1")
    after = dict(model.named_parameters())
    assert all(torch.equal(after[n], w) for n, w in trained.items())


def save_adapter(model_dir: Path, folder: Path, r: int = 4, noise: bool = True) -> Path:
    """A LoRA adapter for `model_dir`, its B matrices set to noise (a fresh one would equal the base model)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir),
        LoraConfig(r=r, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if noise and "lora_B" in name:
                param.normal_(std=0.02)
    model.save_pretrained(folder)
    return folder


@pytest.mark.slow  # real SFT and GRPO steps
def test_grpo_starts_from_an_adapter_trained_elsewhere(tmp_path, tiny_llama, monkeypatch):
    adapter = save_adapter(tiny_llama, tmp_path / "adapter")
    seen = watch_first_step(monkeypatch)
    path = recipe_file(
        tmp_path, tiny_llama, sft=None, lora={**LORA, "adapter": str(adapter)}, training={"max_steps": 1}
    )
    result = run_module.train(load_recipe(path))
    assert result.global_step == 1
    stored = load_file(adapter / "adapter_model.safetensors")
    started = {k.replace(".default", ""): v for k, v in seen.weights.items()}
    assert len(started) == len(stored)
    for name, tensor in stored.items():
        assert torch.equal(started[name], tensor), name


@pytest.mark.parametrize("case", ["empty", "columns", "other_model", "rank"])
def test_bad_sft_input_is_one_line_naming_file_and_key_and_writes_nothing(tmp_path, tiny_llama, tiny_qwen2, case):
    if case == "empty":
        source = tmp_path / "empty.jsonl"
        source.write_text("")
        sections, words = {"sft": {**SFT, "source": str(source)}}, ["sft.source", str(source), "empty"]
    elif case == "columns":
        source = write_jsonl([{"question": "2+2?", "answer": "4"}], tmp_path / "qa.jsonl")
        sections = {"sft": {**SFT, "source": str(source)}}
        words = ["sft.source", str(source), "`messages`", "`prompt` and `completion`", "question, answer"]
    elif case == "other_model":
        adapter = save_adapter(tiny_qwen2, tmp_path / "qwen_adapter", noise=False)
        sections, words = {"lora": {**LORA, "adapter": str(adapter)}}, ["lora.adapter", str(adapter), str(tiny_qwen2)]
    else:
        adapter = save_adapter(tiny_llama, tmp_path / "r8", r=8, noise=False)
        sections, words = {"lora": {**LORA, "adapter": str(adapter)}}, ["lora.adapter", str(adapter), "lora.r=8"]
    result = CliRunner().invoke(app, ["train", str(recipe_file(tmp_path, tiny_llama, **sections))])
    line = fails_cleanly(result, *words)
    assert "recipe.yaml:" in line  # the recipe line of the key
    assert not (tmp_path / "run").exists()


def test_sft_section_is_validated_with_lines_and_fixes(tmp_path, tiny_llama):
    path = recipe_file(
        tmp_path, tiny_llama, sft={"source": "self", "reward": "strict_format", "max_lenght": 64}, data=HASHES
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "sft.max_lenght" in result.output and "did you mean `max_length`" in result.output
    fixed = path.read_text().replace("max_lenght", "max_length")
    path.write_text(fixed)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert (
        result.exit_code == 2 and "sft.reward" in result.output and "not one of the recipe's rewards" in result.output
    )


def test_reference_solutions_follow_the_asked_format():
    from grpo_cli.recipe.data_section import DataSection
    from grpo_cli.train.sft_examples import reference_solution
    from rewards.gsm8k import strict_format

    raw = "She has 3 + 4 = <<3+4=7>>7 apples.\nThen 7 * 2 = <<7*2=14>>14.\n#### 1,014"
    hashes = reference_solution(raw, DataSection(answer_marker="hashes"))
    assert hashes == "She has 3 + 4 = 7 apples.\nThen 7 * 2 = 14.\n#### 1014"
    tags = reference_solution(raw, DataSection())  # the default system prompt asks for <reasoning> and <answer>
    assert strict_format(completions=[tags]) == [1.0] and tags.endswith("<answer>\n1014\n</answer>")


def test_plan_puts_the_sft_peak_beside_grpos_and_the_larger_decides():
    from conftest import ROOT
    from grpo_cli.plan.fit import plan_recipe
    from grpo_cli.plan.memory import GIB

    demo = ROOT / "recipes" / "demo.yaml"

    def plan(*overrides):
        return plan_recipe(load_recipe(demo, list(overrides), scope="plan"), None, "cpu", "64GB").plan

    without = plan()
    short = plan("sft.max_length=64", "sft.per_device_train_batch_size=2")
    long = plan("sft.max_length=1024", "sft.per_device_train_batch_size=16")
    assert without.sft == 0 and 0 < short.sft_peak < short.peak_tensors == without.peak_tensors
    assert long.peak_tensors == long.sft_peak > without.peak_tensors, "the larger stage sets the peak"
    between = f"{(without.peak_rss + long.peak_rss) / 2 / GIB:.2f}GB"
    verdict = plan_recipe(
        load_recipe(demo, ["sft.max_length=1024", "sft.per_device_train_batch_size=16"], scope="plan"),
        None,
        "cpu",
        between,
    )
    assert verdict.plan.fits is False and plan_recipe(load_recipe(demo, scope="plan"), None, "cpu", between).plan.fits
    shown = CliRunner().invoke(app, ["plan", str(demo), "sft.max_length=1024", "--ram", between])
    assert "SFT (supervised steps before GRPO" in shown.output and "the SFT stage sets the peak" in shown.output


@pytest.mark.slow  # real SFT and GRPO steps
def test_preflight_times_the_sft_and_plans_its_peak(tmp_path, tiny_llama):
    path = recipe_file(tmp_path, tiny_llama, sft={**SFT, "max_steps": -1, "count": 12})
    result = CliRunner().invoke(app, ["preflight", str(path), "--json", "--prompts", "2"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    section = report["sft"]
    assert section["examples"] == 12 and section["total_steps"] == 3  # 12 examples in micro-batches of 4, one epoch
    assert section["step_s"] > 0 and section["eta_s"] == pytest.approx(3 * section["step_s"], abs=0.01)
    assert not (tmp_path / "run").exists()
    # 4 x 128 SFT tokens against 4 short GRPO sequences: the SFT stage's planned peak is the larger, and the
    # measured GRPO steps are compared with GRPO's own plan, not with it
    assert 0 < report["planned_peak_gib"] < section["planned_peak_gib"]
