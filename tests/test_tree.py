"""The repository carries code and evidence, not weights: every clone pays for each tracked byte, and the lent GPU
machine receives the working tree only when it is under 64 MiB. Its evidence reads true on any machine: no tracked file
names one machine's folders."""

from __future__ import annotations

import re
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
# An absolute path into one machine's workspace, home, temporary or install folders (its runs, model cache, scratch
# files). Committed results name files relative to the repository (`../shared/data/...`), model files by placeholder
# (`$M`), a home folder as `~` or `$HOME`.
MACHINE_PATH = re.compile(r"(?<![\w.~$}/:-])/(?:work|root|home|Users|tmp|var/tmp|opt|mnt|scratch)/")


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked")
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listing.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_tracked_file_over_4_mb():
    big = {str(p.relative_to(ROOT)): p.stat().st_size for p in tracked_files() if p.stat().st_size > MAX_FILE_BYTES}
    assert not big, big


def _is_weight_or_trainer_state(name: str) -> bool:
    path = Path(name)
    return path.name in TRAINER_STATE or path.name.startswith("rng_state") or path.suffix in WEIGHT_SUFFIXES


def test_no_trainer_state_or_weights_tracked():
    """Optimizer, scheduler, RNG and training-args files, and weight files, never, not even for one commit: a
    result's README names the recipe, seed and command that re-make a checkpoint instead."""
    found = [str(p.relative_to(ROOT)) for p in tracked_files() if _is_weight_or_trainer_state(p.name)]
    assert not found, found


# The last commit before weights stopped entering commits at all (until then an adapter could go into history in
# one commit and out of the tree in the next).
NO_WEIGHTS_SINCE = "e58ef0bc479dda2d1ceac0f425f93266d0f413a9"


def test_no_commit_since_the_rule_adds_weights_or_trainer_state():
    """Not even for one commit: every commit after NO_WEIGHTS_SINCE, each one's own additions."""
    tracked_files()  # skips outside a git checkout
    known = subprocess.run(["git", "cat-file", "-e", f"{NO_WEIGHTS_SINCE}^{{commit}}"], cwd=ROOT, capture_output=True)
    if known.returncode:
        pytest.skip("a shallow or rewritten history: the rule's commit is not here")
    log = subprocess.run(
        ["git", "log", "--diff-filter=A", "--name-only", "--format=%h", f"{NO_WEIGHTS_SINCE}..HEAD"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    added = [line for line in log.splitlines() if line and _is_weight_or_trainer_state(line)]
    assert not added, added


def test_tracked_tree_under_30_mb():
    total = sum(p.stat().st_size for p in tracked_files())
    assert total < MAX_TREE_BYTES, f"{total / 1e6:.1f} MB tracked"


@pytest.mark.parametrize(
    "text, machine",
    [
        ('"adapter": "/work/runs/d2/checkpoint-25"', True),
        ("--model /root/.cache/grpo/models/q.gguf", True),
        ("tmp_path = PosixPath('/tmp/pytest-of-root/pytest-125')", True),
        ("/home/me/data.jsonl", True),
        ("/opt/torch/.venv/bin/python3 -m grpo_cli", True),
        ('"model": "$M"', False),
        ("~/.cache/grpo or $HOME/.cache/grpo", False),
        ("data.source=../shared/data/gsm8k/train.jsonl", False),
        ("https://github.com/org/work/tree/tmp/x", False),
        ("/usr/bin/time -v grpo train", False),
    ],
)
def test_the_machine_path_check_tells_a_machine_path_from_a_placeholder(text, machine):
    assert bool(MACHINE_PATH.search(text)) is machine


def test_no_tracked_file_outside_tests_names_a_machine_path():
    """Tests may build such paths (a temporary folder); code, docs and committed results may not."""
    found = []
    for path in tracked_files():
        relative = path.relative_to(ROOT)
        if relative.parts[0] == "tests":
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images and other binary files
            continue
        found += [
            f"{relative}:{number}: {line.strip()[:100]}"
            for number, line in enumerate(text.splitlines(), start=1)
            if MACHINE_PATH.search(line)
        ]
    assert not found, f"{len(found)} line(s), first: " + "\n".join(found[:10])
