"""The long run's test checkpoint is picked on validation alone (benchmarks/gsm8k_learning/pick_checkpoint.py):
the highest held-out flexible-extract, the earlier step on a tie, never a folder that mixes base evaluations."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gsm8k_learning" / "pick_checkpoint.py"


def write_comparison(folder: Path, step: int, flexible: float, strict: float, base: str = "val/base") -> None:
    def cell(trained: float) -> dict:
        return {
            "base": 0.2,
            "trained": trained,
            "n": 300,
            "difference": trained - 0.2,
            "low": -0.01,
            "high": 0.05,
            "fixed": 10,
            "broken": 5,
        }

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    comparison = {
        "problems": 300,
        "base": base,
        "trained": str(path / "trained"),
        "filters": {"strict-match": cell(strict), "flexible-extract": cell(flexible)},
        "base_behaviour": {"mean_new_tokens": 300.0},
        "trained_behaviour": {"mean_new_tokens": 260.0},
    }
    (path / "comparison.json").write_text(json.dumps(comparison))


def pick(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(folder)], capture_output=True, text=True, timeout=60)


def test_picks_the_highest_flexible_extract_not_strict_match(tmp_path):
    write_comparison(tmp_path, 25, flexible=0.29, strict=0.05)
    write_comparison(tmp_path, 50, flexible=0.31, strict=0.01)
    write_comparison(tmp_path, 100, flexible=0.30, strict=0.02)
    done = pick(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "50"
    assert "| 100 |" in done.stderr


def test_a_tie_goes_to_the_earlier_step(tmp_path):
    write_comparison(tmp_path, 75, flexible=0.31, strict=0.01)
    write_comparison(tmp_path, 25, flexible=0.31, strict=0.01)
    done = pick(tmp_path)
    assert done.stdout.strip() == "25"


def test_refuses_comparisons_on_different_base_evaluations(tmp_path):
    write_comparison(tmp_path, 25, flexible=0.31, strict=0.01, base="val/base")
    write_comparison(tmp_path, 50, flexible=0.35, strict=0.01, base="other/base")
    done = pick(tmp_path)
    assert done.returncode != 0
    assert done.stdout == ""
    assert "different base" in done.stderr


def test_an_empty_folder_says_to_validate_first(tmp_path):
    done = pick(tmp_path)
    assert done.returncode != 0
    assert "run the validations first" in done.stderr
