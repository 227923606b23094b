"""Figures the docs quote from `grpo plan` are what `grpo plan` prints today."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from grpo_cli.cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def plan_output(*args: str) -> str:
    result = runner.invoke(app, ["plan", *args], env={"COLUMNS": "200"})
    assert result.exit_code in (0, 1), result.output  # 1: does not fit
    return result.output


def test_multi_gpu_table_matches_grpo_plan():
    doc = (ROOT / "docs" / "multi-gpu.md").read_text()
    rows = re.findall(r"^\| (ddp|zero2|zero3|fsdp) +\| ([\d.]+) GiB \| ([\d.]+) GiB", doc, re.MULTILINE)
    assert [name for name, *_ in rows] == ["ddp", "zero2", "zero3", "fsdp"]
    for strategy, tensors, smi in rows:
        out = plan_output("recipes/qwen2.5/7b_full_8gpu.yaml", f"distributed.strategy={strategy}")
        assert f"max_memory_allocated): {tensors} GiB" in out, (strategy, out[-600:])
        assert f"CUDA context): {smi} GiB" in out, (strategy, out[-600:])


def test_plan_doc_example_matches_grpo_plan():
    doc = (ROOT / "docs" / "plan.md").read_text()
    example = doc[doc.index("$ grpo plan recipes/qwen2.5/1.5b_full.yaml") :].split("```")[0]
    out = plan_output("recipes/qwen2.5/1.5b_full.yaml", "training.optim=adamw_torch", "--gpu", "16GB")
    quoted = [line for line in example.splitlines()[1:] if line.strip() and line.strip() != "..."]
    assert quoted
    for line in quoted:
        assert line.strip() in out, line
