"""The `grpo` command. Thin commands; the only place that prints user errors and chooses exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from grpo_cli import __version__
from grpo_cli.cli_parts import OverridesArg, RecipeArg, examples, user_errors
from grpo_cli.cli_recipes import recipes_app

app = typer.Typer(
    help="Fine-tune language models with GRPO from YAML recipes: plan memory, train with TRL, evaluate.",
    no_args_is_help=True,
    add_completion=True,  # grpo --install-completion / --show-completion
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
)
app.add_typer(recipes_app, name="recipes")


def entry() -> None:
    """The `grpo` console script and `python -m grpo_cli`: on a CPU, the commands that hold a model run with
    mimalloc (grpo_cli/cpu_memory.py), then the Typer app."""
    import sys

    from grpo_cli.cpu_memory import prepare_process

    prepare_process(sys.argv[1:])
    app(prog_name="grpo")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"grpo {__version__}")
        raise typer.Exit()

@app.callback()
def main(
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = None,
) -> None:
    """Fine-tune language models with GRPO from YAML recipes."""
    from grpo_cli.quiet import silence_import_notes

    silence_import_notes()


@app.command(
    epilog=examples("grpo validate recipes/demo.yaml", "grpo validate my.yaml training.max_steps=20 lora.r=8"))
def validate(recipe: RecipeArg, overrides: OverridesArg = None) -> None:
    """Check a recipe (with overrides) and print it with every default filled in."""
    import yaml

    from grpo_cli.recipe.validation import load_recipe

    with user_errors():
        loaded = load_recipe(recipe, overrides)
    typer.echo(yaml.safe_dump(loaded.model_dump(mode="json"), sort_keys=False, allow_unicode=True), nl=False)
    typer.echo(
        f"# OK: {recipe} ({loaded.method}, generation batch {loaded.generation_batch_size} completions = "
        f"{loaded.generation_batch_size // loaded.grpo.num_generations} prompt(s) x {loaded.grpo.num_generations})",
        err=True,
    )


@app.command(
    epilog=examples("grpo train recipes/demo.yaml|offline CPU demo", "grpo train my.yaml training.max_steps=50 lora.r=8",
                    "grpo train my.yaml --resume|continue from the last whole checkpoint",
                    "grpo train my.yaml --num-processes 8 --strategy zero3|8 GPUs through accelerate + DeepSpeed"))
def train(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in output_dir from its last checkpoint.")] = False,
    num_processes: Annotated[Optional[int], typer.Option("--num-processes", help="Processes (GPUs) through accelerate.")] = None,
    strategy: Annotated[Optional[str], typer.Option("--strategy", help="ddp, fsdp, zero2 or zero3.")] = None,
    accelerate_config: Annotated[Optional[Path], typer.Option("--accelerate-config", help="Your own accelerate config.")] = None,
) -> None:
    """Train with GRPO: validate the recipe, then run TRL's GRPOTrainer and save the result."""
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.train.trainer import run

    options = {"distributed.num_processes": num_processes, "distributed.strategy": strategy,
               "distributed.accelerate_config": str(accelerate_config) if accelerate_config else None}
    with user_errors():
        code = run(load_recipe(recipe, overrides, options=options), resume, echo=lambda line: typer.echo(line, err=True))
    if code:
        raise typer.Exit(code)


@app.command(
    epilog=examples("grpo plan recipes/qwen2.5/1.5b_full.yaml --gpu 'RTX 4090'",
                    "grpo plan my.yaml grpo.num_generations=16 --gpu 80GB --json", "grpo plan my.yaml --device cpu --ram 24GB"))
def plan(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    gpu: Annotated[Optional[str], typer.Option("--gpu", help="GPU memory (16GB) or name (RTX 4090, A100-80GB, H100).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    device: Annotated[Optional[str], typer.Option("--device", help="cuda or cpu (default: cuda when a GPU is given "
                                                  "or present, else cpu, planned as peak RSS against RAM).")] = None,
    ram: Annotated[Optional[str], typer.Option("--ram", help="RAM for a CPU run (default: this machine's).")] = None,
) -> None:
    """Estimate peak GPU memory before loading any weight: where it goes, whether it fits, what to change."""
    from rich.console import Console

    from grpo_cli.plan.fit import plan_recipe
    from grpo_cli.plan.view import budget_notes, plan_json, print_plan
    from grpo_cli.recipe.validation import load_recipe

    with user_errors():
        loaded = load_recipe(recipe, overrides, scope="plan")
        result, suggestions, gpu_label = plan_recipe(loaded, gpu, device, ram)
    notes = budget_notes(loaded)
    if as_json:
        typer.echo(json.dumps(plan_json(result, suggestions, gpu_label, notes), indent=2))
    else:
        print_plan(Console(soft_wrap=False), result, suggestions, gpu_label, _train_command(recipe, overrides), notes)


@app.command(
    epilog=examples("grpo preflight recipes/demo.yaml", "grpo preflight recipes/qwen2.5/0.5b_lora.yaml --gpu 24GB --json"))
def preflight(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    steps: Annotated[int, typer.Option("--steps", min=2, help="Real training steps to measure (the last one "
                                       "measures the peak).")] = 2,
    prompts: Annotated[Optional[int], typer.Option("--prompts", min=1, help="Prompts to sample for the learning "
                                                   "signal (default: 8 groups and 64 completions at least).")] = None,
    gpu: Annotated[Optional[str], typer.Option("--gpu", help="GPU memory (16GB) or name for the fit verdict.")] = None,
    hours: Annotated[float, typer.Option("--hours", min=0.01, help="Advise when the run would take longer.")] = 24.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Measure, in about a minute on this machine, whether the recipe fits, how long it takes, and whether it can learn."""
    from rich.console import Console

    from grpo_cli.preflight.run import run_preflight
    from grpo_cli.progress import PhaseLines
    from grpo_cli.preflight.view import preflight_json, print_preflight
    from grpo_cli.quiet import quiet_libraries
    from grpo_cli.recipe.validation import load_recipe

    console = Console(stderr=True)
    with user_errors():
        loaded = load_recipe(recipe, overrides, scope="preflight")
        quiet_libraries()
        with PhaseLines(console, "loading the model...") as show:
            result = run_preflight(loaded, steps, prompts, gpu, hours, show=show)
    if as_json:
        typer.echo(json.dumps(preflight_json(result), indent=2))
    else:
        print_preflight(Console(soft_wrap=False), result, _train_command(recipe, overrides))


def _train_command(recipe: Path, overrides: list[str] | None) -> str:
    """The user's own `grpo train` line, which suggestions and advice extend with their overrides."""
    return " ".join(["grpo train", str(recipe), *(overrides or [])])


RunDirArg = Annotated[Path, typer.Argument(help="Run directory written by `grpo train`.", show_default=False)]


@app.command(
    "eval",
    epilog=examples("grpo eval recipes/qwen2.5/0.5b_lora.yaml --limit 200|the base model",
                    "grpo eval --run runs/qwen2.5-0.5b-lora|the trained adapter or model",
                    "grpo eval --compare runs/qwen2.5-0.5b-lora --limit 500|base and trained on the same problems",
                    "grpo eval --compare runs/b --base runs/a/eval/chat-test/base|reuse a base evaluation, same settings",
                    "grpo eval --model HuggingFaceTB/SmolLM2-135M-Instruct --protocol lm-eval --data gsm8k/test.jsonl"))
def evaluate(
    recipe: Annotated[Optional[Path], typer.Argument(help="Recipe YAML (optional with --run, --compare or --model).",
                                                     show_default=False)] = None,
    overrides: OverridesArg = None,
    run: Annotated[Optional[Path], typer.Option("--run", help="Evaluate the trained model of this run (or RUN/checkpoint-N).")] = None,
    compare_run: Annotated[Optional[Path], typer.Option("--compare", help="Evaluate base and trained of this run (or RUN/checkpoint-N).")] = None,
    base_dir: Annotated[Optional[Path], typer.Option(
        "--base", help="With --compare: reuse (and continue) this base evaluation; its settings must match.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Model hub id, directory or .gguf file.")] = None,
    adapter: Annotated[Optional[Path], typer.Option("--adapter", help="LoRA adapter directory on top of the model.")] = None,
    data: Annotated[Optional[str], typer.Option("--data", help="openai/gsm8k, a GSM8K-format .jsonl, or generated.")] = None,
    split: Annotated[Optional[str], typer.Option("--split", help="Dataset split (default test).")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="First N problems only.")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Prompts per generation batch.")] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option("--max-new-tokens", help="Generation budget.")] = None,
    protocol: Annotated[Optional[str], typer.Option("--protocol", help="chat (default) or lm-eval.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", help="Results directory (rerun it to continue).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """GSM8K held-out accuracy of a base model or a trained run, with intervals; resumable."""
    from rich.console import Console

    from grpo_cli.eval.command import EvalRequest, run_eval
    from grpo_cli.eval.view import EvalDisplay, outcome_json, print_outcome

    overrides = list(overrides or [])
    if recipe is not None and "=" in str(recipe) and not recipe.exists():  # only overrides were given
        recipe, overrides = None, [str(recipe), *overrides]
    options = {"eval.source": data, "eval.split": split, "eval.limit": limit, "eval.batch_size": batch_size,
               "eval.max_new_tokens": max_new_tokens, "eval.protocol": protocol}
    request = EvalRequest(recipe, overrides, run, compare_run, base_dir, model, adapter, options, output)
    console = Console(stderr=as_json)
    with user_errors():
        outcome = run_eval(request, EvalDisplay(console))
    if as_json:
        typer.echo(json.dumps(outcome_json(outcome), indent=2))
    else:
        print_outcome(console, outcome)


@app.command(epilog=examples("grpo report runs/demo", "grpo report runs/demo --output demo.png"))
def report(
    run_dir: RunDirArg,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="PNG path (default RUN_DIR/report.png).")] = None,
) -> None:
    """Plot a run's reward (total and per reward), KL and completion length against step."""
    from grpo_cli.runs.report import plot_run

    with user_errors():
        written = plot_run(run_dir, output, warn=lambda line: typer.echo(line, err=True))
    typer.echo(f"wrote {written}")


@app.command(epilog=examples("grpo export runs/demo --merge merged/demo"))
def export(
    run_dir: RunDirArg,
    merge: Annotated[Path, typer.Option("--merge", help="Write the base model with the LoRA adapter merged in here.")],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output directory.")] = False,
) -> None:
    """Write a standalone model directory from a LoRA or QLoRA run."""
    from grpo_cli.runs.export import merge_lora_run

    with user_errors():
        written = merge_lora_run(run_dir, merge, force)
    typer.echo(f"wrote merged model to {written}")


@app.command(epilog=examples("grpo schema > grpo-recipe.schema.json", "grpo schema --output .vscode/grpo.schema.json"))
def schema(
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the recipe JSON schema, for editor completion and checking."""
    from grpo_cli.files import check_writable_file
    from grpo_cli.recipe.schema import Recipe

    text = json.dumps(Recipe.model_json_schema(), indent=2)
    if output is None:
        typer.echo(text)
        return
    with user_errors():
        check_writable_file(output)
        output.write_text(text + "\n", encoding="utf-8")
    typer.echo(f"wrote {output}", err=True)
