"""The commands on what training wrote: report, export (`grpo eval`: eval_commands.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.parts import examples, user_errors
from grpo_cli.cli.root import app

RunDirArg = Annotated[Path, typer.Argument(help="Run directory written by `grpo train`.", show_default=False)]


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
