"""`grpo report` draws a run's stages: the warm-up's supervised loss, when the run had one, above GRPO's curves."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from grpo_cli.cli import app


def write_metrics(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def grpo_rows():
    return [{"step": s, "reward": 0.1 * s, "completions/mean_length": 20.0 + s} for s in (1, 2, 3)]


def test_a_run_with_a_warm_up_gets_the_warm_up_loss_panel(tmp_path):
    import matplotlib.image

    from grpo_cli.runs.report import _warmup_losses

    plain, warmed = tmp_path / "plain", tmp_path / "warmed"
    write_metrics(plain, grpo_rows())
    write_metrics(warmed, grpo_rows())
    write_metrics(warmed / "warmup", [{"step": 1, "loss": 0.6}, {"step": 2, "loss": 0.4}, {"step": 3, "loss": None}])
    assert _warmup_losses(plain) == [] and _warmup_losses(warmed) == [(1, 0.6), (2, 0.4)]
    for run in (plain, warmed):
        result = CliRunner().invoke(app, ["report", str(run)])
        assert result.exit_code == 0, result.output
    heights = [matplotlib.image.imread(run / "report.png").shape[0] for run in (plain, warmed)]
    assert heights[1] > heights[0]  # one more panel, drawn above the reward and length panels
