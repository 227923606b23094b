from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from grpo_cli import __version__
from grpo_cli.cli import app
from grpo_cli.recipe.catalog import shipped_recipes
from grpo_cli.recipe.validation import load_recipe

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "recipes").rglob("*.yaml"))
runner = CliRunner()


@pytest.mark.parametrize("recipe", SHIPPED, ids=[str(p.relative_to(ROOT / "recipes")) for p in SHIPPED])
def test_every_shipped_recipe_validates_and_opens_with_its_command(recipe):
    result = runner.invoke(app, ["validate", str(recipe)])
    assert result.exit_code == 0, result.output
    first_line = recipe.read_text().splitlines()[0]
    assert first_line.startswith("# grpo train recipes/"), first_line
    assert str(recipe.relative_to(ROOT)) in first_line
    # A shipped recipe speaks to users who have the package, not this repository's folders beside it.
    text = recipe.read_text()
    assert "shared/" not in text and "benchmarks/models" not in text


def test_shipped_recipes_cover_methods_and_loss_types():
    recipes = [load_recipe(p) for p in SHIPPED]
    assert {"full", "lora", "qlora"} <= {r.method for r in recipes}
    assert {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"} <= {r.grpo.loss_type for r in recipes}
    assert "demo" in shipped_recipes()


def test_validate_prints_resolved_recipe_with_overrides():
    result = runner.invoke(app, ["validate", str(ROOT / "recipes/demo.yaml"), "training.max_steps=7", "lora.r=4"])
    assert result.exit_code == 0, result.output
    resolved = yaml.safe_load(result.stdout)
    assert resolved["training"]["max_steps"] == 7
    assert resolved["lora"]["r"] == 4
    assert resolved["grpo"]["loss_type"] == "dapo"  # defaults are filled in


def test_override_can_add_a_section_and_list_item(tmp_path):
    recipe = load_recipe(ROOT / "recipes/demo.yaml", ["quantization.bits=4", "rewards.2.name=soft_format"])
    assert recipe.method == "qlora"
    assert [r.name for r in recipe.rewards][-1] == "soft_format"


def test_a_section_given_as_a_mapping_keeps_the_files_other_keys():
    demo = ROOT / "recipes/demo.yaml"  # grpo: num_generations 8, max_completion_length 32, loss_type dapo
    recipe = load_recipe(demo, ["grpo={beta: 0.1, temperature: 0.8}", "lora={r: 4}"])
    assert (recipe.grpo.beta, recipe.grpo.temperature) == (0.1, 0.8)
    assert (recipe.grpo.num_generations, recipe.grpo.max_completion_length, recipe.grpo.loss_type) == (8, 32, "dapo")
    assert (recipe.lora.r, recipe.lora.alpha) == (4, 32)
    reset = load_recipe(demo, ["grpo={}"])  # `{}` resets the section to its defaults
    assert reset.grpo.max_completion_length == 256  # the schema's default, not the file's 32
    # An error in the mapping is the command line's, not a line of the file's.
    result = runner.invoke(app, ["validate", str(demo), "grpo={beta: high}"])
    assert result.exit_code == 2 and "command line: grpo.beta:" in result.output, result.output


def test_batch_error_proposes_fixes_that_validate(tmp_path):
    result = runner.invoke(app, ["validate", str(ROOT / "recipes/demo.yaml"), "training.per_device_train_batch_size=6"])
    assert result.exit_code == 2
    fixes = result.output.split("nearest fixes: ")[1].strip().split(", ")
    assert fixes
    for fix in fixes:
        assert (
            runner.invoke(
                app, ["validate", str(ROOT / "recipes/demo.yaml"), "training.per_device_train_batch_size=6", fix]
            ).exit_code
            == 0
        ), fix


def test_recipes_list_and_cp_never_overwrite(tmp_path):
    listing = runner.invoke(app, ["recipes", "list"])
    assert listing.exit_code == 0 and "qwen2.5/0.5b_lora" in listing.output and "demo" in listing.output
    dest = tmp_path / "mine.yaml"
    assert runner.invoke(app, ["recipes", "cp", "qwen2.5/0.5b_lora", str(dest)]).exit_code == 0
    assert dest.read_text() == (ROOT / "recipes/qwen2.5/0.5b_lora.yaml").read_text()
    dest.write_text("# my edits\n")
    again = runner.invoke(app, ["recipes", "cp", "qwen2.5/0.5b_lora", str(dest)])
    assert again.exit_code == 2 and "already exists" in again.output
    assert dest.read_text() == "# my edits\n"
    assert runner.invoke(app, ["recipes", "cp", "demo", str(tmp_path)]).exit_code == 0
    assert (tmp_path / "demo.yaml").exists()
    unknown = runner.invoke(app, ["recipes", "cp", "nope", str(tmp_path / "x.yaml")])
    assert unknown.exit_code == 2 and "grpo recipes list" in unknown.output


def test_schema_is_json_schema_of_the_recipe():
    result = runner.invoke(app, ["schema"])
    schema = json.loads(result.stdout)
    assert schema["additionalProperties"] is False
    assert {"model", "lora", "quantization", "data", "rewards", "grpo", "training", "eval", "hardware", "trl"} <= set(
        schema["properties"]
    )


def test_version_and_help_examples():
    assert runner.invoke(app, ["--version"]).output.strip() == f"grpo {__version__}"
    for command in (["validate"], ["train"], ["schema"], ["recipes", "cp"]):
        help_text = runner.invoke(app, [*command, "--help"]).output
        assert "Examples" in help_text, command


def test_shell_completion_is_offered():
    """What `grpo --install-completion` installs: the shell calls grpo with _GRPO_COMPLETE set and gets candidates.

    Driven through that protocol, not --show-completion, whose shell auto-detection depends on the process tree
    the tests happen to start from."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "_GRPO_COMPLETE": "complete_bash", "COMP_WORDS": "grpo pl", "COMP_CWORD": "1"}
    done = subprocess.run([sys.executable, "-m", "grpo_cli"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout.split() == ["plan"], (done.stdout, done.stderr)
    assert "--install-completion" in runner.invoke(app, ["--help"]).output


def test_missing_recipe_file(tmp_path):
    result = runner.invoke(app, ["validate", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2 and "recipe file not found" in result.output and "Traceback" not in result.output


def test_trl_passthrough_accepts_real_grpo_config_fields():
    recipe = load_recipe(ROOT / "recipes/demo.yaml", ["trl.min_p=0.05", "trl.disable_dropout=true"])
    assert recipe.trl == {"min_p": 0.05, "disable_dropout": True}


def test_trls_continuous_batching_under_mixed_precision_is_refused_with_the_fix():
    """TRL's continuous batching casts the model in place to the mixed-precision dtype: float32 adapters would train
    on in bfloat16. Refused at validation with the fix; in float32 it is left to the user."""
    on = ["trl.use_transformers_continuous_batching=true"]
    result = runner.invoke(app, ["validate", str(ROOT / "recipes/demo.yaml"), *on, "model.mixed_precision=bf16"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = result.output.strip().splitlines()[-1]
    assert "trl.use_transformers_continuous_batching" in line and "the trained adapter included" in line, line
    assert "model.mixed_precision: no" in line
    recipe = load_recipe(ROOT / "recipes/demo.yaml", [*on, "model.mixed_precision=no"])
    assert recipe.trl == {"use_transformers_continuous_batching": True}
