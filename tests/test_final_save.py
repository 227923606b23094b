"""One rule for the finished model, the SFT stage's and GRPO's alike (train/stage.py save_final): written beside final/
and moved into place whole, so final/ never holds half a model. The real stages are driven by tests/test_train.py and
tests/test_sft.py; here the rule itself, on a writer that can fail mid-save."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpo_cli.runs.layout import FINAL_DIR, FINAL_STAGING, OWN_NAMES
from grpo_cli.train.stage import save_final

ROOT = Path(__file__).resolve().parents[1]


class Writer:
    """What save_final asks of a trainer: save_model, the tokenizer, the process rank and the barrier."""

    def __init__(self, weights: str, fail: bool = False):
        self.weights, self.fail = weights, fail
        self.accelerator = SimpleNamespace(wait_for_everyone=lambda: None)
        self.processing_class = SimpleNamespace(
            save_pretrained=lambda path: Path(path, "tokenizer.json").write_text("{}")
        )

    def is_world_process_zero(self) -> bool:
        return True

    def save_model(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        Path(path, "adapter_model.safetensors").write_text(self.weights)
        if self.fail:
            raise OSError(28, "No space left on device")


def test_the_final_model_appears_whole_and_replaces_an_earlier_one(tmp_path):
    final = save_final(Writer("first"), tmp_path / FINAL_DIR)
    assert sorted(p.name for p in final.iterdir()) == ["adapter_model.safetensors", "tokenizer.json"]
    save_final(Writer("second"), final)
    assert (final / "adapter_model.safetensors").read_text() == "second"
    assert not (tmp_path / FINAL_STAGING).exists()


def test_a_save_that_fails_leaves_the_earlier_final_model_as_it_was(tmp_path):
    final = save_final(Writer("first"), tmp_path / FINAL_DIR)
    with pytest.raises(OSError):
        save_final(Writer("half", fail=True), final)
    assert (final / "adapter_model.safetensors").read_text() == "first"
    assert (final / "tokenizer.json").is_file()
    assert FINAL_STAGING in OWN_NAMES  # the leftover is the run's own: a rerun is not refused as a foreign folder


def test_both_stages_save_their_final_model_by_the_one_rule():
    callers = {}
    for path in (ROOT / "grpo_cli" / "train").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
                 for n in ast.walk(tree) if isinstance(n, ast.Call)}  # fmt: skip
        callers[path.name] = names
    assert "save_final" in callers["run.py"] and "save_final" in callers["sft.py"]
    assert [name for name, calls in callers.items() if "save_model" in calls] == ["stage.py"]
