"""The repository carries code and evidence, not weights: every clone pays for each tracked byte, and the lent GPU
machine receives the working tree only when it is under 64 MiB."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_TREE_BYTES = 30 * 1000 * 1000
# What a Trainer checkpoint holds besides the model: resuming state, never evidence.
TRAINER_STATE = ("optimizer.pt", "scheduler.pt", "training_args.bin", "scaler.pt")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked")
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listing.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_tracked_file_over_4_mb():
    big = {str(p.relative_to(ROOT)): p.stat().st_size for p in tracked_files() if p.stat().st_size > MAX_FILE_BYTES}
    assert not big, big


def test_no_trainer_state_or_weights_tracked():
    """Optimizer, scheduler, RNG and training-args files, and weight files: a result's README names the commit that
    holds an adapter instead."""
    found = [
        str(p.relative_to(ROOT))
        for p in tracked_files()
        if p.name in TRAINER_STATE or p.name.startswith("rng_state") or p.suffix in WEIGHT_SUFFIXES
    ]
    assert not found, found


def test_tracked_tree_under_30_mb():
    total = sum(p.stat().st_size for p in tracked_files())
    assert total < MAX_TREE_BYTES, f"{total / 1e6:.1f} MB tracked"
