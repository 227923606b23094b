"""`grpo report` draws a run's stages: the SFT stage's supervised loss, when the run had one, above GRPO's curves."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from grpo_cli.cli import app


def write_metrics(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def grpo_rows():
    return [{"step": s, "reward": 0.1 * s, "completions/mean_length": 20.0 + s} for s in (1, 2, 3)]


def test_a_run_with_an_sft_stage_gets_the_sft_loss_panel(tmp_path):
    import matplotlib.image

    from grpo_cli.runs.report import _sft_losses

    plain, with_sft = tmp_path / "plain", tmp_path / "with_sft"
    write_metrics(plain, grpo_rows())
    write_metrics(with_sft, grpo_rows())
    write_metrics(with_sft / "sft", [{"step": 1, "loss": 0.6}, {"step": 2, "loss": 0.4}, {"step": 3, "loss": None}])
    assert _sft_losses(plain) == [] and _sft_losses(with_sft) == [(1, 0.6), (2, 0.4)]
    for run in (plain, with_sft):
        result = CliRunner().invoke(app, ["report", str(run)])
        assert result.exit_code == 0, result.output
    heights = [matplotlib.image.imread(run / "report.png").shape[0] for run in (plain, with_sft)]
    assert heights[1] > heights[0]  # one more panel, drawn above the reward and length panels
