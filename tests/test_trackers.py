"""`training.report_to`: names checked at validation against transformers' trackers, a named tracker that cannot
start here refused in one line before any weight loads, and the two local trackers run for real: a 2-step `grpo
train` offline (no connection leaves the machine), then the logs read back with the tracker's own reader hold the
loss, reward and per-reward means of metrics.jsonl at both steps.

TensorBoard and trackio come with the dev extra (pyproject.toml), so CI runs both tests; an environment installed
before that skips them."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import socket
import sqlite3
import typing
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ASSETS, ROOT, fails_cleanly, write_recipe
from grpo_cli.cli import app
from grpo_cli.recipe.schema import Tracker
from grpo_cli.runs.layout import METRICS_FILE, TRL_LOGS_DIR, headline_keys
from grpo_cli.train.callbacks import TRACKED_FIGURES
from grpo_cli.train.runtime import TRACKER_MODULES

runner = CliRunner()
# A reward with variance on a tiny model's output: the loss and reward std are not all zeros.
REWARDS = [{"name": f"{ASSETS / 'varied_rewards.py'}:digit_share"}, {"name": "correctness"}]


def test_the_tracker_names_are_transformers_own():
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    assert set(typing.get_args(Tracker)) - {"none", "all"} == set(INTEGRATION_TO_CALLBACK) == set(TRACKER_MODULES)


def test_a_tracker_typo_names_the_key_and_the_valid_names(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama, training={"report_to": ["wandb", "tensorbord"]})
    line = fails_cleanly(runner.invoke(app, ["validate", str(recipe)]), "training.report_to[1]", "'tensorbord'")
    assert all(f"'{name}'" in line for name in ("none", "all", "tensorboard", "trackio", "wandb")), line
    assert f"{recipe}:" in line  # its line in the file


def test_none_and_all_stand_alone(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama)
    for names in ("[none, tensorboard]", "[wandb, all]"):
        result = runner.invoke(app, ["validate", str(recipe), f"training.report_to={names}"])
        fails_cleanly(result, "training.report_to", "stands alone")
    for names in ("none", "all", "tensorboard", "[wandb, trackio]"):
        result = runner.invoke(app, ["validate", str(recipe), f"training.report_to={names}"])
        assert result.exit_code == 0, result.output


def test_a_tracker_not_installed_is_one_line_before_the_model_loads(tmp_path, tiny_llama, monkeypatch):
    import grpo_cli.models as models

    def never(*args, **kwargs):
        raise AssertionError("the model loaded before the tracker was checked")

    monkeypatch.setattr(models, "load_model", never)
    # A tracker this environment lacks, whichever are installed here.
    missing = next(
        name
        for name, (modules, _) in TRACKER_MODULES.items()
        if modules and all(importlib.util.find_spec(m) is None for m in modules)
    )
    recipe = write_recipe(tmp_path, tiny_llama, training={"report_to": [missing]})
    line = fails_cleanly(runner.invoke(app, ["train", str(recipe)]), "training.report_to", missing, "pip install")
    assert "is not installed" in line
    assert not (tmp_path / "run").exists()


def test_the_local_trackers_name_their_extras(monkeypatch):
    from grpo_cli.errors import UserError
    from grpo_cli.train import runtime

    monkeypatch.setattr(runtime.importlib.util, "find_spec", lambda name, *args: None)  # nothing installed
    pyproject = (ROOT / "pyproject.toml").read_text()
    for name in ("tensorboard", "trackio"):
        with pytest.raises(UserError, match=re.escape(f"pip install 'grpo-cli[{name}]'")):
            runtime.check_trackers([name])
        assert f'\n{name} = ["{name}>=' in pyproject  # the extra the hint names


@pytest.fixture
def offline(monkeypatch) -> list:
    """Every attempt to reach another machine, refused and recorded (loopback stays open)."""
    attempts: list = []
    connect = socket.socket.connect

    def local_only(sock, address):
        host = address[0] if isinstance(address, tuple) else None
        if sock.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            attempts.append(address)
            raise OSError(f"tests are offline: {address}")
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)
    return attempts


def train_reporting_to(tmp_path: Path, model: Path, tracker: str, **trl) -> list[dict]:
    """Two real steps reporting to `tracker`; the rows of the run's metrics.jsonl."""
    recipe = write_recipe(tmp_path, model, rewards=REWARDS, training={"report_to": [tracker]}, trl=trl or None)
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / METRICS_FILE).read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    return rows


def assert_same_figures(rows: list[dict], logged: dict[int, dict[str, float]]) -> None:
    """At each step the tracker holds metrics.jsonl's loss and headline figures under transformers' `train/`."""
    for row in rows:
        keys = ["loss", *(key for key in headline_keys(row) if key in row)]
        assert {"loss", "reward", "rewards/digit_share/mean", "rewards/correctness/mean"} <= set(keys), keys
        for key in keys:
            value = logged[row["step"]][f"train/{key}"]
            assert math.isfinite(value), (row["step"], key, value)
            assert value == pytest.approx(row[key], rel=1e-6, abs=1e-7), (row["step"], key)  # TensorBoard: float32
    assert any(row["loss"] != 0 or row["reward_std"] != 0 for row in rows)  # figures worth comparing
    for row in rows:  # grpo's own figures too
        for key in TRACKED_FIGURES:
            assert logged[row["step"]][f"train/{key}"] == pytest.approx(row[key], rel=1e-6), (row["step"], key)


@pytest.mark.slow
def test_tensorboard_reads_the_runs_metrics(tmp_path, tiny_llama, monkeypatch, offline):
    pytest.importorskip("tensorboard", reason="pip install -e '.[dev]' installs it")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)  # else transformers writes there
    rows = train_reporting_to(tmp_path, tiny_llama, "tensorboard")
    (logs,) = (tmp_path / "run" / TRL_LOGS_DIR).iterdir()  # one folder per start: runs/<date>_<host>
    events = EventAccumulator(str(logs), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    logged: dict[int, dict[str, float]] = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            logged.setdefault(event.step, {})[tag] = event.value
    assert_same_figures(rows, logged)
    assert not offline


@pytest.mark.slow
def test_trackio_stores_the_runs_metrics_locally(tmp_path, tiny_llama, offline):
    pytest.importorskip("trackio", reason="pip install -e '.[dev]' installs it")
    from trackio import Api
    from trackio.utils import TRACKIO_DIR

    from conftest import TRACKIO_DIR as TESTS_TRACKIO_DIR

    assert TRACKIO_DIR == TESTS_TRACKIO_DIR  # trackio read the tests' folder, not ~/.cache/huggingface/trackio
    project = f"grpo-{tmp_path.name}"
    rows = train_reporting_to(tmp_path, tiny_llama, "trackio", project=project)  # `trl.project` reaches trackio
    (run,) = Api().runs(project)
    # trackio's database, read directly: its public API lists runs but does not return their history.
    with closing(sqlite3.connect(f"file:{TRACKIO_DIR / project}.db?mode=ro", uri=True)) as db:
        found = db.execute("SELECT metrics FROM metrics WHERE run_name = ?", (run.name,)).fetchall()
    # the trainer's step is inside each row; trackio's step column is its own counter
    logged = {m["train/global_step"]: m for m in map(json.loads, (text for (text,) in found)) if "train/loss" in m}
    assert_same_figures(rows, logged)
    assert not offline
