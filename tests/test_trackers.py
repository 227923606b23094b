"""`training.report_to`: names checked at validation against transformers' trackers, and a named tracker that
cannot start here refused in one line before any weight loads."""

from __future__ import annotations

import importlib.util
import typing

from typer.testing import CliRunner

from conftest import fails_cleanly, write_recipe
from grpo_cli.cli import app
from grpo_cli.recipe.schema import Tracker
from grpo_cli.train.runtime import TRACKER_MODULES

runner = CliRunner()


def test_the_tracker_names_are_transformers_own():
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    assert set(typing.get_args(Tracker)) - {"none", "all"} == set(INTEGRATION_TO_CALLBACK) == set(TRACKER_MODULES)


def test_a_tracker_typo_names_the_key_and_the_valid_names(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama, training={"report_to": ["wandb", "tensorbord"]})
    line = fails_cleanly(runner.invoke(app, ["validate", str(recipe)]), "training.report_to[1]", "'tensorbord'")
    assert all(f"'{name}'" in line for name in ("none", "all", "tensorboard", "trackio", "wandb")), line
    assert f"{recipe}:" in line  # its line in the file


def test_none_and_all_stand_alone(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama)
    for names in ("[none, tensorboard]", "[wandb, all]"):
        result = runner.invoke(app, ["validate", str(recipe), f"training.report_to={names}"])
        fails_cleanly(result, "training.report_to", "stands alone")
    for names in ("none", "all", "tensorboard", "[wandb, trackio]"):
        result = runner.invoke(app, ["validate", str(recipe), f"training.report_to={names}"])
        assert result.exit_code == 0, result.output


def test_a_tracker_not_installed_is_one_line_before_the_model_loads(tmp_path, tiny_llama, monkeypatch):
    import grpo_cli.models as models

    def never(*args, **kwargs):
        raise AssertionError("the model loaded before the tracker was checked")

    monkeypatch.setattr(models, "load_model", never)
    # A tracker this environment lacks, whichever are installed here.
    missing = next(
        name
        for name, (modules, _) in TRACKER_MODULES.items()
        if modules and all(importlib.util.find_spec(m) is None for m in modules)
    )
    recipe = write_recipe(tmp_path, tiny_llama, training={"report_to": [missing]})
    line = fails_cleanly(runner.invoke(app, ["train", str(recipe)]), "training.report_to", missing, "pip install")
    assert "is not installed" in line
    assert not (tmp_path / "run").exists()
