"""`grpo export --merge`: fold a LoRA run's adapter into its base model, as a plain model directory."""

from __future__ import annotations

from pathlib import Path

from grpo_cli.errors import UserError
from grpo_cli.runs.layout import FINAL_DIR, RECIPE_FILE


def merge_lora_run(run_dir: Path, output: Path, force: bool = False) -> Path:
    """Check the run and the output folder (before any weight loads), then merge and save."""
    from grpo_cli.files import check_writable_dir
    from grpo_cli.models import is_lora_adapter, load_model
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.runs.weight_files import unloadable_weights

    if not run_dir.is_dir():
        raise UserError(
            f"run directory {run_dir} does not exist{_did_you_mean(run_dir)}; give the folder "
            "`grpo train` wrote (training.output_dir, by default runs/<recipe name>)"
        )
    adapter = run_dir / FINAL_DIR
    if not is_lora_adapter(adapter):
        raise UserError(f"{adapter} holds no LoRA adapter: only finished LoRA/QLoRA runs can be merged")
    unloadable = unloadable_weights(adapter)  # before the base model loads: a cut file costs nothing
    if unloadable is not None:
        file, why = unloadable
        raise UserError(f"{file} {why}; restore it from a copy and export again (nothing was written)")
    if output.exists() and not output.is_dir():
        raise UserError(f"{output} is a file; --merge names a folder to create")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise UserError(f"{output} already exists and is not empty; pass --force or choose another directory")
    check_writable_dir(output)
    recipe = load_recipe(run_dir / RECIPE_FILE, scope="export")

    from peft import PeftModel
    from transformers import AutoTokenizer

    # QLoRA trained against a quantized base; the merged model is written in the unquantized compute dtype. The
    # base loads as every command loads the policy (models.load_model), without the quantization.
    base = load_model(recipe.model)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged.save_pretrained(output)
    AutoTokenizer.from_pretrained(str(adapter)).save_pretrained(output)
    return output


def _did_you_mean(missing: Path) -> str:
    """`; did you mean runs/demo?` when a folder beside the missing one has a close name (a typo)."""
    import difflib

    parent = missing.parent if missing.parent.is_dir() else None
    names = [p.name for p in parent.iterdir() if p.is_dir()] if parent else []
    close = difflib.get_close_matches(missing.name, names, n=1)
    return f"; did you mean {missing.parent / close[0]}?" if close else ""
