"""The commands that take a recipe before and while it trains: validate, train, plan, preflight."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.parts import OverridesArg, RecipeArg, examples, own_process, user_errors
from grpo_cli.cli.root import app


@app.command(epilog=examples("grpo validate recipes/demo.yaml", "grpo validate my.yaml training.max_steps=20 lora.r=8"))
def validate(recipe: RecipeArg, overrides: OverridesArg = None) -> None:
    """Check a recipe (with overrides) and print it with every default filled in."""
    import yaml

    from grpo_cli.recipe.reward_model_checks import unchecked_line
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.distributed import check_strategy_here

    with user_errors():
        loaded = load_recipe(recipe, overrides)
        check_strategy_here(loaded.distributed)  # what this machine would silently replace (FSDP on a CPU)
    typer.echo(yaml.safe_dump(loaded.model_dump(mode="json"), sort_keys=False, allow_unicode=True), nl=False)
    typer.echo(
        f"# OK: {recipe} ({loaded.method}, generation batch {loaded.generation_batch_size} completions = "
        f"{loaded.generation_batch_size // loaded.grpo.num_generations} prompt(s) x {loaded.grpo.num_generations})",
        err=True,
    )
    if unchecked_line(loaded.rewards):  # reward models and judges: what only their weights can tell
        typer.echo(unchecked_line(loaded.rewards), err=True)


@app.command(
    epilog=examples(
        "grpo train recipes/demo.yaml|offline CPU demo",
        "grpo train my.yaml training.max_steps=50 lora.r=8",
        "grpo train my.yaml --resume|continue from the last whole checkpoint",
        "grpo train my.yaml validation.every_steps=10|held-out accuracy every 10 steps (eval's data and scorer)",
        "grpo train my.yaml --num-processes 8 --strategy zero3|8 GPUs through accelerate + DeepSpeed",
    )
)
def train(
    ctx: typer.Context,
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run in output_dir from its last checkpoint.")
    ] = False,
    num_processes: Annotated[
        int | None, typer.Option("--num-processes", help="Processes (GPUs) through accelerate.")
    ] = None,
    strategy: Annotated[str | None, typer.Option("--strategy", help="ddp, fsdp, zero2 or zero3.")] = None,
    accelerate_config: Annotated[
        Path | None, typer.Option("--accelerate-config", help="Your own accelerate config.")
    ] = None,
) -> None:
    """Train with GRPO: validate the recipe, then run TRL's GRPOTrainer and save the result."""
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.run import run

    options = {
        "distributed.num_processes": num_processes,
        "distributed.strategy": strategy,
        "distributed.accelerate_config": str(accelerate_config) if accelerate_config else None,
    }

    def echo(line: str) -> None:
        typer.echo(line, err=True)

    with user_errors():
        loaded = load_recipe(recipe, overrides, options=options)
        _check_references(loaded)
        code = run(loaded, resume, echo=echo, validate=_validation(loaded, echo), own_process=own_process(ctx))
    if code:
        raise typer.Exit(code)


def _check_references(recipe) -> None:
    """Before anything loads: a verifier that passes none of the data's own reference answers is refused (it lives
    with evaluation's scorers, handed to training here)."""
    from grpo_cli.eval.references import check_references, training_references
    from grpo_cli.eval.task import role_of

    verifiers = [index for index, spec in enumerate(recipe.rewards) if role_of(spec) == "verifier"]
    if verifiers and recipe.data.answer_column:  # else nothing to check, and no data to read yet
        examples = training_references(recipe.data, recipe.training.seed)
        check_references(recipe.data, recipe.rewards, verifiers, examples, recipe.data.source)


def _validation(recipe, echo):
    """The held-out validation a `validation:` section asks for, built from evaluation's code and handed to training
    as a callable (the two packages meet only here); its data is checked before the run directory is written."""
    if recipe.validation is None:
        return None
    from grpo_cli.eval.training_validation import held_out_validation

    return held_out_validation(recipe, warn=echo)


@app.command(
    epilog=examples(
        "grpo plan recipes/qwen2.5/1.5b_full.yaml --gpu 'RTX 4090'",
        "grpo plan my.yaml grpo.num_generations=16 --gpu 80GB --json",
        "grpo plan my.yaml --device cpu --ram 24GB",
        "grpo plan recipes/qwen2.5/0.5b_lora.yaml --gpu 'RTX 4090' --solve grpo.num_generations|the largest group "
        "that fits",
        "grpo plan my.yaml --gpu 16GB --solve grpo.max_completion_length --json",
    )
)
def plan(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="GPU memory (16GB) or name (RTX 4090, A100-80GB, H100).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            help="cuda or cpu (default: cpu with --ram, cuda when a GPU is given "
            "or present, else cpu, planned as peak RSS against RAM).",
        ),
    ] = None,
    ram: Annotated[str | None, typer.Option("--ram", help="RAM for a CPU run (default: this machine's).")] = None,
    solve: Annotated[
        str | None,
        typer.Option(
            "--solve",
            metavar="KEY",
            help="Find the largest value of KEY that fits: grpo.num_generations, grpo.max_completion_length, "
            "training.per_device_train_batch_size, lora.r or data.max_prompt_length (exit 1 when none does).",
        ),
    ] = None,
) -> None:
    """Estimate peak GPU memory before loading any weight: where it goes, whether it fits, what to change."""
    from rich.console import Console

    from grpo_cli.plan.fit import plan_recipe
    from grpo_cli.plan.notes import budget_notes
    from grpo_cli.plan.solve import solve as largest_fitting
    from grpo_cli.plan.view import plan_json, print_plan
    from grpo_cli.recipe.validation import load_recipe

    with user_errors(as_json):
        loaded = load_recipe(recipe, overrides, scope="plan")
        result = plan_recipe(loaded, gpu, device, ram)
        solution = largest_fitting(loaded, solve, result) if solve is not None else None
    notes = budget_notes(loaded)
    d = loaded.distributed
    if result.plan.device == "cpu" and loaded.num_processes > 1 and d.strategy == "fsdp" and not d.accelerate_config:
        from grpo_cli.train.distributed import FSDP_ON_CPU

        notes.append(f"planned per process as asked, but {FSDP_ON_CPU}")
    if solution is not None:
        from grpo_cli.plan.view import solve_json, solve_lines

        if as_json:
            typer.echo(json.dumps({**plan_json(result, notes), "solve": solve_json(solution)}, indent=2))
        else:
            kept = [o for o in overrides or [] if o.partition("=")[0].strip() not in solution.changed_keys]
            for line in solve_lines(solution, result, _train_command(recipe, kept)):
                typer.echo(line)
        if solution.found is None:
            raise typer.Exit(1)
    elif as_json:
        typer.echo(json.dumps(plan_json(result, notes), indent=2))
    else:
        print_plan(Console(soft_wrap=False), result, _train_command(recipe, overrides), notes)


@app.command(
    epilog=examples(
        "grpo preflight recipes/demo.yaml", "grpo preflight recipes/qwen2.5/0.5b_lora.yaml --gpu 24GB --json"
    )
)
def preflight(
    ctx: typer.Context,
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    steps: Annotated[
        int, typer.Option("--steps", min=2, help="Real training steps to measure (the last one measures the peak).")
    ] = 2,
    prompts: Annotated[
        int | None,
        typer.Option(
            "--prompts",
            min=1,
            help="Prompts to sample for the learning signal (default: 8 groups and 64 completions at least).",
        ),
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU memory (16GB) or name for the fit verdict.")] = None,
    hours: Annotated[float, typer.Option("--hours", min=0.01, help="Advise when the run would take longer.")] = 24.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Measure, in about a minute on this machine, whether the recipe fits, how long it takes, and whether it can learn."""  # noqa: E501 (the help text, one line)
    from rich.console import Console

    from grpo_cli.audit.run import audit_rewards
    from grpo_cli.preflight.run import run_preflight
    from grpo_cli.preflight.view import preflight_json, print_preflight
    from grpo_cli.progress import PhaseLines, quiet_libraries
    from grpo_cli.recipe.validation import load_recipe

    console = Console(stderr=True)
    with user_errors(as_json):
        loaded = load_recipe(recipe, overrides, scope="preflight")
        quiet_libraries()
        _check_references(loaded)
        budget = loaded.grpo.max_completion_length
        audit = audit_rewards(loaded.data, loaded.rewards, loaded.model, loaded.training.seed, budget)  # no model
        with PhaseLines(console, "loading the model...") as show:
            result = run_preflight(loaded, steps, prompts, gpu, hours, show=show, own_process=own_process(ctx))
        result.audit = audit
    if as_json:
        typer.echo(json.dumps(preflight_json(result), indent=2))
    else:
        print_preflight(Console(soft_wrap=False), result, _train_command(recipe, overrides))


@app.command(
    epilog=examples(
        "grpo audit recipes/demo.yaml",
        "grpo audit my.yaml --strict|exit 1 on a false pass, a false fail or a shortcut",
        "grpo audit recipes/demo_judge.yaml --models|load the reward models and judges too",
    )
)
def audit(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the audit as JSON.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when the audit finds anything.")] = False,
    models: Annotated[
        bool, typer.Option("--models", help="Also score with the reward models and judges (loads their weights).")
    ] = False,
    rows: Annotated[
        int | None, typer.Option("--rows", min=1, help="Training prompts to probe (default 200; 32 with --models).")
    ] = None,
) -> None:
    """Ask the recipe's rewards what they pay right answers, wrong-on-purpose replies and trivial rules, before any
    weight loads."""
    from rich.console import Console

    from grpo_cli.audit.run import AUDIT_ROWS, MODEL_ROWS, audit_rewards
    from grpo_cli.audit.view import audit_json, print_audit
    from grpo_cli.recipe.validation import load_recipe

    with user_errors(as_json):
        loaded = load_recipe(recipe, overrides, scope="audit")
        rows = rows or (MODEL_ROWS if models else AUDIT_ROWS)
        budget = loaded.grpo.max_completion_length
        result = audit_rewards(loaded.data, loaded.rewards, loaded.model, loaded.training.seed, budget, models, rows)
    if as_json:
        typer.echo(json.dumps(audit_json(result), indent=2))
    else:
        print_audit(Console(soft_wrap=False), result, loaded.data.source)
    if strict and result.findings:
        raise typer.Exit(1)


def _train_command(recipe: Path, overrides: list[str] | None) -> str:
    """The user's own `grpo train` line, which suggestions and advice extend with their overrides."""
    return " ".join(["grpo train", str(recipe), *(overrides or [])])
