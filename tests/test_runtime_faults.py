"""Run-time faults, one class per test, driven through the real CLI on a tiny model: the exit code, one line that
names the cause, no traceback, and nothing the user had is changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from rewards.gsm8k_task import generate_problems

runner = CliRunner()

REWARDS = """
import math, time

def generator(prompts=None, completions=None, **kw):
    return (float(len(c[0]["content"]) % 3) for c in completions)

def no_return(prompts=None, completions=None, **kw):
    [0.0 for c in completions]

def wrong_count(prompts=None, completions=None, **kw):
    return [1.0]

def strings(prompts=None, completions=None, **kw):
    return ["high" for c in completions]

def half_nan(prompts=None, completions=None, **kw):
    return [math.nan if i % 2 else float(len(c[0]["content"]) % 3) for i, c in enumerate(completions)]

def fails_on_step_2(prompts=None, completions=None, trainer_state=None, **kw):
    if trainer_state.global_step >= 1:
        raise RuntimeError("lookup table missing")
    return [float(len(c[0]["content"]) % 3) for c in completions]

def slow(prompts=None, completions=None, **kw):
    time.sleep(30)
    return [0.0 for c in completions]
"""


def reward_recipe(tmp_path: Path, model: Path, name: str, **sections) -> Path:
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    spec = {"name": f"{tmp_path / 'my_rewards.py'}:{name}", **sections.pop("spec", {})}
    return write_recipe(tmp_path, model, rewards=[spec], **sections)


def train(recipe: Path, *args: str):
    return runner.invoke(app, ["train", str(recipe), *args])


# ---------------------------------------------------------------- rewards that misbehave


@pytest.mark.slow  # real training steps
def test_a_generator_reward_trains(tmp_path, tiny_llama):
    result = train(reward_recipe(tmp_path, tiny_llama, "generator"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "final").is_dir()


@pytest.mark.parametrize(
    "name, words",
    [
        ("no_return", ["my_rewards.py:no_return`", "returned None", "step 1"]),
        ("wrong_count", ["my_rewards.py:wrong_count`", "returned 1 values", "step 1"]),
        ("strings", ["my_rewards.py:strings`", "'high'", "step 1"]),
    ],
)
@pytest.mark.slow  # real training steps
def test_a_reward_returning_the_wrong_thing_is_named(tmp_path, tiny_llama, name, words):
    fails_cleanly(train(reward_recipe(tmp_path, tiny_llama, name)), *words)
    assert not (tmp_path / "run" / "final").exists()


@pytest.mark.slow  # real training steps
def test_nan_rewards_are_not_judged_and_warned(tmp_path, tiny_llama):
    result = train(reward_recipe(tmp_path, tiny_llama, "half_nan"))
    assert result.exit_code == 0, result.output
    unwrapped = "".join(result.output.split())  # the console wraps the long reward path anywhere
    assert "my_rewards.py:half_nan`returnedNaNorinfinity" in unwrapped, result.output


@pytest.mark.slow  # real training steps
def test_a_reward_raising_later_keeps_the_finished_steps(tmp_path, tiny_llama):
    recipe = reward_recipe(tmp_path, tiny_llama, "fails_on_step_2", training={"save_steps": 100, "max_steps": 3})
    line = fails_cleanly(train(recipe), "my_rewards.py:fails_on_step_2`", "step 2", "lookup table missing", "--resume")
    assert "checkpoint-1" in line
    state = json.loads((tmp_path / "run" / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1


@pytest.mark.slow  # real training steps
def test_a_reward_past_its_time_limit_stops_the_run(tmp_path, tiny_llama):
    recipe = reward_recipe(tmp_path, tiny_llama, "slow", spec={"timeout_s": 0.5})
    fails_cleanly(train(recipe), "my_rewards.py:slow`", "timeout_s", "step 1")


# ---------------------------------------------------------------- checkpoints and resume


@pytest.mark.slow  # real training steps
def test_resume_skips_a_checkpoint_whose_save_was_interrupted(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama, lora={"r": 4, "dropout": 0.0}, training={"max_steps": 2})
    assert train(recipe).exit_code == 0
    run = tmp_path / "run"
    shutil.rmtree(run / "final")
    (run / "checkpoint-2" / "trainer_state.json").unlink()  # what a second Ctrl-C during the save leaves
    weights = run / "checkpoint-1" / "adapter_model.safetensors"
    resumed = train(recipe, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert (
        "skipped checkpoint-2: no trainer_state.json" in resumed.output
        and "resuming from checkpoint-1" in resumed.output
    )
    assert (run / "final").is_dir()

    shutil.rmtree(run / "final")
    for folder in ("checkpoint-2", "checkpoint-1"):
        target = run / folder / "adapter_model.safetensors"
        target.write_bytes(target.read_bytes()[:-100])  # cut short
    fresh = train(recipe, "--resume")  # nothing whole is left: one way out, start again
    assert fresh.exit_code == 0, fresh.output
    assert "is cut short" in fresh.output and "starting from step 0" in fresh.output
    assert weights.parent.is_dir()


@pytest.mark.slow  # real training steps
def test_resume_refuses_a_changed_adapter_shape_before_loading(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama, lora={"r": 4, "dropout": 0.0}, training={"max_steps": 4})
    assert train(recipe, "training.max_steps=1").exit_code == 0
    shutil.rmtree(tmp_path / "run" / "final")
    fails_cleanly(train(recipe, "--resume", "lora.r=8"), "lora.r", "lora.r=4", "8")


@pytest.mark.slow  # real training steps
def test_a_run_that_never_saved_starts_again_either_way(tmp_path, tiny_llama):
    recipe = reward_recipe(tmp_path, tiny_llama, "no_return")
    fails_cleanly(train(recipe), "returned None")  # the run directory exists, without any checkpoint
    fixed = write_recipe(tmp_path, tiny_llama, training={"max_steps": 1})
    for args in ([], ["--resume"]):
        result = train(fixed, *args)
        assert result.exit_code == 0, result.output
        assert "starting from step 0" in result.output or not args
        shutil.rmtree(tmp_path / "run" / "final")
        for checkpoint in (tmp_path / "run").glob("checkpoint-*"):
            shutil.rmtree(checkpoint)


@pytest.mark.slow  # real training steps
def test_another_recipes_damaged_run_is_kept_and_refused(tmp_path, tiny_llama):
    """A folder holding another recipe's run whose only checkpoint is damaged: nothing in it is deleted or rewritten."""
    run = tmp_path / "run"
    checkpoint = run / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    header = json.dumps({"lora_A": {"dtype": "F32", "shape": [100], "data_offsets": [0, 400]}}).encode()
    (checkpoint / "adapter_model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(100))
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (checkpoint / "optimizer.pt").write_bytes(b"state")
    write_jsonl([{"step": 1, "reward": 0.25}, {"step": 2, "reward": 0.5}], run / "metrics.jsonl")
    (run / "recipe.yaml").write_text(f"model: {{name: {tiny_llama}}}\ndata: {{source: generated}}\n")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}

    recipe = write_recipe(tmp_path, tiny_llama)
    for args in ([], ["--resume"]):
        fails_cleanly(train(recipe, *args), str(run), "another recipe", "checkpoint-2", "cut short", "name=")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


# ---------------------------------------------------------------- data that cannot train or score


@pytest.mark.slow  # real training steps
def test_rows_without_a_number_are_left_out_and_too_few_are_refused(tmp_path, tiny_llama):
    rows = generate_problems(6) + [{"question": "", "answer": "#### 3"}, {"question": "How many?", "answer": "lots"}]
    data = write_jsonl(rows, tmp_path / "train.jsonl")
    recipe = write_recipe(tmp_path, tiny_llama, data={"source": str(data), "limit": None})
    ok = train(recipe, "training.max_steps=1")
    assert ok.exit_code == 0, ok.output
    assert "left out 1 of 8 rows: `question` is empty" in ok.output and "has no number after `####`" in ok.output
    tiny = write_jsonl(rows[:1] + rows[6:], tmp_path / "tiny.jsonl")
    shutil.rmtree(tmp_path / "run")
    fails_cleanly(train(recipe, f"data.source={tiny}"), "only 1 usable prompt", "one step needs 2", "data.source")
    assert not (tmp_path / "run" / "final").exists()


def test_eval_leaves_out_problems_without_a_gold_number(tmp_path, tiny_llama):
    rows = generate_problems(3, seed=5) + [{"question": "No answer here", "answer": None}]
    data = write_jsonl(rows, tmp_path / "test.jsonl")
    result = runner.invoke(
        app,
        [
            "eval",
            "model",
            "--model",
            str(tiny_llama),
            "--data",
            str(data),
            "eval.max_new_tokens=3",
            "--output",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["results"][0]
    assert summary["problems"] == 3 and summary["data"]["unscorable"] == 1


# ---------------------------------------------------------------- output that is not ours


@pytest.mark.parametrize("content", ["a\tb\tc\n1\t2\t3\n", '{"name": "mine"}\n'])
def test_eval_never_writes_over_a_users_file(tmp_path, tiny_llama, content):
    out = tmp_path / "results"
    out.mkdir()
    (out / "predictions.jsonl").write_text(content)
    result = runner.invoke(
        app, ["eval", "model", "--model", str(tiny_llama), "--data", "generated", "--limit", "2", "--output", str(out)]
    )
    fails_cleanly(result, str(out), "--output")
    assert (out / "predictions.jsonl").read_text() == content
    assert sorted(p.name for p in out.iterdir()) == ["predictions.jsonl"]


def test_train_never_writes_into_a_folder_of_someone_elses(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    fails_cleanly(train(recipe), "notes.txt", "training.output_dir")
    fails_cleanly(train(recipe, f"training.output_dir={tmp_path / 'run' / 'notes.txt'}"), "is a file")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt"]


@pytest.mark.slow  # real training steps
def test_file_system_mistakes_are_one_line(tmp_path, tiny_llama):
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    fails_cleanly(runner.invoke(app, ["schema", "--output", str(tmp_path / "missing" / "s.json")]), "does not exist")
    fails_cleanly(runner.invoke(app, ["recipes", "cp", "demo", str(a_file / "my.yaml")]), "is a file")
    fails_cleanly(runner.invoke(app, ["recipes", "cp", "demo", str(a_file)]), "already exists", "--force")
    assert a_file.read_text() == "mine"
    recipe = write_recipe(tmp_path, tiny_llama, lora={"r": 4, "dropout": 0.0}, training={"max_steps": 1})
    assert train(recipe).exit_code == 0
    fails_cleanly(runner.invoke(app, ["export", str(tmp_path / "run"), "--merge", str(a_file)]), "is a file")
    assert a_file.read_text() == "mine"


def test_report_reads_what_a_killed_run_leaves(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    good = [json.dumps({"step": s, "reward": 0.1 * s, "completions/mean_length": 5}) for s in (1, 2, 3)]
    (run / "metrics.jsonl").write_text(
        "\n".join([good[0], "not json", json.dumps({"loss": 1}), *good[1:]]) + '\n{"step": 4, "rew'
    )
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "skipped 3 line(s)" in result.output and (run / "report.png").stat().st_size > 0


def test_a_gpu_typo_is_refused_before_any_measuring(tmp_path, tiny_llama, monkeypatch):
    import grpo_cli.preflight.sampling as sampling

    def never(*args, **kwargs):
        raise AssertionError("preflight sampled before checking --gpu")

    monkeypatch.setattr(sampling, "sample_groups", never)
    result = runner.invoke(app, ["preflight", str(write_recipe(tmp_path, tiny_llama)), "--gpu", "RTX 4009"])
    fails_cleanly(result, "unknown GPU `RTX 4009`")


def test_a_second_ctrl_c_waits_while_the_checkpoint_is_written():
    import signal

    from transformers import TrainerControl

    from grpo_cli.train.callbacks import InterruptCallback

    callback = InterruptCallback()
    callback._handle(signal.SIGINT, None)  # first: stop after this step
    control = TrainerControl()
    callback.on_step_end(None, None, control)
    assert control.should_save and callback.saving
    callback._handle(signal.SIGINT, None)  # second, during the save: waits
    with pytest.raises(KeyboardInterrupt):
        callback._handle(signal.SIGINT, None)  # third: now


def test_a_gguf_that_cannot_be_converted_is_one_line(tmp_path, monkeypatch):
    """The conversion runs in a child process (its float32 peak and the memory it frees stay out of the run's); when
    it fails, the child's last line is the message, and no cache entry is left behind."""
    from grpo_cli.errors import UserError
    from grpo_cli.models import plain_model_dir

    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(UserError, match="cannot convert") as raised:
        plain_model_dir(broken)
    assert raised.value.problems[0].path == "model.name" and "Traceback" not in str(raised.value)
    assert not any((tmp_path / "cache" / "gguf").glob("broken*"))
