"""`grpo eval`: a model (`model`), a trained run (`run`), base against trained (`compare`) and every checkpoint
(`curve`), on GSM8K or on the recipe's own task. Each subcommand takes a handful of options; every other evaluation
setting is an `eval.*` override (eval.split=train, eval.batch_size=16, eval.max_new_tokens=256, eval.top_p=0.9,
eval.seed=1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.eval_legacy import EvalGroup
from grpo_cli.cli.parts import OverridesArg, examples, own_process, user_errors
from grpo_cli.cli.root import app

eval_app = typer.Typer(
    cls=EvalGroup,
    no_args_is_help=True,
    help="Accuracy of a model or a trained run on held-out problems (GSM8K, or the recipe's own task with "
    "--protocol task), with 95% intervals; resumable; greedy or sampled. Any eval.* setting is a KEY=VALUE override.",
)
app.add_typer(eval_app, name="eval")

RunDirArg = Annotated[
    Path, typer.Argument(help="Run directory written by `grpo train` (or one of its checkpoint-N).", show_default=False)
]
RecipeOption = Annotated[
    Path | None, typer.Option("--recipe", help="Evaluate with this recipe instead of the one the run saved.")
]
BaseOption = Annotated[
    Path | None, typer.Option("--base", help="Reuse (and continue) this base evaluation; same settings.")
]
DataOption = Annotated[
    str | None, typer.Option("--data", help="openai/gsm8k, a GSM8K-format .jsonl, generated, or the task's file.")
]
LimitOption = Annotated[int | None, typer.Option("--limit", help="First N problems only.")]
ProtocolOption = Annotated[
    str | None, typer.Option("--protocol", help="chat (default), lm-eval, or task (the recipe's data and verifiers).")
]
SamplesOption = Annotated[
    int | None,
    typer.Option("--samples", help="Sampled completions per problem: mean@N, pass@N, maj@N (needs --temperature)."),
]
TemperatureOption = Annotated[
    float | None, typer.Option("--temperature", help="Sample at this temperature (default: greedy).")
]
OutputOption = Annotated[Path | None, typer.Option("--output", help="Results directory (rerun it to continue).")]
EngineOption = Annotated[
    str,
    typer.Option(
        "--engine", help="Generation engine: auto (vLLM when it is installed and can run), vllm or transformers."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]


def _evaluate(ctx: typer.Context, as_json: bool, flags: tuple, overrides: list[str] | None, **request) -> None:
    """One evaluation request, run with its progress on the console; its outcome printed or as JSON. `flags`: the
    options that set `eval:` keys (--data, --limit, --protocol, --samples, --temperature), in that order."""
    from rich.console import Console

    from grpo_cli.eval.command import EvalRequest, run_eval
    from grpo_cli.eval.view import EvalDisplay, outcome_json, print_outcome

    keys = ("eval.source", "eval.limit", "eval.protocol", "eval.samples", "eval.temperature")
    request.update(options=dict(zip(keys, flags)), overrides=list(overrides or []), own_process=own_process(ctx))
    console = Console(stderr=as_json)
    with user_errors(as_json):
        outcome = run_eval(EvalRequest(**request), EvalDisplay(console))
    if as_json:
        typer.echo(json.dumps(outcome_json(outcome), indent=2))
    else:
        print_outcome(console, outcome)


@eval_app.command(
    "model",
    epilog=examples(
        "grpo eval model recipes/qwen2.5/0.5b_lora.yaml --limit 200|the recipe's model, before training",
        "grpo eval model --model HuggingFaceTB/SmolLM2-135M-Instruct --protocol lm-eval --data gsm8k/test.jsonl",
        "grpo eval model recipes/qwen2.5/0.5b_lora.yaml --engine transformers|without vLLM although it is installed",
        "grpo eval model recipes/demo.yaml eval.split=train eval.max_new_tokens=128|any eval.* key as an override",
    ),
)
def eval_model(
    ctx: typer.Context,
    recipe: Annotated[
        Path | None, typer.Argument(help="Recipe YAML (optional with --model).", show_default=False)
    ] = None,
    overrides: OverridesArg = None,
    model: Annotated[str | None, typer.Option("--model", help="Model hub id, directory or .gguf file.")] = None,
    adapter: Annotated[
        Path | None, typer.Option("--adapter", help="LoRA adapter directory on top of the model.")
    ] = None,
    data: DataOption = None,
    limit: LimitOption = None,
    protocol: ProtocolOption = None,
    samples: SamplesOption = None,
    temperature: TemperatureOption = None,
    output: OutputOption = None,
    engine: EngineOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """A model as it is: the recipe's, or --model's, with --adapter on top."""
    if recipe is not None and "=" in str(recipe) and not recipe.exists():  # only overrides were given
        recipe, overrides = None, [str(recipe), *(overrides or [])]
    flags = (data, limit, protocol, samples, temperature)
    _evaluate(ctx, as_json, flags, overrides, recipe=recipe, model=model, adapter=adapter, output=output, engine=engine)


@eval_app.command(
    "run",
    epilog=examples(
        "grpo eval run runs/qwen2.5-0.5b-lora|the trained adapter or model",
        "grpo eval run runs/my/checkpoint-50 --limit 300|one checkpoint",
    ),
)
def eval_run(
    ctx: typer.Context,
    run_dir: RunDirArg,
    overrides: OverridesArg = None,
    recipe: RecipeOption = None,
    data: DataOption = None,
    limit: LimitOption = None,
    protocol: ProtocolOption = None,
    samples: SamplesOption = None,
    temperature: TemperatureOption = None,
    output: OutputOption = None,
    engine: EngineOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """The model a run trained (its final model, or RUN/checkpoint-N)."""
    flags = (data, limit, protocol, samples, temperature)
    _evaluate(ctx, as_json, flags, overrides, recipe=recipe, run=run_dir, output=output, engine=engine)


@eval_app.command(
    "compare",
    epilog=examples(
        "grpo eval compare runs/qwen2.5-0.5b-lora --limit 500|base and trained on the same problems",
        "grpo eval compare runs/b --base runs/a/eval/chat-test/base|reuse a base evaluation, same settings",
        "grpo eval compare runs/my --samples 8 --temperature 0.7|mean@8, pass@8 and maj@8, paired",
    ),
)
def eval_compare(
    ctx: typer.Context,
    run_dir: RunDirArg,
    overrides: OverridesArg = None,
    recipe: RecipeOption = None,
    base_dir: BaseOption = None,
    data: DataOption = None,
    limit: LimitOption = None,
    protocol: ProtocolOption = None,
    samples: SamplesOption = None,
    temperature: TemperatureOption = None,
    output: OutputOption = None,
    engine: EngineOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """The base model and the run's trained model on the same problems, paired: the difference with its interval."""
    flags = (data, limit, protocol, samples, temperature)
    request = dict(recipe=recipe, compare_run=run_dir, base_dir=base_dir, output=output, engine=engine)
    _evaluate(ctx, as_json, flags, overrides, **request)


@eval_app.command(
    "curve",
    epilog=examples(
        "grpo eval curve runs/my --limit 300|accuracy at every checkpoint: curve.jsonl and curve.png",
        "grpo eval curve runs/b --base runs/a/eval/chat-test/base|its step 0 from an earlier base evaluation",
    ),
)
def eval_curve(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="Run directory written by `grpo train`.", show_default=False)],
    overrides: OverridesArg = None,
    recipe: RecipeOption = None,
    base_dir: BaseOption = None,
    data: DataOption = None,
    limit: LimitOption = None,
    protocol: ProtocolOption = None,
    samples: SamplesOption = None,
    temperature: TemperatureOption = None,
    output: OutputOption = None,
    engine: EngineOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """The base model, every checkpoint and the final model of a run: accuracy against step."""
    flags = (data, limit, protocol, samples, temperature)
    request = dict(recipe=recipe, checkpoints_run=run_dir, base_dir=base_dir, output=output, engine=engine)
    _evaluate(ctx, as_json, flags, overrides, **request)
