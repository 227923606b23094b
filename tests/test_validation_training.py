"""Validation while training (`validation:`): real TRL steps on a tiny model, the held-out slice scored at the steps
it is due by the scorer `grpo eval` uses, its rows in metrics.jsonl, drawn by `grpo report`, the best step named;
and a user's mistakes refused in one line before anything is written."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from conftest import ASSETS, ROOT, fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from grpo_cli.recipe.validation import load_recipe

runner = CliRunner()
SLICE = {"every_steps": 1, "limit": 4, "batch_size": 2, "max_new_tokens": 4}


def logged(run_dir) -> tuple[list[dict], list[dict]]:
    """metrics.jsonl split into training steps and validation rows."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r], [r for r in rows if "val/problems" in r]


def always_right(tmp_path) -> str:
    """A user's verifier that calls every answer right: its validation accuracy must be exactly 1."""
    path = tmp_path / "always.py"
    path.write_text("def always(completions, **kwargs):\n    return [1.0 for _ in completions]\n")
    return f"{path}:always"


@pytest.mark.slow
def test_task_validation_logged_scored_like_grpo_eval_drawn_best_named_and_redrawn_by_checkpoints(tmp_path, tiny_llama):
    verifier = always_right(tmp_path)
    rewards = [
        {"name": "correctness"},  # a verifier by default
        {"name": verifier, "role": "verifier", "weight": 0.0},
        {"name": "strict_format", "weight": 0.2},  # a format: the format rate
        {"name": "length_target", "kwargs": {"target": 8}, "weight": 0.5},  # shaping: not scored
    ]
    # eval.source unset: the training data's held-out split, here and in `grpo eval --run` of the saved recipe
    held_out = {"protocol": "task", "split": "test"}
    recipe = write_recipe(tmp_path, tiny_llama, rewards=rewards, eval=held_out, validation=SLICE)
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "run"
    steps, validations = logged(run_dir)
    assert [r["step"] for r in steps] == [1, 2]
    assert [r["step"] for r in validations] == [0, 1, 2]  # before the first step, then every step
    for row in validations:
        assert row["val/problems"] == 4 and row["val/seconds"] > 0
        assert row["val/correctness/accuracy"] == row["val/correctness/correct"] / 4
        assert row[f"val/{verifier}/accuracy"] == 1.0 and row[f"val/{verifier}/correct"] == 4
        assert 0.0 <= row["val/format_rate"] <= 1.0 and 0 < row["val/mean_new_tokens"] <= 4
    assert all(0 < r["step_time_s"] for r in steps)

    # The last validation scored the model that was saved: `grpo eval` of it gives the same figures.
    out = tmp_path / "eval"
    args = ["eval", "run", str(run_dir), "--limit", "4", "eval.max_new_tokens=4", "eval.batch_size=2"]
    evaluated = runner.invoke(app, [*args, "--engine", "transformers", "--output", str(out), "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    summary = json.loads(evaluated.stdout)["results"][0]
    last = validations[-1]
    for name, figures in summary["filters"].items():
        assert last[f"val/{name}/correct"] == figures["correct"], name
    assert last["val/format_rate"] == summary["format_rate"]
    assert last["val/mean_new_tokens"] == round(summary["mean_new_tokens"], 2)
    # and the same shortcut report: answers, majority baseline and flag (eval/shortcuts.py)
    assert last["val/top_answer"] == summary["answer_distribution"]["top"][0]["answer"]
    assert last["val/top_answer_share"] == summary["answer_distribution"]["top"][0]["share"]
    assert last["val/majority_baseline"] == summary["majority_baseline"]["accuracy"]
    assert last["val/shortcut"] == summary["shortcut"]["kinds"]
    # the console says each kind of flag once, at the first validation that raised it
    kinds = [kind for row in validations for kind in row["val/shortcut"]]
    flagged = [line for line in result.output.splitlines() if line.startswith("shortcut flagged at step")]
    assert kinds and 1 <= len(flagged) <= len(set(kinds))
    assert flagged[0].startswith(
        f"shortcut flagged at step {next(r for r in validations if r['val/shortcut'])['step']}"
    )

    # Afterwards, `grpo eval --checkpoints` gives the same curve: the base at step 0, then every checkpoint
    # (checkpoint-2 is the final model's step, so the final model adds no point).
    curve_args = [*args[:1], "--checkpoints", str(run_dir), *args[3:], "--engine", "transformers"]
    curve_out = tmp_path / "curve"
    drawn_curve = runner.invoke(app, [*curve_args, "--output", str(curve_out), "--json"])
    assert drawn_curve.exit_code == 0, drawn_curve.output
    curve = json.loads(drawn_curve.stdout)["curve"]
    assert [(row["step"], row["model"]) for row in curve] == [(0, "base"), (1, "checkpoint-1"), (2, "checkpoint-2")]
    for row, validation in zip(curve, validations):
        assert row["correctness"]["accuracy"] == validation["val/correctness/accuracy"], row["step"]
    assert [json.loads(line) for line in (curve_out / "curve.jsonl").read_text().splitlines()] == curve
    assert (curve_out / "curve.png").stat().st_size > 0
    # A checkpoint deleted since (save_total_limit) keeps the point evaluated before.
    shutil.rmtree(run_dir / "checkpoint-1")
    again = runner.invoke(app, [*curve_args, "--output", str(curve_out), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["curve"] == curve

    # the console and the model card name the best step; the report draws the curve beside the reward
    named = "validation on 4 held-out problems, 3 times: correctness best "
    assert named in result.output and f"{verifier} best 1.000 at step 0 (last 1.000 at step 2)" in result.output
    card = (run_dir / "README.md").read_text()
    assert "## Validation while training" in card and named in card
    assert "| reward |" in card  # the training metrics table still reads the training steps
    drawn = runner.invoke(app, ["report", str(run_dir)])
    assert drawn.exit_code == 0, drawn.output
    assert (run_dir / "report.png").stat().st_size > 0


@pytest.mark.slow
def test_chat_validation_at_every_kth_step_and_the_last_leaves_training_as_it_was(tmp_path, tiny_llama):
    from safetensors.torch import load_file

    sections = {
        "rewards": [{"name": f"{ASSETS / 'varied_rewards.py'}:digit_share"}, {"name": "correctness"}],  # weights move
        "eval": {"source": "generated"},  # the chat protocol: GSM8K's filters
        "training": {"max_steps": 3},
    }
    recipe = write_recipe(tmp_path, tiny_llama, validation={**SLICE, "every_steps": 2}, **sections)
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    steps, validations = logged(tmp_path / "run")
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert [r["step"] for r in validations] == [0, 2, 3]  # the start, every 2nd step, and the last
    for row in validations:
        assert list(k for k in row if k.endswith("/accuracy")) == [
            "val/strict-match/accuracy",
            "val/flexible-extract/accuracy",
        ]
        for name in ("strict-match", "flexible-extract"):
            assert row[f"val/{name}/accuracy"] == row[f"val/{name}/correct"] / 4
    assert "validation on 4 held-out problems, 3 times: strict-match best " in result.output

    # Greedy decoding in eval mode draws no random number and changes no weight: the same run without validation
    # ends with the same weights.
    (tmp_path / "plain").mkdir()
    plain = write_recipe(tmp_path / "plain", tiny_llama, **sections)
    assert runner.invoke(app, ["train", str(plain)]).exit_code == 0
    validated, unvalidated = (
        load_file(folder / "run" / "final" / "model.safetensors") for folder in (tmp_path, tmp_path / "plain")
    )
    before = load_file(tiny_llama / "model.safetensors")
    assert any(not torch.equal(validated[k], before[k]) for k in before)
    assert all(torch.equal(validated[k], unvalidated[k]) for k in validated)


@pytest.mark.slow
def test_validation_of_a_lora_run_under_bf16_autocast_runs_as_its_rollouts_do(tmp_path, tiny_llama):
    # Under bf16 autocast the frozen Linears are stored in bf16 and the adapters in float32 (frozen_weights.py): the
    # model only runs inside autocast, so validation must run in the trainer's autocast too, not beside it.
    sections = {
        "model": {"mixed_precision": "bf16"},
        "lora": {"r": 4, "alpha": 8, "target_modules": "all-linear"},
        "eval": {"source": "generated"},
        "training": {"max_steps": 1},
    }
    recipe = write_recipe(tmp_path, tiny_llama, validation=SLICE, **sections)
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    steps, validations = logged(tmp_path / "run")
    assert [r["step"] for r in steps] == [1] and [r["step"] for r in validations] == [0, 1]
    assert all(0 <= row["val/flexible-extract/accuracy"] <= 1 for row in validations)


def test_the_slice_is_the_first_problems_grpo_eval_scores_and_overlap_with_training_is_warned(tmp_path, tiny_llama):
    from grpo_cli.eval.problems import load_problems
    from grpo_cli.eval.training_validation import held_out_validation

    recipe = load_recipe(write_recipe(tmp_path, tiny_llama, eval={"source": "generated"}, validation=SLICE))
    warned: list[str] = []
    validation = held_out_validation(recipe, warn=warned.append)
    assert list(validation.problems) == load_problems(recipe.eval)[0][:4]
    assert validation.budget == 4 and validation.batch_size == 2
    assert not warned  # generated evaluation problems are drawn with another seed than training's

    rows = [{"question": f"What is {n} plus {n}?", "answer": f"{n} + {n} = {2 * n}\n#### {2 * n}"} for n in range(8)]
    data = write_jsonl(rows, tmp_path / "rows.jsonl")
    same = write_recipe(
        tmp_path,
        tiny_llama,
        data={"source": str(data), "limit": None},
        eval={"protocol": "task"},
        validation={"every_steps": 5},
    )
    validation = held_out_validation(load_recipe(same), warn=warned.append)
    assert len(validation.problems) == 8 and validation.budget == 512  # eval's budget for the task protocol
    assert warned == [
        "warning: 8 of the 8 validation problems are also training prompts, so their accuracy measures memory; "
        "validate on a held-out split (eval.split) or file (eval.source)"
    ]


def test_an_offset_validates_on_problems_apart_from_the_ones_grpo_eval_tests(tmp_path, tiny_llama):
    """recipes/demo_largest.yaml validates on the 100 problems after the 400 it tests: none is shared."""
    from grpo_cli.eval.problems import load_problems
    from grpo_cli.eval.training_validation import held_out_validation

    apart = {**SLICE, "offset": 6}
    recipe = load_recipe(write_recipe(tmp_path, tiny_llama, eval={"source": "generated", "limit": 6}, validation=apart))
    validation = held_out_validation(recipe, warn=lambda line: None)
    tested = load_problems(recipe.eval)[0]
    assert len(tested) == 6 and len(validation.problems) == SLICE["limit"]
    assert not {p.question for p in validation.problems} & {p.question for p in tested}
    demo = load_recipe(ROOT / "recipes" / "demo_largest.yaml")
    assert demo.validation.offset == demo.eval.limit  # the shipped demo watches no test row


def test_an_offset_past_the_split_is_one_line(tmp_path, tiny_llama):
    rows = [{"question": f"What is {n} plus {n}?", "answer": f"#### {2 * n}"} for n in range(8)]
    data = write_jsonl(rows, tmp_path / "rows.jsonl")
    recipe = write_recipe(tmp_path, tiny_llama, eval={"source": str(data)}, validation={"every_steps": 2, "offset": 8})
    fails_cleanly(runner.invoke(app, ["train", str(recipe)]), "validation.offset", "none after the first 8")


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["validation.every_steps=0"], ["validation.every_steps", "greater than or equal to 1"]),
        (["validation.every_steps=2", "validation.limit=0"], ["validation.limit", "greater than or equal to 1"]),
        (["validation.limit=4"], ["validation.every_steps", "required key is missing"]),
        (["validation.every=5"], ["validation.every", "did you mean `every_steps`"]),
        (
            ["validation.every_steps=2", "distributed.num_processes=2"],
            ["validation", "runs in one process", "grpo eval run"],
        ),
    ],
)
def test_a_validation_mistake_is_one_line_naming_the_key(tmp_path, tiny_llama, overrides, words):
    recipe = write_recipe(tmp_path, tiny_llama)
    fails_cleanly(runner.invoke(app, ["validate", str(recipe), *overrides]), *words)


def test_validation_with_tools_is_refused(tmp_path, tiny_llama):
    recipe = write_recipe(tmp_path, tiny_llama, tools=["calculator"], validation={"every_steps": 2})
    fails_cleanly(runner.invoke(app, ["validate", str(recipe)]), "validation", "without the tool loop")


def test_a_slice_with_no_usable_row_or_no_verifier_is_refused_before_the_run_starts(tmp_path, tiny_llama):
    no_numbers = write_jsonl([{"question": "Why?", "answer": "because"}] * 3, tmp_path / "held_out.jsonl")
    recipe = write_recipe(tmp_path, tiny_llama, eval={"source": str(no_numbers)}, validation={"every_steps": 1})
    fails_cleanly(runner.invoke(app, ["train", str(recipe)]), "eval.source", "none of the 3 problems can be scored")
    assert not (tmp_path / "run").exists()

    shaping_only = [{"name": "length_target", "kwargs": {"target": 8}}]
    recipe = write_recipe(
        tmp_path, tiny_llama, rewards=shaping_only, eval={"protocol": "task"}, validation={"every_steps": 1}
    )
    fails_cleanly(runner.invoke(app, ["train", str(recipe)]), "rewards", "no reward checks the answer")
    assert not (tmp_path / "run").exists()


def test_the_report_draws_validation_beside_the_reward_and_names_the_earliest_best_step(tmp_path):
    from grpo_cli.runs.report import panels_for
    from grpo_cli.runs.validation_curve import best_line, training_rows

    def val(step, strict, flexible):
        accuracies = {"val/strict-match/accuracy": strict, "val/flexible-extract/accuracy": flexible}
        return {"step": step, **accuracies, "val/problems": 8, "val/seconds": 1.0}

    steps = [{"step": s, "reward": 0.1 * s, "completions/mean_length": 9.0} for s in (1, 2, 3, 4)]
    rows = [val(0, 0.125, 0.25), *steps[:2], val(2, 0.5, 0.25), *steps[2:], val(4, 0.5, 0.375)]
    assert training_rows(rows) == steps
    (title, keys), *_ = panels_for(rows)
    assert keys == ["reward", "val/strict-match/accuracy", "val/flexible-extract/accuracy"] and "accuracy" in title
    assert best_line(rows) == (
        "validation on 8 held-out problems, 3 times: strict-match best 0.500 at step 2 (last 0.500 at step 4); "
        "flexible-extract best 0.375 at step 4 (last 0.375 at step 4)"
    )
    assert best_line(steps) is None
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.png").stat().st_size > 0


def test_plan_says_what_validation_adds(tmp_path, tiny_llama):
    slice_ = {"every_steps": 3, "limit": 8, "batch_size": 8, "max_new_tokens": 64}
    recipe = write_recipe(tmp_path, tiny_llama, validation=slice_, training={"max_steps": 10})
    result = runner.invoke(app, ["plan", str(recipe), "--device", "cpu", "--ram", "8GB", "--json"])
    assert result.exit_code == 0, result.output
    (note,) = json.loads(result.stdout)["notes"]
    assert note.startswith("validation: 8 held-out problems greedily, 5 times over 10 steps")  # 0, 3, 6, 9, 10
    assert "8 x 64 tokens outgrow the generation batch planned above (4 x 8)" in note
