"""The GPU harness (benchmarks/gpu/harness.py) runs end to end on the CPU with tiny models, so it is ready before a
GPU is lent: real calibration steps, a timed `grpo train` against plain TRL, a real train + eval."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))


@pytest.mark.slow  # grpo train and calibration steps in a child process
def test_harness_on_cpu(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu" / "harness.py"),
            "--cpu",
            "--out",
            str(out),
            "--steps",
            "2",
            "--train-steps",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    parts = summary["parts"]
    assert list(parts) == ["versions", "train_eval", "overhead", "quant", "calibration", "liger"]  # most wanted first
    # every module of the tool imports; only the optional Liger kernels may be missing on this machine
    assert parts["versions"]["modules_imported"] > 50
    assert set(parts["versions"]["failed"]) <= {"liger_kernel.transformers"}, parts["versions"]["failed"]
    quant = parts["quant"]
    assert quant["configurations"] == 1 and not quant["failed"], (out / "log.txt").read_text()[-3000:]
    calibration = parts["calibration"]
    assert calibration["configurations"] == 2 and not calibration["failed"], (out / "log.txt").read_text()[-3000:]
    assert calibration["max_abs_error_pct"] < 25  # plan's CPU model on shapes it was not fitted on
    rows = list(csv.DictReader((out / "calibration.csv").open()))
    assert {r["config"] for r in rows} == {"tiny-llama-qlora-adam8", "tiny-llama-full", "tiny-qwen2-lora-beta"}
    assert all(r["device"] == "cpu" and float(r["measured_gib"]) > 0 for r in rows)
    overhead = parts["overhead"]
    assert overhead["grpo_train"]["ok"] and overhead["plain_trl"]["ok"], (out / "log.txt").read_text()[-3000:]
    assert overhead["step_time_grpo_over_plain"] > 0 and overhead["peak_grpo_over_plain"] > 0
    assert "skipped" in parts["liger"] or parts["liger"]["on"]["ok"]
    train_eval = parts["train_eval"]
    assert train_eval["train_exit"] == 0 and train_eval["steps"] == 2 and train_eval["losses_finite"]
    assert train_eval["weights_changed"]
    assert train_eval["eval_exit"] == 0 and train_eval["eval"]["problems"] == 64
    assert 0 <= train_eval["eval"]["flexible-extract"] <= 1
    assert (out / "summary.md").read_text().startswith("# GPU harness")


def test_merge_appends_device_rows_with_new_columns(tmp_path):
    from harness import merge_calibration

    target = tmp_path / "calibration.csv"
    target.write_text("# regenerate: x\nconfig,device,measured_gib\na,cpu,1.0\n")
    device = tmp_path / "device.csv"
    device.write_text("config,device,measured_gib,measured_smi_gib\nb,cuda,2.0,2.5\n")
    assert merge_calibration(device, target) == 1
    lines = target.read_text().splitlines()
    assert lines[0] == "# regenerate: x"
    rows = list(csv.DictReader(lines[1:]))
    assert [(r["config"], r["device"], r["measured_smi_gib"]) for r in rows] == [("a", "cpu", ""), ("b", "cuda", "2.5")]


def test_a_child_that_outlives_its_timeout_is_reported_not_raised(tmp_path):
    """On the H100 a timed-out child's output came back as bytes and the whole Liger part was lost."""
    from types import SimpleNamespace

    from harness import Harness

    args = SimpleNamespace(out=tmp_path, budget_s=60.0, cpu=True)
    harness = Harness(args)
    child = "import sys, time; print('out', flush=True); print('err', file=sys.stderr, flush=True); time.sleep(30)"
    done = harness.run("slow", [sys.executable, "-c", child], 2)
    assert done.returncode == 124
    assert "out" in done.stdout and "err" in done.stderr and "[timed out]" in done.stderr
    assert "[slow] exit 124" in (tmp_path / "log.txt").read_text()


def test_peak_owners_replay_finds_each_phase_peak_and_its_live_blocks():
    """benchmarks/gpu/peak_owners.py reads torch's allocator trace (CUDA only): a written trace stands in for it."""
    from peak_owners import replay

    def frames(*names):
        return [{"filename": f"/x/{name}.py", "line": 1, "name": name} for name in names]

    def alloc(addr, size, *names):
        return {"action": "alloc", "addr": addr, "size": size, "frames": frames(*names)}

    def free(addr, size):
        return {"action": "free_requested", "addr": addr, "size": size}

    trace = [
        alloc(1, 512, "_phase_marker"),  # training starts
        alloc(2, 1000, "forward"),
        alloc(3, 3000, "head"),
        free(3, 3000),
        free(99, 500),  # a block from before recording
        alloc(4, 512, "_phase_marker"),  # optimizer starts
        alloc(5, 800, "step"),
        free(2, 1000),
    ]
    found = replay(trace, ["training", "optimizer"])
    assert found["training"]["delta"] == 512 + 1000 + 3000
    assert set(found["training"]["groups"]) == {
        "_phase_marker.py:1 _phase_marker",
        "forward.py:1 forward",
        "head.py:1 head",
    }
    assert found["optimizer"]["delta"] == 512 + 1000 - 500 + 512 + 800
    assert found["optimizer"]["groups"]["step.py:1 step"] == [800, 1]
