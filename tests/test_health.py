"""The health watch (grpo_cli/runs/health.py): each signature sounds on a metric stream that shows it and stays
quiet on a near miss; real runs' committed metrics raise no alarm; `grpo report` lists the signatures of a grpo run
and of a plain TRL run's trainer_state.json; docs/health.md lists every signature and threshold."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT, fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from grpo_cli.recipe.health_section import HealthSection
from grpo_cli.runs.health import diagnose
from grpo_cli.runs.health_signatures import SIGNATURES

runner = CliRunner()
STEPS = 15


def healthy(step: int) -> dict:
    """A step of a run that learns: varied groups, steady entropy and length, a reward rising slowly."""
    return {
        "step": step,
        "loss": 0.01,
        "grad_norm": 1.0 + 0.1 * (step % 3),
        "reward": 0.3 + 0.01 * step,
        "reward_std": 0.3,
        "frac_reward_zero_std": 0.2,
        "entropy": 0.8,
        "completions/mean_length": 60.0,
        "completions/clipped_ratio": 0.1,
        "rewards/correctness/mean": 0.3,
        "rewards/correctness/std": 0.4,
        "rewards/length/mean": 0.5,
        "rewards/length/std": 0.1,
    }


def stream(change=lambda step, row: None, steps: int = STEPS) -> list[dict]:
    rows = []
    for step in range(1, steps + 1):
        row = healthy(step)
        change(step, row)
        rows.append(row)
    return rows


def sounded(rows: list[dict], **watch) -> set[str]:
    watch.setdefault("weights", {"correctness": 2.0, "length": 0.5})
    return {alarm.signature for alarm in diagnose(rows, **watch)}


def validation(step: int, accuracy: float, shortcut=()) -> dict:
    row = {"step": step, "val/problems": 64, "val/flexible-extract/accuracy": accuracy, "val/shortcut": list(shortcut)}
    if shortcut:
        row["val/shortcut_reason"] = "62 of 64 answers are 5"
    return row


def _set(**values):
    return lambda step, row: row.update(values)


def _after(first: int, **values):
    return lambda step, row: row.update(values) if step > first else None


def _scaled(key: str, start: float, end: float):
    return lambda step, row: row.update({key: start + (end - start) * (step - 1) / (STEPS - 1)})


def _at(at: int, **values):
    return lambda step, row: row.update(values) if step == at else None


def _with_validation(rows: list[dict], accuracies: list[float]) -> list[dict]:
    out = list(rows)
    for i, accuracy in enumerate(accuracies):
        out.insert(min(len(out), i * 5), validation(i * 5, accuracy))
    return out


# signature -> (a stream that shows it, a near miss that must not)
CASES = {
    "nan": (stream(_at(7, loss=None)), stream(_at(7, loss=0.0))),
    "no_signal": (stream(_after(5, frac_reward_zero_std=0.95)), stream(_after(5, frac_reward_zero_std=0.85))),
    "entropy_collapse": (
        stream(lambda s, r: r.update(entropy=0.8 - 0.78 * (s - 1) / (STEPS - 1), reward=0.3)),
        stream(lambda s, r: r.update(entropy=0.8 - 0.5 * (s - 1) / (STEPS - 1), reward=0.3)),
    ),
    "length_collapse": (
        stream(_scaled("completions/mean_length", 60, 5)),
        stream(_scaled("completions/mean_length", 60, 30)),
    ),
    "cut_at_limit": (
        stream(_after(5, **{"completions/clipped_ratio": 0.8})),
        stream(_scaled("completions/clipped_ratio", 0.95, 0.55)),  # cut, but fewer each step: learning brevity
    ),
    "reward_saturated": (
        _with_validation(stream(_scaled("reward", 0.2, 0.9)), [0.3, 0.3, 0.28]),
        _with_validation(stream(_scaled("reward", 0.2, 0.9)), [0.3, 0.35, 0.4]),
    ),
    "shortcut": (
        stream() + [validation(STEPS, 0.5, shortcut=["one_answer"])],
        stream() + [validation(STEPS, 0.5)],
    ),
    "one_reward_dominates": (
        stream(_set(**{"rewards/correctness/std": 0.01, "rewards/length/std": 0.5})),
        stream(_set(**{"rewards/correctness/std": 0.2, "rewards/length/std": 0.5})),
    ),
    "reward_falling": (stream(_scaled("reward", 0.8, 0.2)), stream(_scaled("reward", 0.8, 0.7))),
    "kl_runaway": (stream(_after(5, kl=3.0)), stream(lambda s, r: r.update(kl=3.0 if s % 4 else 0.5))),
    "grad_spike": (stream(_at(10, grad_norm=40.0)), stream(_at(10, grad_norm=8.0))),
    "tools_vanished": (
        stream(lambda s, r: r.update({"tools/call_frequency": 0.6 if s <= 7 else 0.0})),
        stream(lambda s, r: r.update({"tools/call_frequency": 0.6 if s <= 7 else 0.05})),
    ),
    "tools_failing": (
        stream(_set(**{"tools/call_frequency": 0.5, "tools/failure_frequency": 0.7})),
        stream(lambda s, r: r.update({"tools/call_frequency": 0.5, "tools/failure_frequency": 0.7 if s % 3 else 0.2})),
    ),
}


def test_every_signature_has_a_case():
    assert set(CASES) == set(SIGNATURES)


@pytest.mark.parametrize("signature", sorted(CASES))
def test_a_signature_sounds_on_its_stream_and_not_on_a_near_miss(signature):
    shows, near_miss = CASES[signature]
    assert signature in sounded(shows)
    assert signature not in sounded(near_miss)


def test_a_healthy_run_raises_no_alarm():
    assert sounded(stream()) == set()


def test_a_trl_state_keeps_nan_and_grpos_metrics_write_null():
    assert "nan" in sounded(stream(_at(4, grad_norm=math.nan)))
    assert "nan" in sounded(stream(_at(4, grad_norm=None)))


def test_a_signature_sounds_once_while_it_lasts_and_again_when_it_comes_back():
    rows = stream(lambda step, row: row.update(frac_reward_zero_std=0.2 if 8 <= step <= 9 else 0.95), steps=20)
    alarms = [a for a in diagnose(rows) if a.signature == "no_signal"]
    assert [a.step for a in alarms] == [5, 14]


def test_one_validation_dip_while_the_reward_rises_is_noise():
    assert "reward_saturated" not in sounded(_with_validation(stream(_scaled("reward", 0.2, 0.9)), [0.41, 0.35]))


def test_entropy_that_falls_as_the_reward_rises_is_convergence_not_collapse():
    assert "entropy_collapse" not in sounded(stream(_scaled("entropy", 0.8, 0.02)))  # healthy(): reward 0.31 -> 0.45
    assert "entropy_collapse" in sounded(stream(lambda s, r: r.update(entropy=0.8 if s < 6 else 0.02, reward=0.3)))


def test_groups_flat_counts_are_read_as_a_share_of_the_groups_per_step():
    rows = stream(_set(**{"zero_variance/groups_flat": 7.5, "frac_reward_zero_std": 0.0}))  # averaged: fractional
    assert "no_signal" in sounded(rows, groups_per_step=8)
    assert "no_signal" not in sounded(rows, groups_per_step=16)


def test_the_reward_weighted_first_may_lead_the_spread():
    rows = stream(_set(**{"rewards/correctness/std": 0.5, "rewards/length/std": 0.01}))
    assert "one_reward_dominates" not in sounded(rows)


def test_thresholds_come_from_the_health_section():
    rows = stream(_after(5, frac_reward_zero_std=0.85))
    assert "no_signal" in sounded(rows, settings=HealthSection(flat_share=0.8))
    assert "no_signal" not in sounded(rows, settings=HealthSection(window=12, flat_share=0.8))


@pytest.mark.parametrize(
    "metrics",
    ["benchmarks/gsm8k_learning/qwen2.5_coder_0.5b/d2/run/metrics.jsonl", "benchmarks/tool_train/metrics.jsonl"],
)
def test_committed_real_runs_raise_no_false_alarm(metrics):
    """d2 learned GSM8K's format over 100 steps of Qwen2.5-Coder-0.5B (Q4_K_M dequantized to bf16); tool_train is two
    steps of the calculator recipe: neither went wrong, so the watch must stay quiet on both."""
    rows = [json.loads(line) for line in (ROOT / metrics).read_text().splitlines() if line.strip()]
    assert diagnose(rows, groups_per_step=8) == []


KEPT_RUNS = sorted((ROOT / "benchmarks" / "health_quiet").glob("*-seed*.jsonl"))


@pytest.mark.parametrize("kept", KEPT_RUNS, ids=[p.stem for p in KEPT_RUNS])
def test_the_shipped_demos_raise_no_alarm_at_any_kept_seed(kept):
    """benchmarks/health_quiet.py's runs of the shipped demos (SmolLM2-135M-Instruct, Q4_1 GGUF dequantized), read
    with their recipe's thresholds, group count and weights: runs that learn, so no signature may sound."""
    from grpo_cli.recipe.validation import load_recipe
    from grpo_cli.runs.run_health import watch_args

    recipe = load_recipe(ROOT / "recipes" / f"{kept.stem.rsplit('-seed', 1)[0]}.yaml")
    groups = recipe.generation_batch_size // recipe.grpo.num_generations
    rows = [json.loads(line) for line in kept.read_text().splitlines()]
    assert len([r for r in rows if "reward" in r]) == recipe.training.max_steps
    assert diagnose(rows, **watch_args(recipe.training.health, recipe.rewards, groups)) == []


def test_the_docs_list_every_signature_and_every_threshold():
    page = (ROOT / "docs" / "health.md").read_text()
    for name, signature in SIGNATURES.items():
        assert f"| `{name}` | {signature.kind} |" in page, name
    for field in HealthSection.model_fields:
        assert f"`{field}`" in page, field


def _run_dir(tmp_path: Path, rows: list[dict]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(rows, run / "metrics.jsonl")
    return run


def test_report_lists_the_signatures_and_marks_the_plot(tmp_path):
    run = _run_dir(tmp_path, stream(_after(5, frac_reward_zero_std=1.0)))
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert "health: no_signal at step 10" in result.output and "1 signature(s) sounded" in result.output
    assert (run / "report.png").stat().st_size > 10_000


def test_report_of_a_healthy_run_says_so(tmp_path):
    result = runner.invoke(app, ["report", str(_run_dir(tmp_path, stream()))])
    assert result.exit_code == 0 and "health: no signature sounded" in result.output, result.output


def test_report_reads_a_plain_trl_run(tmp_path):
    """A folder TRL wrote: trainer_state.json's log_history, NaN as TRL keeps it (json's NaN)."""
    folder = tmp_path / "checkpoint-12"
    folder.mkdir()
    history = stream(_at(9, loss=math.nan), steps=12) + [{"step": 12, "train_runtime": 10.0}]
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 12, "log_history": history}))
    result = runner.invoke(app, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert "health: nan at step 9" in result.output and (folder / "report.png").exists()


def test_report_of_a_damaged_trainer_state_is_one_line(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "trainer_state.json").write_text('{"log_history": 3}')
    fails_cleanly(runner.invoke(app, ["report", str(folder)]), "trainer_state.json", "no log_history")


VARIED = "def varied(completions, **kwargs):\n    return [float(sum(map(ord, str(c))) % 7) for c in completions]\n"


def _real_recipe(tmp_path: Path, model: Path, **training) -> Path:
    """A tiny LoRA run whose reward differs within every group (the random model's completions are all wrong)."""
    (tmp_path / "varied.py").write_text(VARIED)
    return write_recipe(
        tmp_path,
        model,
        lora={"r": 4, "dropout": 0.0},
        rewards=[{"name": f"{tmp_path / 'varied.py'}:varied"}],
        training={"max_steps": 6, **training},
    )


def _logged(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("halt_on, saved", [(["nan"], False), (["nan", "divergence"], False), ([], None)])
def test_a_nan_halts_without_saving_the_weights_it_left(halt_on, saved):
    """After a NaN the optimizer has written non-finite weights: the halt cancels the step's save (a save_steps
    one included) so --resume never lands on them; with halting off the run goes on. (A real run driven to a NaN is
    not used here: whether an absurd learning rate overflows float32 depends on the CPU's kernels.)"""
    from transformers import TrainerControl, TrainerState

    from grpo_cli.train.health_callback import HealthCallback

    said = []
    callback = HealthCallback(HealthSection(halt_on=halt_on), said.append)
    control, state = TrainerControl(should_save=True), TrainerState(global_step=3)
    callback.on_log(None, state, control, logs={**healthy(3), "loss": 0.1, "grad_norm": math.inf})
    assert said and said[0].startswith("health: nan at step 3")
    if saved is None:
        assert callback.halted is None and not control.should_training_stop and control.should_save
    else:
        assert callback.halted.signature == "nan" and control.should_training_stop and control.should_save is saved


def test_a_halt_on_another_kind_saves_its_step():
    from transformers import TrainerControl, TrainerState

    from grpo_cli.train.health_callback import HealthCallback

    callback = HealthCallback(HealthSection(window=2, halt_on=["collapse"]), lambda line: None)
    control = TrainerControl()
    for step in (1, 2, 3, 4):  # two windows of two steps, every completion cut
        logs = {**healthy(step), "completions/clipped_ratio": 1.0}
        callback.on_log(None, TrainerState(global_step=step), control, logs=logs)
    assert callback.halted.signature == "cut_at_limit" and control.should_save and control.should_training_stop


@pytest.mark.slow  # real training steps
def test_a_halted_run_saves_its_step_and_resume_continues_from_it(tmp_path, tiny_llama):
    """The random model never ends a completion within 8 tokens: every one is cut at the budget (cut_at_limit,
    kind collapse). Halting on it saves that step's checkpoint; --resume without the halt trains on from it."""
    recipe = _real_recipe(tmp_path, tiny_llama, save_steps=100, health={"window": 2, "halt_on": ["collapse"]})
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 3, result.output
    assert "health: cut_at_limit at step 4" in result.output and "a checkpoint of that step" in result.output
    run = tmp_path / "run"
    assert (run / "checkpoint-4").is_dir() and not (run / "final").exists()
    assert "cut_at_limit" in _logged(run)[-1]["health"]
    assert "cut_at_limit" in (run / "README.md").read_text()  # the card's Health section
    resumed = runner.invoke(app, ["train", str(recipe), "--resume", "training.health.halt_on=[]"])
    assert resumed.exit_code == 0, resumed.output
    assert [r["step"] for r in _logged(run)] == [1, 2, 3, 4, 5, 6] and (run / "final").is_dir()
