"""`grpo eval` as one call: which recipe, which models, which output folders; then evaluate and compare.

The CLI gathers the flags into an `EvalRequest`; everything that decides lives here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.eval import evaluate as ev
from grpo_cli.eval.comparison import compare
from grpo_cli.eval.sampled import check_sampling
from grpo_cli.eval.store import OWN_FILES, refuse_foreign
from grpo_cli.eval.targets import Target, default_output, run_target
from grpo_cli.generation.engines import check_engine
from grpo_cli.process.optional_libraries import skip_unused_bitsandbytes
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.layout import COMPARISON_FILE, RECIPE_FILE, SETTINGS_FILE, is_checkpoint


@dataclass
class EvalRequest:
    recipe: Path | None = None
    overrides: list[str] = field(default_factory=list)
    run: Path | None = None  # grpo eval run: the trained model of this run
    compare_run: Path | None = None  # grpo eval compare: base and trained of this run
    base_dir: Path | None = None  # --base (compare, curve): reuse this base evaluation
    model: str | None = None
    adapter: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)  # typed flags: {"eval.limit": 50, ...}
    output: Path | None = None
    engine: str = "auto"  # --engine: auto, vllm or transformers (grpo_cli/generation/engines.py)
    own_process: bool = False  # the console script's process (cli/parts.py own_process)
    checkpoints_run: Path | None = None  # grpo eval curve: base, every checkpoint and the final model of this run


@dataclass
class EvalOutcome:
    results: list[ev.EvalResult]
    comparison: dict[str, Any] | None
    curve: list[dict[str, Any]] | None = None  # grpo eval curve: a row a step (eval/checkpoint_curve.py)


def run_eval(request: EvalRequest, display=None) -> EvalOutcome:
    """Check everything that needs no model first, then evaluate; the run's model card is refreshed after."""
    recipe = _load(request)
    check_sampling(recipe.eval, ev.uses_tools(recipe.tools, recipe.environment))
    skip_unused_bitsandbytes(recipe.quantization, recipe.training.optim, request.own_process)
    base = Target(
        "base" if request.adapter is None else "adapter",
        recipe.model.name,
        str(request.adapter) if request.adapter else None,
    )
    run_dir = request.compare_run or request.run or request.checkpoints_run
    if request.checkpoints_run is not None:
        from grpo_cli.eval.checkpoint_curve import evaluate_checkpoints

        default = default_output(recipe.eval, base, request.checkpoints_run)
        root = request.output or default.with_name(f"{default.name}-checkpoints")
        results, curve = evaluate_checkpoints(
            recipe, request.checkpoints_run, root, display, request.engine, request.base_dir
        )
        outcome = EvalOutcome(results, None, curve)
    elif request.compare_run is not None:
        root = request.output or default_output(recipe.eval, base, request.compare_run)
        base_out, trained_out = request.base_dir or root / "base", root / "trained"
        refuse_foreign(root, {"base", "trained", COMPARISON_FILE}, "grpo eval compare")
        for folder in (base_out, trained_out):
            refuse_foreign(folder, OWN_FILES, "grpo eval")
        trained = run_target(request.compare_run, recipe.model.name)
        # A base evaluation is the same for every run with the same settings: --base reuses it (the store's
        # settings check refuses one made with another prompt, budget, dtype or data).
        results = [
            ev.evaluate(recipe, base, base_out, display, request.engine),
            ev.evaluate(recipe, trained, trained_out, display, request.engine),
        ]
        outcome = EvalOutcome(results, compare(results[0], results[1], root))
    else:
        target = run_target(request.run, recipe.model.name) if request.run is not None else base
        default = default_output(recipe.eval, target, request.run)
        output = request.output or (default / "trained" if request.run else default)
        outcome = EvalOutcome([ev.evaluate(recipe, target, output, display, request.engine)], None)
    if run_dir is not None and not is_checkpoint(run_dir) and _writes_into(request.output, run_dir):
        from grpo_cli.runs.model_card import write_model_card

        write_model_card(run_dir, recipe)  # now with these results (the card describes the final model only)
    return outcome


def _writes_into(output: Path | None, run_dir: Path) -> bool:
    """Whether the results went into the run (its eval/ folder, the default), where its model card reads them:
    results written elsewhere change nothing in the run, which may be read-only."""
    return output is None or output.resolve().is_relative_to(run_dir.resolve())


def _load(request: EvalRequest) -> Recipe:
    """The recipe to evaluate with, loaded once, checked only for what evaluation reads (model, adapter, eval data):
    a run copied without its training data or reward files still evaluates."""
    from grpo_cli.models import is_lora_adapter
    from grpo_cli.recipe.validation import load_recipe

    run_dir = request.compare_run or request.run or request.checkpoints_run
    options = {"model.name": request.model, **request.options}
    check_engine(request.engine)
    if request.checkpoints_run is not None and is_checkpoint(request.checkpoints_run):
        raise UserError(
            f"grpo eval curve takes the run directory, not one checkpoint: {request.checkpoints_run.parent}"
        )
    if request.recipe is None and run_dir is None and request.model is None:
        raise UserError("nothing to evaluate: give a recipe or --model NAME (a trained run: grpo eval run RUN_DIR)")
    if request.adapter is not None and not is_lora_adapter(request.adapter):
        raise UserError(f"{request.adapter} is not a LoRA adapter directory (no adapter_config.json)")
    if request.base_dir is not None and not (request.base_dir / SETTINGS_FILE).is_file():
        raise UserError(
            f"{request.base_dir} holds no evaluation (no {SETTINGS_FILE}); run the base once with --output "
            f"{request.base_dir}, or leave out --base"
        )
    if request.recipe is not None:
        return load_recipe(request.recipe, request.overrides, options=options, scope="eval")
    if run_dir is not None:
        recipe_file = (run_dir.parent if is_checkpoint(run_dir) else run_dir) / RECIPE_FILE
        if not recipe_file.is_file():
            raise UserError(
                f"{run_dir} is not a run directory (no {RECIPE_FILE}); give the run written by grpo train "
                "or one of its checkpoint-N folders"
            )
        return load_recipe(recipe_file, request.overrides, options=options, scope="eval")
    return load_recipe(None, request.overrides, options=options, scope="eval")
