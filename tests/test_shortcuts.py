"""The shortcut report of a task evaluation (eval/shortcuts.py): the answers a model gives, read as its verifier reads
them, the accuracy of always giving the most common reference answer, and the flag; in `grpo eval`'s summary.json
and console, `--compare`, `--checkpoints`, validation while training and `grpo report`."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from conftest import write_jsonl, write_recipe
from grpo_cli.cli import app
from grpo_cli.eval.shortcuts import (
    against_baseline,
    answer_distribution,
    balanced_accuracy,
    majority_baseline,
    read_answer,
    read_reference,
    reading_of,
    report_lines,
    shortcut_flag,
    shortcut_report,
)
from grpo_cli.eval.stats import mean_interval, paired_difference, wilson_interval

runner = CliRunner()


def parity_records(answers: list[str], golds: list[str]) -> list[dict]:
    """Greedy records as predictions.jsonl holds them, judged as normalized_match judges them."""
    return [
        {
            "index": i,
            "gold": gold,
            "completion": text,
            "correct": {"normalized_match": read_answer(text, "normalized") == gold},
        }
        for i, (text, gold) in enumerate(zip(answers, golds))
    ]


@pytest.mark.parametrize(
    ("verifier", "text", "read"),
    [
        ("normalized_match", "No.", "no"),
        ("normalized_match", "<answer>\nYes!\n</answer>", "yes"),
        ("normalized_match", "...", None),  # nothing left once punctuation goes: no answer
        ("exact_match", "No.", "No."),
        ("my_rewards.py:judge", "The answer: NO", "answer no"),  # a user's verifier: normalized_match's reading
        ("correctness", "so it is $18.0 in all", "18"),
        ("correctness", "<answer>1,200</answer>", "1200"),
        ("correctness", "no number here", None),
    ],
)
def test_answers_are_read_as_the_verifier_reads_them(verifier, text, read):
    assert read_answer(text, reading_of(verifier)) == read


def test_references_are_read_alike_so_a_model_answer_and_a_reference_can_be_one_answer():
    assert read_reference("No", "normalized") == read_answer("no.", "normalized") == "no"
    assert read_reference("18", "number") == read_answer("#### $18.00", "number") == "18"
    assert read_reference("", "exact") is None


def test_the_distribution_shows_the_top_five_and_counts_the_rest_as_other():
    answers = ["no"] * 6 + ["yes"] * 4 + ["a", "b", "c", "d", "e"] + [None] * 3
    d = answer_distribution(answers)
    assert d["answers"] == 18 and d["distinct"] == 8
    assert [(t["answer"], t["count"]) for t in d["top"]] == [("no", 6), ("yes", 4), (None, 3), ("a", 1), ("b", 1)]
    assert d["top"][0]["share"] == 6 / 18
    assert d["other"] == {"count": 3, "share": 3 / 18}  # c, d, e


def test_the_majority_baseline_is_the_most_common_reference_with_its_wilson_interval():
    baseline = majority_baseline(["yes", "no", "no", "yes", "no", None])
    assert baseline["answer"] == "no" and baseline["correct"] == 3 and baseline["problems"] == 6
    assert baseline["accuracy"] == 0.5 and baseline["ci95"] == list(wilson_interval(3, 6))
    assert baseline["classes"] == 2


def test_balanced_accuracy_is_the_mean_recall_over_classes_for_categorical_tasks_only():
    golds = ["no"] * 6 + ["yes"] * 2
    always_no = [g == "no" for g in golds]
    assert balanced_accuracy(golds, always_no) == 0.5  # 6/8 accurate, but one class in two recalled
    assert balanced_accuracy(golds, [True] * 6 + [True, False]) == (1.0 + 0.5) / 2
    many = [str(k) for k in range(11)]
    assert balanced_accuracy(many, [True] * 11) is None  # 11 distinct references: not categorical


def test_the_demo_that_answered_no_to_everything_is_flagged_twice():
    """The demo task's case: 400 parity questions, 189 of them odd, and `no` to all of them."""
    golds = ["no"] * 189 + ["yes"] * 211
    report = shortcut_report(parity_records(["No."] * 400, golds), "normalized_match")
    assert report["answer_distribution"]["top"] == [{"answer": "no", "count": 400, "share": 1.0}]
    assert report["majority_baseline"]["answer"] == "yes" and report["majority_baseline"]["accuracy"] == 211 / 400
    assert report["balanced_accuracy"] == 0.5
    flag = report["shortcut"]
    assert flag["flag"] and flag["kinds"] == ["one_answer", "below_baseline"]
    assert flag["reasons"][0] == "`no` is 100.0% of the answers (400 of 400)"
    assert flag["reasons"][1] == "accuracy 47.2% (95% 42.4%-52.1%) does not beat always answering `yes` (52.8%)"


def test_a_model_that_beats_the_baseline_with_varied_answers_is_not_flagged():
    golds = ["no"] * 50 + ["yes"] * 50
    answers = golds[:45] + ["yes"] * 5 + golds[50:]  # 95 right, both answers given
    records = parity_records(answers, golds)
    report = shortcut_report(records, "normalized_match")  # 95% right: Wilson's 95% interval from 88.8%
    assert report["shortcut"] == {"flag": False, "kinds": [], "reasons": []}
    assert report["balanced_accuracy"] == (0.9 + 1.0) / 2


def test_the_baseline_flag_is_interval_aware():
    distribution = answer_distribution(["no", "yes"] * 10)
    baseline = majority_baseline(["no"] * 12 + ["yes"] * 8)  # 60%
    above_but_noisy = shortcut_flag(distribution, baseline, 0.7, list(wilson_interval(14, 20)))  # 48%-85%
    assert above_but_noisy["kinds"] == ["below_baseline"]
    clearly_above = shortcut_flag(distribution, baseline, 0.95, [0.75, 0.99])
    assert not clearly_above["flag"]


def test_one_answer_is_flagged_from_80_percent_and_a_missing_answer_is_not_an_answer():
    baseline = majority_baseline(["no", "yes"] * 10)
    below = shortcut_flag(answer_distribution(["no"] * 15 + ["yes"] * 5), baseline, 1.0, [0.9, 1.0])
    at = shortcut_flag(answer_distribution(["no"] * 16 + ["yes"] * 4), baseline, 1.0, [0.9, 1.0])
    silent = shortcut_flag(answer_distribution([None] * 20), baseline, 1.0, [0.9, 1.0])
    assert not below["flag"] and at["kinds"] == ["one_answer"] and not silent["flag"]


def test_sampled_records_count_every_completion_and_each_problems_fraction():
    records = [
        {"gold": "no", "samples": [{"completion": "no"}, {"completion": "No."}], "correct": {"normalized_match": 1.0}},
        {"gold": "yes", "samples": [{"completion": "no"}, {"completion": "yes"}], "correct": {"normalized_match": 0.5}},
    ]
    report = shortcut_report(records, "normalized_match")
    assert report["answer_distribution"]["answers"] == 4
    assert report["answer_distribution"]["top"][0] == {"answer": "no", "count": 3, "share": 0.75}
    assert report["balanced_accuracy"] == 0.75
    mean, low, high = mean_interval([1.0, 0.5])  # mean@2 and its interval, as summary.json gives them
    assert report["shortcut"]["reasons"] == [
        f"accuracy 75.0% (95% {100 * low:.1f}%-{100 * high:.1f}%) does not beat always answering `no` (50.0%)"
    ]


def test_compare_pairs_the_trained_model_against_the_majority_baseline():
    golds = ["no"] * 3 + ["yes"] * 5
    records = {r["index"]: r for r in parity_records(["no"] * 8, golds)}
    summary = {
        "filters": {"normalized_match": {}},
        **shortcut_report(list(records.values()), "normalized_match"),
    }
    change = against_baseline(records, list(records), summary)
    expected = paired_difference([g == "yes" for g in golds], [g == "no" for g in golds])
    assert change["answer"] == "yes" and change["baseline"] == 5 / 8 and change["trained"] == 3 / 8
    assert change["difference"] == expected["difference"] and change["low"] == expected["low"]
    assert change["trained_right_baseline_wrong"] == 3 and change["baseline_right_trained_wrong"] == 5
    assert against_baseline(records, list(records), {"filters": {}}) is None  # GSM8K's protocols: no report


def test_the_console_lines_name_the_answers_the_baseline_and_the_flag():
    golds = ["no"] * 6 + ["yes"] * 2
    summary = shortcut_report(parity_records(["no"] * 8, golds), "normalized_match")
    answers, baseline, flag = report_lines(summary)
    assert answers == "answers (normalized_match's reading, 1 distinct): `no` 100.0%"
    assert baseline.startswith("majority baseline: always `no` 75.0% (95% 40.9%-92.9%, 2 distinct reference")
    assert baseline.endswith("; balanced accuracy 50.0%")
    assert flag.startswith("shortcut: `no` is 100.0% of the answers (8 of 8); accuracy 75.0%")
    assert report_lines({"filters": {}}) == []


# --- the report in grpo eval, --compare and --checkpoints: real generations of a tiny model ---


def parity_task(tmp_path, model_dir, **sections):
    """Yes/no questions whose held-out references are 6 `no` and 2 `yes`, scored by normalized_match."""
    train = [{"question": f"Is {n} even? Answer yes or no.", "answer": "no" if n % 2 else "yes"} for n in range(16)]
    held_out = [
        {"question": f"Is {n} even? Answer yes or no.", "answer": "no" if i < 6 else "yes"}
        for i, n in enumerate(range(101, 109))
    ]
    write_jsonl(train, tmp_path / "train.jsonl")
    write_jsonl(held_out, tmp_path / "held_out.jsonl")
    return write_recipe(
        tmp_path,
        model_dir,
        data={"source": str(tmp_path / "train.jsonl"), "answer_format": "plain"},
        rewards=[{"name": "normalized_match"}],
        eval={"protocol": "task", "source": str(tmp_path / "held_out.jsonl"), "max_new_tokens": 4},
        **sections,
    )


def test_grpo_eval_task_writes_and_prints_the_shortcut_report(tmp_path, tiny_llama):
    recipe = parity_task(tmp_path, tiny_llama)
    out = tmp_path / "out"
    result = runner.invoke(app, ["eval", "model", str(recipe), "--output", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    distribution = summary["answer_distribution"]
    assert distribution["verifier"] == "normalized_match" and distribution["answers"] == 8 == len(records)
    assert sum(t["count"] for t in distribution["top"]) + distribution["other"]["count"] == 8
    assert summary["majority_baseline"]["answer"] == "no" and summary["majority_baseline"]["accuracy"] == 0.75
    assert summary["balanced_accuracy"] is not None
    accuracy = summary["filters"]["normalized_match"]
    assert accuracy["ci95"][0] <= 0.75  # a random tiny model does not beat answering `no` to everything
    assert "below_baseline" in summary["shortcut"]["kinds"] and summary["shortcut"]["flag"]
    given = [t for t in distribution["top"] if t["answer"] is not None]
    assert ("one_answer" in summary["shortcut"]["kinds"]) == bool(given and given[0]["share"] >= 0.8)
    assert "majority baseline: always `no` 75.0%" in result.output
    assert "does not beat always answering `no` (75.0%)" in result.output


def test_a_sampled_task_evaluation_counts_every_completions_answer(tmp_path, tiny_llama):
    recipe = parity_task(tmp_path, tiny_llama)
    args = ["--samples", "2", "--temperature", "1.0", "--output", str(tmp_path / "out"), "--json"]
    result = runner.invoke(app, ["eval", "model", str(recipe), *args])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["results"][0]
    assert summary["answer_distribution"]["answers"] == 16 == summary["completions"]  # 8 problems x 2 samples
    assert summary["majority_baseline"]["problems"] == 8 and summary["majority_baseline"]["accuracy"] == 0.75
    mean = summary["filters"]["normalized_match"]
    assert ("below_baseline" in summary["shortcut"]["kinds"]) == (mean["ci95"][0] <= 0.75)


def fake_run(tmp_path, recipe, tiny_llama):
    """A run directory as grpo train leaves it, with the tiny model's full weights as its checkpoint and final model
    (the same weights as the base: the figures are the base's, the report must still be there)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    shutil.copy(recipe, run_dir / "recipe.yaml")
    for folder in ("checkpoint-1", "final"):
        shutil.copytree(tiny_llama, run_dir / folder)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 2, "loss": 0.1, "reward": 0.5}) + "\n")
    return run_dir


def test_compare_and_checkpoints_carry_the_report_and_compare_pairs_against_the_baseline(tmp_path, tiny_llama):
    run_dir = fake_run(tmp_path, parity_task(tmp_path, tiny_llama), tiny_llama)
    compared = runner.invoke(app, ["eval", "compare", str(run_dir)])
    assert compared.exit_code == 0, compared.output
    root = run_dir / "eval" / "task-held_out"
    comparison = json.loads((root / "comparison.json").read_text())
    change = comparison["majority_baseline"]
    assert change["answer"] == "no" and change["baseline"] == 0.75
    assert change["trained"] == comparison["filters"]["normalized_match"]["trained"]
    assert "trained against always `no` (normalized_match)" in compared.output
    for side in ("base", "trained"):
        assert "shortcut" in json.loads((root / side / "summary.json").read_text())

    curve = runner.invoke(app, ["eval", "curve", str(run_dir)])
    assert curve.exit_code == 0, curve.output
    rows = [json.loads(line) for line in (root.with_name("task-held_out-checkpoints") / "curve.jsonl").open()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:
        summary = json.loads((root.with_name("task-held_out-checkpoints") / row["model"] / "summary.json").read_text())
        assert row["shortcut"] == summary["shortcut"]["kinds"]


# --- validation while training: the flag in metrics.jsonl, once on the console, a cross on the report ---


def test_validation_rows_carry_the_report_and_the_console_says_each_new_flag_once(tmp_path):
    from rich.console import Console

    from grpo_cli.eval.training_validation import validation_metrics
    from grpo_cli.train.display import TrainingDisplay

    golds = ["no"] * 6 + ["yes"] * 2
    varied = parity_records(["yes", "no", "no", "yes", "no", "no", "yes", "no"], golds)
    collapsed = parity_records(["no"] * 8, golds)

    def row(step, records):
        correct = sum(r["correct"]["normalized_match"] for r in records)
        ci = list(wilson_interval(correct, 8))
        summary = {
            "problems": 8,
            "filters": {"normalized_match": {"accuracy": correct / 8, "correct": correct, "ci95": ci}},
            "format_rate": None,
            "mean_new_tokens": 1.0,
            "cut_rate": 0.0,
            **shortcut_report(records, "normalized_match"),
        }
        return {"step": step, **validation_metrics(summary), "val/seconds": 0.1}

    rows = [row(0, varied), row(4, collapsed), row(8, collapsed)]
    assert rows[1]["val/shortcut"] == ["one_answer", "below_baseline"]
    assert rows[1]["val/top_answer"] == "no" and rows[1]["val/top_answer_share"] == 1.0
    assert rows[1]["val/majority_baseline"] == 0.75 and rows[1]["val/balanced_accuracy"] == 0.5
    assert rows[0]["val/shortcut"] == ["below_baseline"] and "val/shortcut_reason" in rows[0]
    console = Console(record=True, width=200)
    display = TrainingDisplay(console, total_steps=8)
    for r in rows:
        display.validated(r)
    flagged = [line for line in console.export_text().splitlines() if line.startswith("shortcut flagged")]
    assert flagged == [
        f"shortcut flagged at step 0: {rows[0]['val/shortcut_reason']}",
        f"shortcut flagged at step 4: {rows[1]['val/shortcut_reason']}",  # a new kind: one answer; step 8 is silent
    ]


def test_the_report_marks_flagged_validations_with_a_red_cross(tmp_path):
    import matplotlib.image

    from grpo_cli.runs.validation_curve import shortcut_points

    steps = [{"step": s, "reward": 0.1 * s, "completions/mean_length": 4.0} for s in (1, 2, 3, 4)]

    def val(step, accuracy, kinds):
        return {"step": step, "val/normalized_match/accuracy": accuracy, "val/problems": 8, "val/shortcut": kinds}

    flagged = [val(0, 0.2, []), *steps[:2], val(2, 0.45, ["one_answer"]), *steps[2:], val(4, 0.47, ["one_answer"])]
    clean = [{**r, "val/shortcut": []} if "val/shortcut" in r else r for r in flagged]
    assert shortcut_points(flagged) == [(2, 0.45), (4, 0.47)] and shortcut_points(clean) == []
    reds = []
    for name, rows in (("flagged", flagged), ("clean", clean)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        result = runner.invoke(app, ["report", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        image = matplotlib.image.imread(tmp_path / name / "report.png")
        reds.append(int(((image[..., 0] > 0.9) & (image[..., 1] < 0.15) & (image[..., 2] < 0.15)).sum()))
    assert reds[0] > 0 and reds[1] == 0


# ---------------------------------------------------------------- careless and hostile input


def test_a_multiple_choice_answer_a_is_an_answer_not_an_article():
    golds = ["A", "B", "A", "A", "C", "D", "A", "B"]
    report = shortcut_report(parity_records(["<answer>A</answer>"] * 8, [g.lower() for g in golds]), "normalized_match")
    assert report["majority_baseline"]["answer"] == "a" and report["majority_baseline"]["accuracy"] == 0.5
    assert report["answer_distribution"]["top"][0] == {"answer": "a", "count": 8, "share": 1.0}
    assert report["shortcut"]["kinds"] == ["one_answer", "below_baseline"]


def test_references_no_verifier_reads_give_no_baseline_rather_than_always_none():
    """Yes/no references under a number check: nothing to compare against, said so, and --compare skips it."""
    records = [
        {"index": i, "gold": g, "completion": "yes", "correct": {"correctness": 0.0}} for i, g in enumerate("yn")
    ]
    report = shortcut_report(records, "correctness")
    assert report["majority_baseline"]["answer"] is None and report["trivial_rules"] is None
    assert "below_baseline" not in report["shortcut"]["kinds"]
    lines = report_lines(report)
    assert lines[1] == "majority baseline: none, no reference answer reads as number under correctness"
    assert not any("`None`" in line for line in lines)
    assert against_baseline({i: r for i, r in enumerate(records)}, [0, 1], report) is None


def test_an_enormous_reference_is_written_as_a_float_not_three_hundred_digits():
    assert read_reference("1e308", "number") == "1e+308" and read_reference("18.0", "number") == "18"


def test_trivial_rules_read_a_conversations_question():
    from grpo_cli.eval.shortcuts import trivial_rules

    chat = [{"role": "user", "content": "Ava has 5 apples and gets 3 more."}]
    assert trivial_rules([chat], ["8"], "number")["accuracy"]["sum"] == 1.0


@pytest.mark.parametrize(
    "record",
    [
        {"index": 0, "gold": "1", "correct": {"correctness": 1.0}},  # no completion
        {"index": 0, "completion": "1", "correct": {"correctness": 1.0}},  # no reference
        {"index": 0, "gold": "1", "completion": "1", "correct": {"correctness": float("nan")}},
        {"index": 0, "gold": "1", "samples": None, "correct": {"correctness": 1.0}},
        {"index": 0, "gold": "1", "samples": [{"text": "1"}], "correct": {"correctness": 1.0}},
    ],
)
def test_a_hand_edited_record_without_what_the_report_reads_is_refused_in_one_line(tmp_path, record):
    from grpo_cli.errors import UserError
    from grpo_cli.eval.store import PredictionStore

    (tmp_path / "settings.json").write_text("{}")
    (tmp_path / "predictions.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(UserError, match="line 1 of .* is not a grpo eval record"):
        PredictionStore(tmp_path, {})
