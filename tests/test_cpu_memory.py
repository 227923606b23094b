"""The CPU process: mimalloc preloaded for the commands that hold a model, the plan's peak RSS against RAM, the
warning before loading, and progress inside a step."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import ROOT, write_recipe
from grpo_cli.cli import app

runner = CliRunner()


@pytest.mark.slow  # grpo train in a child process
def test_training_runs_with_mimalloc_preloaded(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama, training={"max_steps": 1})
    env = {k: v for k, v in os.environ.items() if k not in ("GRPO_ALLOCATOR", "LD_PRELOAD")}
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "train", str(recipe)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (record,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert record["allocator"] == "mimalloc"
    assert record["peak_memory_kind"] == "cpu_peak_rss" and record["peak_memory_gb"] > 0


# Run in a process with mimalloc preloaded: what keep_freed_pages says for a plan of 1 GiB in `available` GiB, and
# the purge_decommits option mimalloc then holds, read back from the library at the index allocator.py names.
KEEP_FREED_PAGES = """
import ctypes, sys
from grpo_cli.process import allocator
said = allocator.keep_freed_pages(2**30, float(sys.argv[1]) * 2**30)
library = ctypes.CDLL(None)
library.mi_option_get.restype = ctypes.c_long
print(repr(said), library.mi_option_get(allocator.MI_OPTION_PURGE_DECOMMITS))
"""


def _keep_freed_pages(available_gib: float, users_own: str | None) -> tuple[str, int]:
    from grpo_cli.process import allocator

    env = {k: v for k, v in os.environ.items() if k not in (allocator.ALLOCATOR_ENV, allocator.PURGE_DECOMMITS_ENV)}
    preload = allocator.preload_env()
    if preload is None:
        pytest.skip("mimalloc does not apply on this machine (not Linux, a GPU machine, or cmeel-mimalloc missing)")
    env.update(preload)
    if users_own is not None:
        env[allocator.PURGE_DECOMMITS_ENV] = users_own
    done = subprocess.run(
        [sys.executable, "-c", KEEP_FREED_PAGES, str(available_gib)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    said, option = done.stdout.strip().rsplit(" ", 1)
    return said, int(option)


def test_mimalloc_keeps_freed_pages_mapped_only_where_the_plan_leaves_room():
    said, option = _keep_freed_pages(available_gib=8, users_own=None)
    assert "MADV_FREE" in said and "1.0 GiB" in said and option == 0
    said, option = _keep_freed_pages(available_gib=1.1, users_own=None)  # fits, but not with 25% to spare
    assert said == "None" and option == 1  # mimalloc's default: unmap what it gives back


@pytest.mark.parametrize("users_own", ["0", "1"])
def test_a_purge_setting_the_user_chose_is_read_by_mimalloc_and_left_alone(users_own):
    said, option = _keep_freed_pages(available_gib=8, users_own=users_own)
    assert said == "None" and option == int(users_own)


def test_mimalloc_versions_are_read_in_both_of_its_numberings():
    from grpo_cli.process.allocator import _major_minor

    assert _major_minor(217) == (2, 1) and _major_minor(30403) == (3, 4) and _major_minor(20206) == (2, 2)
    assert _major_minor(180) == (1, 8) and _major_minor(40001) == (4, 0)  # outside 2.1-3.x: left alone


def test_plan_on_a_cpu_gives_peak_rss_against_ram_and_the_fix():
    recipe = ROOT / "recipes/gsm8k/qwen2.5_coder_0.5b_cpu.yaml"
    args = [
        "plan",
        str(recipe),
        "grpo.max_completion_length=512",
        "model.gradient_checkpointing=false",
        "--device",
        "cpu",
        "--ram",
        "12GB",
        "--json",
    ]
    plan = json.loads(runner.invoke(app, args).stdout)
    assert plan["device"] == "cpu" and plan["peak_rss_gib"] > plan["peak_tensors_gib"]
    assert plan["fits"] is False and plan["gpu_gib"] == 12
    assert any("model.gradient_checkpointing=true" in s["overrides"] for s in plan["suggestions"])
    assert all(s["peak_expected_gib"] <= 12 for s in plan["suggestions"])
    text = runner.invoke(app, args[:-1]).output
    assert "expected peak RSS" in text and "does not fit" in text
    bad = runner.invoke(app, ["plan", str(recipe), "--device", "cpu", "--ram", "lots"])
    assert bad.exit_code == 2 and "--ram" in bad.output


@pytest.mark.slow  # a real training step
def test_train_warns_before_loading_when_the_plan_exceeds_free_ram(tmp_path, tiny_llama, monkeypatch):
    import grpo_cli.plan.gpus as gpus

    monkeypatch.setattr(gpus, "available_ram", lambda: 100e6)  # 100 MB free
    result = runner.invoke(app, ["train", str(write_recipe(tmp_path, tiny_llama, training={"max_steps": 1}))])
    assert result.exit_code == 0, result.output
    assert (
        "warning: the plan expects a peak RSS of" in result.output and "the kernel may stop this run" in result.output
    )
    assert "reward audit: " in result.output and "shortcut (rule: " in result.output  # a third of the problems are sums


@pytest.mark.slow  # a real training step
def test_a_step_says_which_phase_it_is_in(tmp_path, tiny_llama, monkeypatch):
    from grpo_cli.train.display import TrainingDisplay

    seen: list[str] = []
    monkeypatch.setattr(TrainingDisplay, "phase", lambda self, text: seen.append(text))
    recipe = write_recipe(tmp_path, tiny_llama, training={"max_steps": 1, "gradient_accumulation_steps": 2})
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    assert seen[0] == "generating 8 completions..."
    assert any(text.startswith("generating 8 completions: token 1/8") for text in seen), seen
    assert any(text.startswith("generated in") and text.endswith("micro-batch 1/2") for text in seen), seen
    assert "training micro-batch 2/2" in seen


def test_in_a_log_each_phase_change_is_a_line_and_repeats_wait_30_seconds():
    import io

    from rich.console import Console

    from grpo_cli.train.display import TrainingDisplay

    out = io.StringIO()
    display = TrainingDisplay(Console(file=out, force_terminal=False, width=200), total_steps=3)
    for text in (
        "generating 16 completions: token 1/320",
        "generating 16 completions: token 9/320",
        "generated in 90 s; training micro-batch 1/2",
        "training micro-batch 2/2",
        "training micro-batch 2/2",
    ):
        display.phase(text)
    assert out.getvalue().splitlines() == [
        "  step 1/3: generating 16 completions: token 1/320",
        "  step 1/3: generated in 90 s; training micro-batch 1/2",
        "  step 1/3: training micro-batch 2/2",
    ]


LEAN_PROBE = """
import sys
from grpo_cli.process import optional_libraries
from grpo_cli.recipe.validation import load_recipe
recipe = load_recipe(sys.argv[1], sys.argv[2:])
marked = optional_libraries.skip_unused_bitsandbytes(recipe.quantization, recipe.training.optim, own_process=True)
import peft, trl
from transformers.utils import is_bitsandbytes_available
try:  # whether anything in this process can import it (peft before 0.22 imported it at its own import)
    import bitsandbytes.nn
    importable = True
except ImportError:
    importable = False
print(marked, is_bitsandbytes_available(), importable)
"""


def test_a_run_that_does_not_quantize_leaves_bitsandbytes_unimported():
    pytest.importorskip("bitsandbytes")
    demo = str(ROOT / "recipes" / "demo.yaml")

    def probe(*overrides):
        done = subprocess.run(
            [sys.executable, "-c", LEAN_PROBE, demo, *overrides], capture_output=True, text=True, cwd=ROOT, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert probe() == ["True", "False", "False"]
    assert probe("quantization.bits=4") == ["False", "True", "True"]  # QLoRA needs it: left alone
    assert probe("training.optim=paged_adamw_8bit") == ["False", "True", "True"]


def test_bitsandbytes_is_left_alone_inside_a_process_that_did_not_ask():
    from grpo_cli.process import optional_libraries
    from grpo_cli.recipe.validation import load_recipe

    # only the console script's commands own their process; tests and users' Python keep bitsandbytes
    demo = load_recipe(ROOT / "recipes" / "demo.yaml")
    assert not optional_libraries.skip_unused_bitsandbytes(demo.quantization, demo.training.optim, own_process=False)
    assert sys.modules.get("bitsandbytes", "absent") is not None


def test_narrower_head_tiles_give_the_same_log_probs_and_gradients():
    """seams.narrow_head_tiles only changes how many vocabulary columns TRL's chunked head folds at once."""
    import torch
    from trl.kernels.chunked_logprob import ChunkedLogProbFunction

    from grpo_cli.libraries.seams import CPU_HEAD_TILE

    torch.manual_seed(0)
    hidden = torch.randn(48, 32, dtype=torch.float64)
    weight = torch.randn(20_000, 32, dtype=torch.float64) * 0.3  # three 8192-wide tiles, one 32768-wide
    targets = torch.randint(0, 20_000, (48,))

    def logprobs_and_grads(chunk: int):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        logprobs, entropy, *_ = ChunkedLogProbFunction.apply(h, w, None, targets, 0.7, chunk, None, 1.0, ("entropy",))
        (logprobs.sum() + 0.1 * entropy.sum()).backward()
        return logprobs, entropy, h.grad, w.grad

    wide, narrow = logprobs_and_grads(32768), logprobs_and_grads(CPU_HEAD_TILE)
    for a, b in zip(wide, narrow):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # the fold runs in float32 either way


def test_head_tiles_are_narrowed_on_the_cpu_and_an_upgrade_without_the_setting_is_named_at_start_up(monkeypatch):
    import trl.trainer.utils as trl_utils

    from grpo_cli.errors import UserError
    from grpo_cli.libraries.seams import CPU_HEAD_TILE, check_trl, narrow_head_tiles
    from grpo_cli.plan.phase_terms import CPU_VOCAB_CHUNK_SIZE

    assert CPU_VOCAB_CHUNK_SIZE == CPU_HEAD_TILE  # the plan's CPU head term is the width the trainer sets
    monkeypatch.setattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", 32768)
    narrow_head_tiles()
    assert trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE == CPU_HEAD_TILE
    monkeypatch.delattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE")
    with pytest.raises(UserError, match=r"no trl\.trainer\.utils\._CHUNKED_LOGPROB_CHUNK_SIZE, which grpo narrows"):
        check_trl()


OWNERSHIP_PROBE = """
import sys
import typer
from grpo_cli.cli import app
from grpo_cli.cli.parts import own_process
from grpo_cli.cli.root import entry

@app.command("probe")
def probe(ctx: typer.Context):
    print("own_process", own_process(ctx))

sys.argv = ["grpo", "probe"]
try:
    entry()  # the console script
except SystemExit:
    pass
app(["probe"], prog_name="grpo", standalone_mode=False)  # as a test's CliRunner or a user's Python calls it
"""


def test_only_the_console_script_tells_its_commands_they_own_the_process():
    """The bitsandbytes decision reaches train, preflight and eval as an argument, from the console script alone."""
    done = subprocess.run(
        [sys.executable, "-c", OWNERSHIP_PROBE], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["own_process True", "own_process False"]
