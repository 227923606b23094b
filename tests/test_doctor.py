"""`grpo doctor` on this machine: every line present, torch's version and the TRL private-name check named, exit 0
here; a TRL without a name grpo relies on is a BROKEN line and exit 1; --json carries the same checks."""

from __future__ import annotations

import json

import torch
from typer.testing import CliRunner

from grpo_cli.cli import app

runner = CliRunner()


def test_doctor_passes_here_and_names_versions_and_the_trl_check():
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[1]: line for line in result.output.splitlines()[:-1] if len(line.split()) > 1}
    assert torch.__version__ in lines["torch"] and lines["torch"].startswith("ok")
    for name in ("python", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "vllm", "liger-kernel"):
        assert name in lines, result.output
    assert any(line.startswith("ok") and "trl private names" in line for line in result.output.splitlines())
    for name in ("cpu", "cuda", "cache", "demo"):
        assert name in lines, result.output
    assert result.output.splitlines()[-1] == "everything grpo needs is here"


def test_doctor_json_and_a_missing_trl_name(monkeypatch):
    from grpo_cli.train import trl_seams

    monkeypatch.setitem(trl_seams.TRAINER_METHODS, "_renamed_in_a_new_trl", "stands for a renamed method by calling")
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["torch"]["status"] == "ok" and torch.__version__ in checks["torch"]["detail"]
    seams = checks["trl private names"]
    assert seams["status"] == "BROKEN" and seams["required"] and "_renamed_in_a_new_trl" in seams["detail"]
    assert "avx512_bf16" in checks["cpu"]["detail"]  # said either way: has it, or not
