"""Real TRL GRPO steps on tiny models built in the tests: finished, finite loss, trainable weights changed."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from conftest import ASSETS, write_recipe
from grpo_cli.cli import app
from grpo_cli.recipe.validation import load_recipe
from grpo_cli.train.run import train

pytestmark = pytest.mark.slow  # real training steps: `pytest -m 'not slow'` skips them in an inner loop

REWARDS = [{"name": f"{ASSETS / 'varied_rewards.py'}:digit_share"}, {"name": "correctness"}]


def run(tmp_path: Path, model_dir: Path, **sections):
    recipe = load_recipe(write_recipe(tmp_path, model_dir, rewards=REWARDS, **sections))
    result = train(recipe)
    metrics = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    return recipe, result, metrics


def assert_finished_with_finite_loss(recipe, result, metrics):
    assert not result.interrupted
    assert result.global_step == recipe.training.max_steps
    assert [m["step"] for m in metrics] == list(range(1, recipe.training.max_steps + 1))
    assert all(math.isfinite(m["loss"]) for m in metrics)
    assert all(0 < m["generation_s"] < m["step_time_s"] for m in metrics)  # the phase split of each step
    assert all(m["mixed_precision"] == recipe.model.mixed_precision for m in metrics)  # tests pin "no"
    assert (result.run_dir / "recipe.yaml").exists() and (result.run_dir / "samples.jsonl").exists()


def assert_reference_is_the_starting_policy(metrics: list[dict]) -> None:
    """KL against the reference is zero while the policy is still the model it started as (step 1 generates and
    scores before any update), and grows once the policy has moved: a reference that is the starting model."""
    kl = [m["kl"] for m in metrics]
    assert all(k is not None and math.isfinite(k) for k in kl), kl
    assert abs(kl[0]) < 1e-6, kl
    assert max(kl[1:]) > 1e-6, kl


def changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> list[str]:
    return [k for k in before if k in after and not torch.equal(before[k].float(), after[k].float())]


def test_full_finetune_with_reference_model_and_grpo_loss(tmp_path, tiny_llama):
    recipe, result, metrics = run(tmp_path, tiny_llama, grpo={"beta": 0.1, "loss_type": "grpo"})
    assert_finished_with_finite_loss(recipe, result, metrics)
    assert_reference_is_the_starting_policy(metrics)
    before = load_file(tiny_llama / "model.safetensors")
    after = load_file(result.final_dir / "model.safetensors")
    assert changed(before, after), "no weight changed in full fine-tuning"


def test_lora_dr_grpo_on_qwen2_with_biases(tmp_path, tiny_qwen2):
    recipe, result, metrics = run(
        tmp_path, tiny_qwen2, lora={"r": 4, "alpha": 8, "dropout": 0.0}, grpo={"loss_type": "dr_grpo"}
    )
    assert_finished_with_finite_loss(recipe, result, metrics)
    adapter = load_file(result.final_dir / "adapter_model.safetensors")
    lora_b = {k: v for k, v in adapter.items() if "lora_B" in k}
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b.values()), "LoRA B starts at zero and must move"
    base = load_file(tiny_qwen2 / "model.safetensors")
    assert any(k.endswith("q_proj.bias") for k in base)
    # The run's README is our model card, not TRL's or PEFT's stock text, in the run and beside the adapter.
    card = (result.run_dir / "README.md").read_text()
    assert card == (result.final_dir / "README.md").read_text()
    assert "huggingface.co/None" not in card and "More Information Needed" not in card
    for fact in (
        f"base_model: {tiny_qwen2}",
        "LoRA r=4, alpha=8",
        "`generated`",
        "dr_grpo",
        "`correctness` (1)",
        "digit_share",
        f"finished after {recipe.training.max_steps} steps",
        "| reward |",
        "PeftModel.from_pretrained",
        f"grpo train {result.run_dir}/recipe.yaml",
        "Not evaluated yet",
    ):
        assert fact in card, fact


def test_lora_with_beta_uses_disabled_adapter_as_reference(tmp_path, tiny_llama):
    recipe, result, metrics = run(
        tmp_path, tiny_llama, lora={"r": 4, "dropout": 0.0}, grpo={"beta": 0.05, "loss_type": "cispo"}
    )
    assert_finished_with_finite_loss(recipe, result, metrics)
    assert_reference_is_the_starting_policy(metrics)  # the base with the adapter off: LoRA B starts at zero


def test_qlora_with_8bit_adamw(tmp_path, tiny_llama):
    pytest.importorskip("bitsandbytes")
    recipe, result, metrics = run(
        tmp_path,
        tiny_llama,
        model={"name": str(tiny_llama), "dtype": "float32", "gradient_checkpointing": True},
        lora={"r": 4, "dropout": 0.0},
        quantization={"bits": 4, "quant_type": "nf4", "compute_dtype": "float32"},
        training={"optim": "adamw_8bit"},
    )
    assert recipe.method == "qlora"
    assert_finished_with_finite_loss(recipe, result, metrics)
    adapter = load_file(result.final_dir / "adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)


def test_existing_run_is_never_overwritten(tmp_path, tiny_llama):
    path = write_recipe(tmp_path, tiny_llama, rewards=REWARDS, training={"max_steps": 1})
    runner = CliRunner()
    first = runner.invoke(app, ["train", str(path)])
    assert first.exit_code == 0, first.output
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    second = runner.invoke(app, ["train", str(path)])
    assert second.exit_code == 2 and "--resume" in second.output and "Traceback" not in second.output
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == metrics


def test_missing_model_offline_is_one_line(tmp_path, tiny_llama):
    path = write_recipe(tmp_path, tiny_llama, rewards=REWARDS, model={"name": "nobody/no-such-model-xyz"})
    result = CliRunner().invoke(app, ["train", str(path)])
    assert result.exit_code == 2, result.output
    assert "model.name: cannot load" in result.output and "Traceback" not in result.output


def test_liger_without_cuda_is_a_clear_error(tmp_path, tiny_llama):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    path = write_recipe(tmp_path, tiny_llama, rewards=REWARDS, grpo={"use_liger_kernel": True})
    result = CliRunner().invoke(app, ["train", str(path)])
    assert result.exit_code == 2 and "grpo.use_liger_kernel" in result.output


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "grpo_cli", *args]


def _prompts_by_step(run_dir: Path) -> dict[int, str]:
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    return {r["step"]: r["prompt"] for r in rows}


def test_sigint_saves_checkpoint_and_resume_continues_same_data(tmp_path, tiny_llama):
    steps = 40  # long enough that the signal always lands mid-run, even on a fast machine
    common = dict(rewards=REWARDS, training={"max_steps": steps, "save_steps": 100})
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    reference = write_recipe(reference_dir, tiny_llama, **common)
    subprocess.run(_cli("train", str(reference)), check=True, capture_output=True, timeout=600)

    interrupted_dir = tmp_path / "interrupted"
    interrupted_dir.mkdir()
    recipe = write_recipe(interrupted_dir, tiny_llama, **common)
    run_dir = interrupted_dir / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(_cli("train", str(recipe)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 300
    while time.time() < deadline:
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists() and metrics.read_text().count("\n") >= 2:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    output = process.communicate(timeout=300)[0].decode()
    assert process.returncode == 130, output
    assert "Traceback" not in output
    checkpoints = sorted(run_dir.glob("checkpoint-*"))
    assert checkpoints, output
    stopped_at = int(checkpoints[-1].name.split("-")[1])
    assert 2 <= stopped_at < steps

    resumed = subprocess.run(_cli("train", str(recipe), "--resume"), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    shown = resumed.stdout + resumed.stderr  # the log counts on from the checkpoint, not from step 1
    assert f"  step {stopped_at + 1}/{steps}: generating" in shown and "  step 1/" not in shown, shown
    logged = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(1, steps + 1))  # no step lost, none repeated
    assert (run_dir / "final").exists()
    assert _prompts_by_step(run_dir) == _prompts_by_step(reference_dir / "run")  # same data order


def test_report_writes_png_and_export_merges(tmp_path, tiny_llama):
    recipe, result, _ = run(tmp_path, tiny_llama, lora={"r": 4, "dropout": 0.0}, training={"max_steps": 2})
    runner = CliRunner()
    reported = runner.invoke(app, ["report", str(result.run_dir)])
    assert reported.exit_code == 0, reported.output
    png = result.run_dir / "report.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    merged_dir = tmp_path / "merged"
    exported = runner.invoke(app, ["export", str(result.run_dir), "--merge", str(merged_dir)])
    assert exported.exit_code == 0, exported.output
    merged = load_file(merged_dir / "model.safetensors")
    base = load_file(tiny_llama / "model.safetensors")
    assert set(merged) == set(base) and changed(base, merged)
    again = runner.invoke(app, ["export", str(result.run_dir), "--merge", str(merged_dir)])
    assert again.exit_code == 2


def test_demo_console_starts_with_our_line_and_shows_no_library_warning(tmp_path):
    """A one-step run of the shipped demo, as a user starts it: the first line is ours, no library chatter."""
    from conftest import ROOT

    done = subprocess.run(
        _cli(
            "train",
            str(ROOT / "recipes" / "demo.yaml"),
            "training.max_steps=1",
            f"training.output_dir={tmp_path / 'demo'}",
        ),
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("grpo train demo: lora on"), lines[:3]
    noisy = [
        line
        for line in lines
        if any(w in line.lower() for w in ("warning", "warn(", "deprecat", "failed to load", "traceback", "it/s]"))
    ]
    assert not noisy, noisy
    assert (tmp_path / "demo" / "final" / "adapter_model.safetensors").exists()


def test_generation_runs_with_the_adapter_merged_and_leaves_base_weights_as_they_were(tmp_path, tiny_qwen2):
    from grpo_cli.train.trainer import build_trainer

    recipe = load_recipe(write_recipe(tmp_path, tiny_qwen2, rewards=REWARDS, lora={"r": 4, "dropout": 0.0}))
    trainer, prepared = build_trainer(recipe, tmp_path / "run")
    model = trainer.accelerator.unwrap_model(trainer.model)
    lora_layers = [m for m in model.modules() if hasattr(m, "merged") and hasattr(m, "lora_B")]
    with torch.no_grad():  # B starts at zero, where merging changes nothing: give the adapter a real delta
        for layer in lora_layers:
            layer.lora_B["default"].weight.normal_(std=0.1)
    base = {k: v.clone() for k, v in model.named_parameters() if "lora_" not in k}
    seen = []
    model.get_base_model().register_forward_hook(lambda *_: seen.append(all(m.merged for m in lora_layers)))
    trainer.model.train()
    prompts = [row["prompt"] for row in prepared.dataset.select(range(2))]
    completion_ids = trainer._generate(prompts)[1]
    assert len(completion_ids) == 2 and seen and all(seen), "every decode step ran on merged weights"
    assert not any(m.merged for m in lora_layers), "unmerged again before the loss"
    for name, value in model.named_parameters():
        if name in base:
            assert torch.allclose(value, base[name], rtol=0, atol=1e-6), name


def test_bf16_generation_on_a_cpu_samples_through_merged_copies_and_changes_nothing_held(tmp_path, tiny_qwen2):
    """Under bf16 autocast the frozen weights are bf16, so the adapter is not merged into them: each adapted layer
    samples with a merged copy (W + s B A rounded once), and the trainer's weights and forwards are as before."""
    from grpo_cli.train.trainer import build_trainer

    model_section = {"name": str(tiny_qwen2), "dtype": "float32", "mixed_precision": "bf16"}
    recipe = load_recipe(
        write_recipe(tmp_path, tiny_qwen2, rewards=REWARDS, lora={"r": 4, "dropout": 0.0}, model=model_section)
    )
    trainer, prepared = build_trainer(recipe, tmp_path / "run")
    model = trainer.accelerator.unwrap_model(trainer.model)
    lora_layers = [m for m in model.modules() if hasattr(m, "merged") and hasattr(m, "lora_B")]
    with torch.no_grad():  # B starts at zero: give the adapter a real delta
        for layer in lora_layers:
            layer.lora_B["default"].weight.normal_(std=0.1)
    held = {k: v.clone() for k, v in model.named_parameters()}
    ids = torch.randint(0, model.config.vocab_size, (2, 10))
    with torch.no_grad():
        with trainer.inference_context():  # PEFT's forward under the same autocast: what the loss sees
            unmerged = model(input_ids=ids).logits.float()
        with trainer.generation_context():
            patched = sum("forward" in vars(m) for m in lora_layers)
            merged = model(input_ids=ids).logits.float()
        with trainer.inference_context(), model.disable_adapter():
            plain = model(input_ids=ids).logits.float()
    assert patched == len(lora_layers) > 0
    assert (merged - unmerged).abs().max() < 0.1 * (plain - unmerged).abs().max(), "the copies carry the adapter"
    seen = []
    model.get_base_model().register_forward_hook(lambda *_: seen.append(all("forward" in vars(m) for m in lora_layers)))
    trainer.model.train()
    completion_ids = trainer._generate([row["prompt"] for row in prepared.dataset.select(range(2))])[1]
    assert len(completion_ids) == 2 and seen and all(seen), "every decode step ran on the merged copies"
    assert not any("forward" in vars(m) for m in lora_layers), "PEFT's forward again before the loss"
    for name, value in model.named_parameters():
        assert torch.equal(value, held[name]), name


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_the_loss_pass_runs_each_prompt_once_and_gives_trls_log_probs_and_gradients(
    tmp_path, tiny_qwen2, checkpointing
):
    """2 prompts x 4 completions: the prompts (less their last token) run once each, the rows run only their last
    prompt token and completion against the shared cache, and log-probs, entropies and LoRA gradients are TRL's own
    pass's (a padded prompt and cut-off completions included), with gradient checkpointing too (the backward replays
    each layer). A batch with no prompt repeated takes TRL's pass."""
    from grpo_cli.train.trainer import build_trainer

    model_section = {"name": str(tiny_qwen2), "gradient_checkpointing": checkpointing}
    recipe = load_recipe(
        write_recipe(tmp_path, tiny_qwen2, rewards=REWARDS, lora={"r": 4, "dropout": 0.0}, model=model_section)
    )
    trainer, _ = build_trainer(recipe, tmp_path / "run")
    model = trainer.accelerator.unwrap_model(trainer.model)
    if checkpointing:  # as Trainer.train turns it on
        model.get_base_model().gradient_checkpointing_enable(trainer.args.gradient_checkpointing_kwargs)
    attention_calls = []  # inside layer 0's checkpointed forward: a replay in the backward calls it again
    model.get_base_model().model.layers[0].self_attn.register_forward_pre_hook(lambda *_: attention_calls.append(1))
    with torch.no_grad():  # B starts at zero, where the adapter's gradients are A's only: give it a real delta
        for name, value in model.named_parameters():
            if "lora_B" in name:
                value.normal_(std=0.1)
    assert trainer.share_prompts
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, model.config.vocab_size, (2, 9), generator=gen)
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[1, :3] = 0  # left padding
    rows = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])
    completions = torch.randint(3, model.config.vocab_size, (8, 6), generator=gen)
    completion_mask = torch.ones_like(completions)
    completion_mask[2, 4:] = completion_mask[5, 1:] = 0
    shapes = []
    model.get_base_model().model.register_forward_hook(
        lambda module, args, kwargs, out: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    trainer.model.train()

    def loss_pass(share: bool, ids, mask):
        trainer.share_prompts = share
        shapes.clear()
        attention_calls.clear()
        model.zero_grad()
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, 6, compute_entropy=True)
        (logps * completion_mask).sum().backward()
        grads = {k: v.grad.clone() for k, v in model.named_parameters() if v.grad is not None}
        return logps.detach(), entropies.detach(), grads, list(shapes)

    ids = torch.cat([prompts[rows], completions], dim=1)
    mask = torch.cat([prompt_mask[rows], completion_mask], dim=1)
    trl_logps, trl_entropies, trl_grads, trl_shapes = loss_pass(False, ids, mask)
    logps, entropies, grads, shared_shapes = loss_pass(True, ids, mask)
    assert trl_shapes == [(8, 15)] and shared_shapes == [(2, 8), (8, 7)]
    assert len(attention_calls) == (4 if checkpointing else 2), "with checkpointing both passes are replayed"
    assert torch.allclose(logps, trl_logps, atol=1e-5) and torch.allclose(entropies, trl_entropies, atol=1e-5)
    assert (logps[completion_mask == 0] == 0).all() and (logps[completion_mask == 1] < 0).all()
    assert grads.keys() == trl_grads.keys() and any("lora_A" in k for k in grads)
    for name, grad in grads.items():
        assert (grad - trl_grads[name]).abs().max() <= 1e-4 * trl_grads[name].abs().max(), name
    distinct = torch.cat([torch.randint(3, model.config.vocab_size, (8, 9), generator=gen), completions], dim=1)
    assert loss_pass(True, distinct, torch.ones_like(distinct))[3] == [(8, 15)]


def test_sampling_prefills_each_prompt_once_and_samples_what_a_full_prefill_samples(tmp_path, tiny_qwen2):
    """2 prompts x 4 samples: each prompt less its last token runs once, generate starts the 8 rows from the shared
    cache at the last prompt token, and the same seed samples the same completions as TRL's full prefill."""
    from grpo_cli.train.trainer import build_trainer

    recipe = load_recipe(write_recipe(tmp_path, tiny_qwen2, rewards=REWARDS, lora={"r": 4, "dropout": 0.0}))
    trainer, prepared = build_trainer(recipe, tmp_path / "run")
    model = trainer.accelerator.unwrap_model(trainer.model)
    assert trainer.share_prompts
    shapes = []
    model.get_base_model().model.register_forward_hook(
        lambda module, args, kwargs, out: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    trainer.model.train()
    prompts = [row["prompt"] for row in prepared.dataset.select(range(2)) for _ in range(4)]

    def sample(once: bool):
        trainer.share_prompts = once
        shapes.clear()
        torch.manual_seed(0)
        return trainer._generate(prompts)[1], list(shapes)

    full, full_shapes = sample(False)
    once, once_shapes = sample(True)
    assert once == full and len(full) == 8 and any(full)
    width = full_shapes[0][1]  # the padded prompt
    assert full_shapes[0] == (8, width) and once_shapes[:2] == [(2, width - 1), (8, 1)]
    assert "generate" not in vars(model), "generate is the model's own again"


def test_sampling_on_a_cpu_takes_torchs_draws_in_bulk_and_samples_what_torch_samples(tmp_path, tiny_qwen2, monkeypatch):
    """A generation round on a CPU draws each token through torch_draws.py (the trainer's own choice of context): the
    same completions as torch.multinomial's at the same seed, and the same random numbers after them."""
    from grpo_cli.generation import torch_draws
    from grpo_cli.train.trainer import build_trainer

    recipe = load_recipe(write_recipe(tmp_path, tiny_qwen2, rewards=REWARDS, lora={"r": 4, "dropout": 0.0}))
    trainer, prepared = build_trainer(recipe, tmp_path / "run")
    prompts = [row["prompt"] for row in prepared.dataset.select(range(2)) for _ in range(4)]
    drawn, draw = [], torch_draws.draw
    monkeypatch.setattr(torch_draws, "draw", lambda *args: drawn.append(draw(*args)) or drawn[-1])
    trainer.model.train()

    def sample():
        torch.manual_seed(0)
        return trainer._generate(prompts)[1], torch.rand(4)

    ours, after_ours = sample()
    taken = len(drawn)
    monkeypatch.setattr(trainer, "_draws_context", nullcontext)  # torch's own torch.multinomial
    torchs, after_torchs = sample()
    assert taken > 0 and all(d is not None for d in drawn) and len(drawn) == taken
    assert ours == torchs and len(ours) == 8 and sum(map(len, ours)) > 8 and torch.equal(after_ours, after_torchs)


def test_a_renamed_trl_method_is_one_clear_error_at_start_up(tmp_path, tiny_llama, monkeypatch):
    """A TRL without a private method grpo overrides stops `grpo train` before the model loads: one line naming the
    TRL version, the method, what grpo uses it for and the supported range; nothing trained."""
    from trl import GRPOTrainer

    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")
    recipe = write_recipe(tmp_path, tiny_llama, rewards=REWARDS, training={"max_steps": 1})
    result = CliRunner().invoke(app, ["train", str(recipe)])
    assert result.exit_code == 2, result.output
    assert "no trl.GRPOTrainer._calculate_rewards, which grpo reads the gathered rewards" in result.output
    assert "pip install 'trl>=1.16,<2'" in result.output and "Traceback" not in result.output
    assert not list((tmp_path / "runs").rglob("checkpoint-*"))


def test_resume_with_changed_settings_keeps_a_true_record(tmp_path, tiny_llama):
    """Settings that do not shape the checkpoint may change on --resume; recipe.yaml then says what runs from now
    on, and recipe_changes.jsonl says what changed from which step."""
    recipe = write_recipe(tmp_path, tiny_llama, rewards=REWARDS, training={"max_steps": 2, "save_steps": 1})
    first = CliRunner().invoke(app, ["train", str(recipe), "training.max_steps=1"])
    assert first.exit_code == 0, first.output
    run_dir = tmp_path / "run"
    # Written by an older grpo: reward fields added since (at their defaults) are missing; that is no change.
    written = yaml.safe_load((run_dir / "recipe.yaml").read_text())
    for reward in written["rewards"]:
        del reward["role"], reward["pass_score"]
    (run_dir / "recipe.yaml").write_text(yaml.safe_dump(written, sort_keys=False))
    resumed = CliRunner().invoke(app, ["train", str(recipe), "--resume", "grpo.temperature=0.5"])
    assert resumed.exit_code == 0, resumed.output
    assert "changed from step 2 on: grpo.temperature: 1.0 -> 0.5; training.max_steps: 1 -> 2" in resumed.output
    [record] = [json.loads(line) for line in (run_dir / "recipe_changes.jsonl").read_text().splitlines()]
    assert record == {"from_step": 2, "changes": {"grpo.temperature": [1.0, 0.5], "training.max_steps": [1, 2]}}
    saved = load_recipe(run_dir / "recipe.yaml")
    assert saved.grpo.temperature == 0.5 and saved.training.max_steps == 2
    assert [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2]
