"""The commands on what training wrote, or on any model: eval, report, export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.parts import OverridesArg, examples, own_process, user_errors
from grpo_cli.cli.root import app

RunDirArg = Annotated[Path, typer.Argument(help="Run directory written by `grpo train`.", show_default=False)]
SamplesOption = Annotated[
    int | None,
    typer.Option("--samples", help="Sampled completions per problem: mean@N, pass@N, maj@N (needs --temperature)."),
]
TemperatureOption = Annotated[
    float | None, typer.Option("--temperature", help="Sample at this temperature (default: greedy).")
]
CheckpointsOption = Annotated[
    Path | None,
    typer.Option("--checkpoints", help="Evaluate the base, every checkpoint and the final model of this run: a curve."),
]
BaseOption = Annotated[
    Path | None,
    typer.Option(
        "--base", help="With --compare or --checkpoints: reuse (and continue) this base evaluation; same settings."
    ),
]
EngineOption = Annotated[
    str,
    typer.Option(
        "--engine", help="Generation engine: auto (vLLM when it is installed and can run), vllm or transformers."
    ),
]


@app.command(
    "eval",
    epilog=examples(
        "grpo eval recipes/qwen2.5/0.5b_lora.yaml --limit 200|the base model",
        "grpo eval --run runs/qwen2.5-0.5b-lora|the trained adapter or model",
        "grpo eval --compare runs/qwen2.5-0.5b-lora --limit 500|base and trained on the same problems",
        "grpo eval --compare runs/b --base runs/a/eval/chat-test/base|reuse a base evaluation, same settings",
        "grpo eval --model HuggingFaceTB/SmolLM2-135M-Instruct --protocol lm-eval --data gsm8k/test.jsonl",
        "grpo eval recipes/qwen2.5/0.5b_lora.yaml --engine transformers|without vLLM although it is installed",
        "grpo eval --compare runs/my --samples 8 --temperature 0.7|mean@8, pass@8 and maj@8, paired",
        "grpo eval --checkpoints runs/my --limit 300|accuracy at every checkpoint: curve.jsonl and curve.png",
    ),
)
def evaluate(
    ctx: typer.Context,
    recipe: Annotated[
        Path | None, typer.Argument(help="Recipe YAML (optional with --run, --compare or --model).", show_default=False)
    ] = None,
    overrides: OverridesArg = None,
    run: Annotated[
        Path | None, typer.Option("--run", help="Evaluate the trained model of this run (or RUN/checkpoint-N).")
    ] = None,
    compare_run: Annotated[
        Path | None, typer.Option("--compare", help="Evaluate base and trained of this run (or RUN/checkpoint-N).")
    ] = None,
    checkpoints_run: CheckpointsOption = None,
    base_dir: BaseOption = None,
    model: Annotated[str | None, typer.Option("--model", help="Model hub id, directory or .gguf file.")] = None,
    adapter: Annotated[
        Path | None, typer.Option("--adapter", help="LoRA adapter directory on top of the model.")
    ] = None,
    data: Annotated[
        str | None, typer.Option("--data", help="openai/gsm8k, a GSM8K-format .jsonl, or generated.")
    ] = None,
    split: Annotated[str | None, typer.Option("--split", help="Dataset split (default test).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="First N problems only.")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Prompts per generation batch.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", help="Generation budget.")] = None,
    protocol: Annotated[
        str | None,
        typer.Option("--protocol", help="chat (default), lm-eval, or task (the recipe's own data and verifiers)."),
    ] = None,
    samples: SamplesOption = None,
    temperature: TemperatureOption = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="Nucleus sampling mass (default 1.0).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the sampled completions (default 0).")] = None,
    output: Annotated[Path | None, typer.Option("--output", help="Results directory (rerun it to continue).")] = None,
    engine: EngineOption = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """GSM8K held-out accuracy of a base model or a trained run, with intervals; resumable; greedy or sampled."""
    from rich.console import Console

    from grpo_cli.eval.command import EvalRequest, run_eval
    from grpo_cli.eval.view import EvalDisplay, outcome_json, print_outcome

    overrides = list(overrides or [])
    if recipe is not None and "=" in str(recipe) and not recipe.exists():  # only overrides were given
        recipe, overrides = None, [str(recipe), *overrides]
    options = {
        "eval.source": data,
        "eval.split": split,
        "eval.limit": limit,
        "eval.batch_size": batch_size,
        "eval.max_new_tokens": max_new_tokens,
        "eval.protocol": protocol,
        "eval.samples": samples,
        "eval.temperature": temperature,
        "eval.top_p": top_p,
        "eval.seed": seed,
    }
    request = EvalRequest(
        recipe, overrides, run, compare_run, base_dir, model, adapter, options, output, engine, own_process(ctx)
    )
    request.checkpoints_run = checkpoints_run
    console = Console(stderr=as_json)
    with user_errors(as_json):
        outcome = run_eval(request, EvalDisplay(console))
    if as_json:
        typer.echo(json.dumps(outcome_json(outcome), indent=2))
    else:
        print_outcome(console, outcome)


@app.command(
    epilog=examples(
        "grpo report runs/demo", "grpo report runs/demo --output demo.png", "grpo report trl_out/checkpoint-500"
    )
)
def report(
    run_dir: Annotated[
        Path, typer.Argument(help="Run directory of `grpo train`, or a folder with TRL's trainer_state.json.")
    ],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="PNG path (default RUN_DIR/report.png).")
    ] = None,
) -> None:
    """Plot a run's reward (total and per reward), KL and completion length against step, and list the health
    signatures it shows (docs/health.md): a run that stopped learning or started gaming, and what to change."""
    from grpo_cli.runs.report import report_run

    with user_errors():
        written, alarms = report_run(run_dir, output, warn=lambda line: typer.echo(line, err=True))
    for alarm in alarms or []:
        typer.echo(alarm.line())
    if alarms is not None:
        typer.echo(f"health: {len(alarms)} signature(s) sounded" if alarms else "health: no signature sounded")
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
