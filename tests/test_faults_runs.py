"""What a finished run or evaluation meets on disk, driven through the real CLI on a tiny model: weights cut short, a
run's own recipe.yaml that no longer parses, a read-only evaluation folder, a name longer than the file system
allows, evaluation records of other problems than the data holds, a folder another grpo process is writing. Each is
one line naming the file, exit 2, no traceback, and nothing the user had is changed."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app

runner = CliRunner()
EVAL = ["--data", "generated", "--limit", "2", "eval.max_new_tokens=4"]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_llama) -> Path:
    """A finished two-step LoRA run with a checkpoint at each step; tests damage copies of it."""
    root = tmp_path_factory.mktemp("lora-run")
    recipe = write_recipe(root, tiny_llama, lora={"r": 4, "dropout": 0.0}, training={"max_steps": 2})
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    return root


def copy_of(run_root: Path, tmp_path: Path) -> Path:
    """The run (and the recipe beside it) copied to `tmp_path`; the recipe then points at the copy."""
    shutil.copytree(run_root, tmp_path, dirs_exist_ok=True)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace(str(run_root / "run"), str(tmp_path / "run")))
    return tmp_path / "run"


def cut_short(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


@pytest.mark.slow  # real training steps
def test_a_cut_short_adapter_in_a_checkpoint_is_named_by_eval(tmp_path, lora_run):
    run_dir = copy_of(lora_run, tmp_path)
    cut_short(run_dir / "checkpoint-1" / "adapter_model.safetensors")
    result = runner.invoke(app, ["eval", "run", str(run_dir / "checkpoint-1"), *EVAL])
    line = fails_cleanly(result, "checkpoint-1/adapter_model.safetensors", "cut short")
    assert f"grpo eval run {run_dir}/checkpoint-N" in line
    assert not (run_dir / "eval").exists()


@pytest.mark.slow  # real training steps
def test_a_cut_short_adapter_is_named_by_export_and_nothing_is_written(tmp_path, lora_run):
    run_dir = copy_of(lora_run, tmp_path)
    cut_short(run_dir / "final" / "adapter_model.safetensors")
    result = runner.invoke(app, ["export", str(run_dir), "--merge", str(tmp_path / "merged")])
    fails_cleanly(result, "final/adapter_model.safetensors", "cut short", "restore it")
    assert not (tmp_path / "merged").exists()
    evaluated = runner.invoke(app, ["eval", "run", str(run_dir), *EVAL])  # the finished model, as eval reads it
    fails_cleanly(evaluated, "final/adapter_model.safetensors", "cut short")


@pytest.mark.parametrize(
    "text, words",
    [
        ("name: [cut\nmodel: {name: x", ["does not parse (line 2)", "expected"]),
        ("- a\n- list\n", ["holds a list, not a recipe"]),
    ],
)
@pytest.mark.slow  # real training steps
def test_a_runs_own_recipe_that_no_longer_parses_is_named_on_resume(tmp_path, lora_run, text, words):
    run_dir = copy_of(lora_run, tmp_path)
    (run_dir / "recipe.yaml").write_text(text)
    before = sorted(p.name for p in run_dir.iterdir())
    result = runner.invoke(app, ["train", str(tmp_path / "recipe.yaml"), "--resume"])
    line = fails_cleanly(result, f"{run_dir / 'recipe.yaml'}: ", *words, "restore it")
    assert line.startswith(str(run_dir / "recipe.yaml"))
    assert sorted(p.name for p in run_dir.iterdir()) == before and (run_dir / "recipe.yaml").read_text() == text


def test_rerunning_a_finished_evaluation_in_a_read_only_folder_is_one_line(tmp_path, tiny_llama):
    out = tmp_path / "eval"
    command = ["eval", "model", "--model", str(tiny_llama), *EVAL, "--output", str(out), "model.dtype=float32"]
    first = runner.invoke(app, command)
    assert first.exit_code == 0, first.output
    saved = {p.name: p.read_bytes() for p in out.iterdir()}
    code, output = rerun_read_only(out, command)
    assert code == 2 and "Traceback" not in output, output
    line = output.strip().splitlines()[-1]
    assert str(out) in line and "read-only" in line and "another --output" in line, line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == saved


def rerun_read_only(folder: Path, command: list[str]) -> tuple[int, str]:
    """`grpo COMMAND` with `folder` read-only: by chmod, or for root (whose writes chmod does not stop) through a
    read-only bind mount of it in a private mount namespace, where the kernel refuses every write (EROFS)."""
    if os.geteuid() != 0:
        for path in [*folder.iterdir(), folder]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            result = runner.invoke(app, command)
        finally:
            folder.chmod(0o755)
        return result.exit_code, result.output
    mount = f"mount --bind {shlex.quote(str(folder))} {shlex.quote(str(folder))} && "
    mount += f"mount -o remount,bind,ro {shlex.quote(str(folder))}"
    namespace = ["unshare", "-m", "--propagation", "private", "sh", "-c"]
    if not shutil.which("unshare") or subprocess.run([*namespace, mount], capture_output=True).returncode:
        pytest.skip("running as root without mount namespaces: chmod does not stop root's writes")
    run = f"{mount} && exec {shlex.quote(sys.executable)} -m grpo_cli {shlex.join(command)}"
    proc = subprocess.run([*namespace, run], capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_name_longer_than_the_file_system_allows_is_one_line(tmp_path, tiny_llama, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run would go to runs/<name> here
    long = "r" * 300
    recipe = write_recipe(tmp_path, tiny_llama, training={"output_dir": None})
    trained = runner.invoke(app, ["train", str(recipe), f"name={long}"])
    fails_cleanly(trained, "training.output_dir", "(300 bytes) is longer than the file system allows")
    command = ["eval", "model", "--model", str(tiny_llama), *EVAL, "--output", str(tmp_path / long)]
    line = fails_cleanly(runner.invoke(app, command), "(300 bytes) is longer than the file system allows")
    assert len(line) < 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipe.yaml"]  # nothing was created


def test_records_of_other_problems_are_never_counted_on_resume(tmp_path, tiny_llama):
    """The data file replaced at the same path after an evaluation: its records are of other problems, so the rerun
    counts none of them and says what to do, instead of reporting the old file's results as the new one's."""
    data = tmp_path / "problems.jsonl"
    rows = [
        {"question": f"Ava has {n} apples and buys 2 more. How many now?", "answer": f"#### {n + 2}"} for n in range(4)
    ]
    write_jsonl(rows, data)
    out = tmp_path / "eval"
    command = [
        "eval",
        "model",
        "--model",
        str(tiny_llama),
        "--data",
        str(data),
        "eval.max_new_tokens=4",
        "--output",
        str(out),
    ]
    first = runner.invoke(app, [*command, "model.dtype=float32"])
    assert first.exit_code == 0, first.output
    kept = (out / "predictions.jsonl").read_bytes()
    write_jsonl(
        rows[:2] + [{"question": "Bo has 9 pens and loses 4. How many now?", "answer": "#### 5"}] + rows[3:], data
    )
    again = runner.invoke(app, [*command, "model.dtype=float32"])
    line = fails_cleanly(again, "1 of the 4 records", "other problems", "problem 2", "another --output", str(out))
    assert "delete" in line
    assert (out / "predictions.jsonl").read_bytes() == kept


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow  # real training steps
def test_a_second_process_writing_the_same_folder_is_refused_and_changes_nothing(tmp_path, lora_run, tiny_llama):
    """Two evaluations appending to one predictions file, or two runs saving into one run directory, would
    interleave their writes: while a grpo process writes a folder, another `grpo eval` or `grpo train` into it is
    refused in one line, and the folder is as it was. The lock ends with its holder."""
    from grpo_cli.files import sole_writer

    run = copy_of(lora_run, tmp_path / "copy")
    before = files_of(run)
    out = tmp_path / "eval"
    evaluation = ["eval", "model", "--model", str(tiny_llama), *EVAL, "--output", str(out), "model.dtype=float32"]
    with sole_writer(run, "grpo train"), sole_writer(out, "grpo eval"):
        resumed = runner.invoke(app, ["train", str(tmp_path / "copy" / "recipe.yaml"), "--resume"])
        fails_cleanly(resumed, str(run), "being written by another grpo process")
        evaluated = runner.invoke(app, evaluation)
        fails_cleanly(evaluated, str(out), "being written by another grpo process", "another output folder")
        assert list(out.iterdir()) == []
    assert files_of(run) == before
    assert not out.exists()  # made by the lock, left empty: removed again
    assert runner.invoke(app, evaluation).exit_code == 0


def test_a_killed_writer_leaves_no_stale_lock(tmp_path):
    """The lock is the kernel's: a process killed with SIGKILL while it writes leaves the folder free at once."""
    from grpo_cli.errors import UserError
    from grpo_cli.files import sole_writer

    folder = tmp_path / "run"
    hold = (
        "import sys, time\nfrom pathlib import Path\nfrom grpo_cli.files import sole_writer\n"
        f"with sole_writer(Path({str(folder)!r}), 'grpo train'):\n    print('held', flush=True)\n    time.sleep(120)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match="being written by another grpo process"), sole_writer(folder, "grpo train"):
            pass
    finally:
        holder.kill()
        holder.wait()
    with sole_writer(folder, "grpo train"):
        assert folder.is_dir()


def test_a_file_system_without_locks_runs_the_command_unguarded(tmp_path, monkeypatch):
    """Some network mounts refuse flock (ENOLCK): the command runs as it did before the lock, without a traceback."""
    import errno
    import fcntl

    from grpo_cli.files import sole_writer

    def no_locks(*_):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    ran = []
    with sole_writer(tmp_path / "run", "grpo train"):
        ran.append((tmp_path / "run").is_dir())
    assert ran == [True]


@pytest.mark.slow  # real training steps
def test_a_checkpoint_holding_only_its_adapter_config_is_skipped_by_the_curve(tmp_path, lora_run):
    """An interrupted save can leave adapter_config.json without the weights: `--checkpoints` skips that checkpoint
    with a warning naming it and draws the others."""
    run_dir = copy_of(lora_run, tmp_path)
    checkpoint = run_dir / "checkpoint-2"
    for file in checkpoint.iterdir():
        if file.name != "adapter_config.json":
            file.unlink()
    out = tmp_path / "curve"
    result = runner.invoke(app, ["eval", "curve", str(run_dir), *EVAL, "--output", str(out)])
    assert result.exit_code == 0, result.output
    said = "".join(result.output.split())  # the console wraps long lines, even inside a long path
    assert f"{checkpoint}skipped" in said and "adapter_model.safetensorsismissing" in said
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [(row["step"], row["model"]) for row in curve] == [(0, "base"), (1, "checkpoint-1"), (2, "final")]
    evaluated = runner.invoke(app, ["eval", "run", str(checkpoint), *EVAL])  # asked for by name: refused
    fails_cleanly(
        evaluated, "checkpoint-2/adapter_model.safetensors", "is missing", f"grpo eval run {run_dir}/checkpoint-N"
    )


@pytest.mark.slow  # real training steps
def test_a_cut_adapter_config_is_named_by_export_before_the_base_model_loads(tmp_path, lora_run, monkeypatch):
    import transformers

    def never(*args, **kwargs):
        raise AssertionError("the base model loaded before the adapter was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    run_dir = copy_of(lora_run, tmp_path)
    cut_short(run_dir / "final" / "adapter_config.json")
    result = runner.invoke(app, ["export", str(run_dir), "--merge", str(tmp_path / "merged")])
    fails_cleanly(result, "final/adapter_config.json", "cut short", "restore it")
    assert not (tmp_path / "merged").exists()


def write_metrics(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_report_draws_metrics_with_wrongly_typed_values_and_names_them(tmp_path):
    run = tmp_path / "run"
    write_metrics(
        run / "metrics.jsonl",
        [
            {"step": 1, "reward": 0.1, "completions/mean_length": 5, "peak_memory_kind": "cpu_peak_rss"},
            {"step": "2", "reward": 0.2, "completions/mean_length": 5},
            {"step": 3, "reward": [1], "kl": "x", "completions/mean_length": {"a": 1}},
            {"step": True, "reward": 0.3},
            {"step": 4, "reward": "0.4", "rewards/correctness/mean": None, "completions/mean_length": 6},
        ],
    )
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "skipped 2 line(s)" in result.output and "whose step is not a whole number" in result.output
    assert "not numbers" in result.output and "(completions/mean_length, kl, reward)" in result.output
    assert (run / "report.png").stat().st_size > 0


def test_report_of_a_run_stopped_in_its_sft_stage_draws_the_sft_loss(tmp_path):
    run = tmp_path / "run"
    write_metrics(run / "sft" / "metrics.jsonl", [{"step": 1, "loss": 0.7}, {"step": 2, "loss": 0.5}])
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "logged no GRPO step yet" in result.output and (run / "report.png").stat().st_size > 0
    (run / "metrics.jsonl").write_text('{"step": 1, "rew')  # GRPO's first line, cut by a kill
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    fails_cleanly(runner.invoke(app, ["report", str(tmp_path / "empty")]), "metrics.jsonl not found")


@pytest.mark.slow  # real training steps
def test_a_file_size_limit_hit_while_saving_is_one_line_and_the_run_continues(tmp_path, tiny_llama):
    """`ulimit -f` below a checkpoint's size: the save fails inside torch (in its own words, no errno); the kernel's
    SIGXFSZ tells it apart. One line, exit 2, the logged step kept, and the same command finishes once it is lifted."""
    import resource

    recipe = write_recipe(tmp_path, tiny_llama, lora={"r": 4, "dropout": 0.0}, training={"max_steps": 2})
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (40 * 1024, hard))  # the adapter fits, the optimizer state does not
    try:
        result = runner.invoke(app, ["train", str(recipe)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    line = fails_cleanly(result, "file-size limit (40960 bytes)", "ulimit -f unlimited", "--resume")
    assert len(result.output.strip().splitlines()[-1]) == len(line)
    assert '"step": 1' in (tmp_path / "run" / "metrics.jsonl").read_text()
    again = runner.invoke(app, ["train", str(recipe)])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "run" / "final" / "adapter_model.safetensors").is_file()


@pytest.mark.slow  # real training steps
def test_evaluating_a_read_only_run_into_another_folder_never_writes_the_run(tmp_path, lora_run):
    """`--output` elsewhere: the run's model card reads only RUN/eval/, so the run is not written at all."""
    run_dir = copy_of(lora_run, tmp_path / "copy")
    before = files_of(run_dir)
    out = tmp_path / "elsewhere"
    code, output = rerun_read_only(run_dir, ["eval", "run", str(run_dir), *EVAL, "--output", str(out)])
    assert code == 0, output
    assert json.loads((out / "summary.json").read_text())["problems"] == 2
    assert files_of(run_dir) == before
