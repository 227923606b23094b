"""The own-task demo's committed evaluations (benchmarks/own_task_demo/), scored again from the completions alone:
the trained model beats the base and the majority baseline at two seeds without a shortcut, and grpo's own scoring
of the same predictions says the same."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "benchmarks" / "own_task_demo"


def _rescore_module():
    spec = importlib.util.spec_from_file_location("own_task_rescore", DEMO / "rescore.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rescore_reads_answers_as_the_verifier_does():
    rescore = _rescore_module()
    assert rescore.right_answer("Which is the largest of these numbers: 37, 52, 18?") == 52
    assert rescore.answer_of("52 is the largest number.") == 52
    assert rescore.answer_of("Of 37, 52 and 18 the largest is 52") == 52
    assert rescore.answer_of("<answer>52</answer> not 18") == 52
    assert rescore.answer_of("no number here") is None


def test_committed_demo_learns_the_task_at_two_seeds_without_a_shortcut():
    rescore = _rescore_module()
    folders = rescore.seed_folders()
    recipe_seed = yaml.safe_load((ROOT / "recipes" / "demo_largest.yaml").read_text())["training"]["seed"]
    assert f"s{recipe_seed}" in {f.name for f in folders} and len(folders) >= 2
    for folder in folders:
        r = rescore.rescore(folder, rescore.base_of(folder))
        assert r["problems"] >= 200
        assert r["change"]["low"] > 0, folder.name
        assert r["majority_baseline"] <= 0.20
        assert r["over_baseline"]["low"] > 0.05, folder.name  # at least 5 points above always-the-same-answer
        assert r["top_share"] < 0.80, folder.name
        # grpo eval scored the same completions alike, and raised no shortcut flag.
        summary = json.loads((folder / "trained" / "summary.json").read_text())
        assert summary["filters"]["correctness"]["accuracy"] == r["trained"]
        assert summary["shortcut"]["flag"] is False
