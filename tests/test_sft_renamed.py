"""The supervised stage was `warmup:` before 0.2.0: recipes, command lines and run folders written then still work,
with one notice line where the user can rename the key."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from conftest import fails_cleanly, write_recipe
from grpo_cli.cli import app
from grpo_cli.recipe.validation import load_recipe
from grpo_cli.runs.checkpoints import sft_resumable
from grpo_cli.runs.layout import sft_dir
from grpo_cli.runs.report import _sft_losses
from grpo_cli.runs.saved_recipe import refuse_shape_change, resolved_recipe

SFT = {"source": "reference", "count": 8, "max_steps": 2}
LORA = {"r": 4, "alpha": 8, "dropout": 0.0}


def test_the_old_warmup_key_is_read_as_sft_with_one_notice_line(tmp_path, tiny_llama, capsys):
    old = load_recipe(write_recipe(tmp_path, tiny_llama, lora=LORA, warmup=SFT))
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("notice:")]
    assert old.sft is not None and old.sft.count == 8 and old.sft.max_steps == 2
    assert len(notices) == 1 and "`warmup:` is called `sft:` now" in notices[0] and "recipe.yaml" in notices[0]
    new = load_recipe(write_recipe(tmp_path, tiny_llama, lora=LORA, sft=SFT))
    assert "notice:" not in capsys.readouterr().err and new.sft == old.sft


def test_an_old_override_sets_the_sft_section(tmp_path, tiny_llama):
    recipe = load_recipe(write_recipe(tmp_path, tiny_llama, lora=LORA, sft=SFT), ["warmup.count=3"])
    assert recipe.sft is not None and recipe.sft.count == 3


def test_both_names_at_once_is_one_line_naming_the_old_one(tmp_path, tiny_llama):
    path = write_recipe(tmp_path, tiny_llama, lora=LORA, sft=SFT, warmup=SFT)
    result = CliRunner().invoke(app, ["validate", str(path)])
    fails_cleanly(result, "warmup", "both are set", "keep `sft:`")


def test_an_error_inside_the_old_key_names_its_line(tmp_path, tiny_llama):
    path = write_recipe(tmp_path, tiny_llama, lora=LORA, warmup={**SFT, "count": 0})
    line_no = next(n for n, line in enumerate(path.read_text().splitlines(), 1) if line.strip().startswith("count:"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    fails_cleanly(result, f"recipe.yaml:{line_no}: sft.count", "greater than or equal to 1")


def test_a_run_trained_before_the_rename_keeps_its_warmup_folder(tmp_path, tiny_llama):
    run = tmp_path / "run"
    assert sft_dir(run) == run / "sft"  # a new run writes sft/
    old = run / "warmup"
    (old / "final").mkdir(parents=True)
    (old / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
    assert sft_dir(run) == old and sft_resumable(run) and _sft_losses(run) == [(1, 0.5)]

    # its saved recipe says `warmup:`; resuming it with `sft:` is no change of shape, dropping the stage is one
    recipe = load_recipe(write_recipe(tmp_path, tiny_llama, lora=LORA, sft=SFT))
    saved = resolved_recipe(recipe)
    saved["warmup"] = saved.pop("sft")
    (run / "recipe.yaml").write_text(yaml.safe_dump(saved))
    refuse_shape_change(resolved_recipe(recipe), run)
    without = resolved_recipe(recipe) | {"sft": None}
    try:
        refuse_shape_change(without, run)
    except Exception as exc:
        assert "sft=a section" in str(exc)
    else:
        raise AssertionError("dropping the SFT stage on resume was not refused")


def test_the_old_shipped_recipe_name_names_the_new_one(tmp_path):
    result = CliRunner().invoke(app, ["recipes", "cp", "demo_warmup", str(tmp_path / "mine.yaml")])
    fails_cleanly(result, "`demo_warmup` is called `demo_sft` now")
    assert not (tmp_path / "mine.yaml").exists()
    assert CliRunner().invoke(app, ["recipes", "cp", "demo_sft", str(tmp_path / "mine.yaml")]).exit_code == 0
