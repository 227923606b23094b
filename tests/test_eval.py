"""`grpo eval`: answer extraction as lm-eval does it, intervals, resuming, and base-vs-trained comparison."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import write_recipe
from grpo_cli.cli import app
from grpo_cli.eval.problems import Problem, lm_eval_prompts
from grpo_cli.eval.scoring import score, summarize
from grpo_cli.eval.stats import paired_difference, wilson_interval
from grpo_cli.generation.base import cut_at_stops, length_sorted_batches
from rewards.gsm8k_task import LM_EVAL_FLEXIBLE, LM_EVAL_STRICT, lm_eval_exact_match, regex_filter

runner = CliRunner()
GOLD_TEXT = "She pays 2 * 617 = <<2*617=1234>>1234 dollars.\n#### 1234"
PROBLEM = Problem(0, "How much?", GOLD_TEXT, "1234")


@pytest.mark.parametrize(
    "completion, strict, flexible, strict_ok, flexible_ok",
    [
        ("So she pays 1,234.\n#### 1,234", "1,234", "1,234", True, True),  # commas
        ("The total is $1,234.", "[invalid]", "$1,234.", False, True),  # `$` and a trailing period
        ("#### 1234.\nQuestion", "1234.", "1234.", True, True),
        ("It costs 5 then 7 then 1234", "[invalid]", "1234", False, True),  # several numbers: the last
        ("#### 1234 but then 99", "1234", "99", True, False),  # strict takes the first ####, flexible the last number
        ("She lost -1234 dollars", "[invalid]", "-1234", False, False),  # negative
        ("#### 1234.0", "1234.0", "1234.0", False, False),  # lm-eval compares strings: 1234.0 is not 1234
        ("no idea", "[invalid]", "[invalid]", False, False),  # no number at all
        ("#### 3.5", "3.5", "3.5", False, False),  # decimals survive normalisation
    ],
)
def test_lm_eval_filters_and_exact_match(completion, strict, flexible, strict_ok, flexible_ok):
    assert regex_filter(completion, LM_EVAL_STRICT) == strict
    assert regex_filter(completion, LM_EVAL_FLEXIBLE, group_select=-1) == flexible
    result = score("lm-eval", completion, PROBLEM)
    assert result["correct"] == {"strict-match": strict_ok, "flexible-extract": flexible_ok}
    assert result["formatted"] == (strict != "[invalid]")


def test_lm_eval_exact_match_normalises_reference_and_prediction_alike():
    assert lm_eval_exact_match("-3", "so\n#### -3")
    assert lm_eval_exact_match("$18.", "#### 18")
    assert not lm_eval_exact_match("18", "#### 180")


@pytest.mark.parametrize(
    "completion, strict, flexible, correct",
    [
        ("<reasoning>2*617</reasoning>\n<answer>\n$1,234.\n</answer>", "1234", "1234", (True, True)),
        ("<answer>1234.0</answer>", "1234.0", "1234.0", (True, True)),  # numeric comparison under `chat`
        ("I think 12 and then 1234", None, "1234", (False, True)),  # no tag: only flexible
        ("<answer>about 5 or 1234</answer> maybe 7", "1234", "1234", (True, True)),  # the last number in the tag
        ("<answer>unknown</answer> 1234", None, "1234", (False, True)),
        ("-1234 is wrong", None, "-1234", (False, False)),
        ("", None, None, (False, False)),
    ],
)
def test_chat_protocol_extraction(completion, strict, flexible, correct):
    result = score("chat", completion, PROBLEM)
    assert result["extracted"] == {"strict-match": strict, "flexible-extract": flexible}
    assert (result["correct"]["strict-match"], result["correct"]["flexible-extract"]) == correct
    assert result["formatted"] == (strict is not None)


@pytest.mark.parametrize(
    "completion, strict, flexible",
    [
        ("2 * 617 = 1234\n#### 1,234", "1234", "1234"),
        ("#### 1234\nThe answer is: 1234", "1234", "1234"),
        ("#### 1234 then rambling about 7 and 99", "1234", "1234"),  # the marked number, not the last one
        ("#### 5\n#### 1234", "1234", "1234"),  # the last marker is the final answer
        ("<answer>1234</answer>", None, "1234"),  # asked for ####: a tag is not the asked format
        ("It is 1234", None, "1234"),
        ("#### none", None, None),
    ],
)
def test_chat_protocol_with_hashes_marker(completion, strict, flexible):
    result = score("chat", completion, PROBLEM, marker="hashes")
    assert result["extracted"] == {"strict-match": strict, "flexible-extract": flexible}
    assert result["formatted"] == (strict is not None)
    assert result["correct"]["strict-match"] == (strict == "1234")


def test_summary_reports_format_length_and_the_share_cut_at_the_budget():
    def record(tokens, formatted):
        return {
            "correct": {"strict-match": formatted, "flexible-extract": True},
            "formatted": formatted,
            "new_tokens": tokens,
        }

    records = [record(512, False), record(100, True), record(511, True), record(300, False)]
    summary = summarize(records, wall_s=2.0, new_problems=4, new_tokens=1423, budget=512)
    assert summary["cut_rate"] == 0.25  # only the row that reached the budget; 511 ended by itself
    assert summary["format_rate"] == 0.5 and summary["mean_new_tokens"] == 1423 / 4
    assert summary["filters"]["strict-match"]["correct"] == 2 and summary["session"]["problems_per_s"] == 2.0


def test_wilson_interval_values():
    # Reference values (Wilson 1927, z = 1.96): 5/10 -> 0.2366..0.7634, 0/10 -> 0..0.2775, 10/10 -> 0.7225..1.
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    low, high = wilson_interval(81, 200)
    assert low < 0.405 < high and high - low > 0.13  # 200 problems: a 2-point change is well inside the noise


def test_paired_difference_counts_only_changed_problems():
    before = [True, True, False, False, True, False]
    after = [True, False, True, True, True, False]
    result = paired_difference(before, after)
    assert (result["fixed"], result["broken"], result["n"]) == (2, 1, 6)
    assert result["difference"] == pytest.approx(1 / 6)
    assert result["low"] < result["difference"] < result["high"]
    same = paired_difference(before, before)
    assert same["difference"] == same["low"] == same["high"] == 0.0


def test_paired_interval_stays_within_a_possible_change_on_few_problems():
    # Two problems, one broken: the normal approximation alone gives -148 to +48 points.
    result = paired_difference([True, True], [True, False])
    assert result["difference"] == pytest.approx(-0.5)
    assert result["low"] == -1.0
    assert result["difference"] < result["high"] <= 1.0


def test_lm_eval_prompts_follow_its_sampler_and_format():
    pool = [{"question": f"q{i}", "answer": f"a{i}\n#### {i}"} for i in range(50)]
    problems = [Problem(i, f"test {i}", "#### 1", "1") for i in range(5)]
    prompts = lm_eval_prompts(problems, pool, 5, 1234)
    assert prompts[:3] == lm_eval_prompts(problems[:3], pool, 5, 1234)  # a limit does not change earlier prompts
    assert len(set(prompts)) == 5
    first = prompts[0]
    assert first.endswith("\n\nQuestion: test 0\nAnswer:") and first.count("Question: ") == 6
    assert first.startswith("Question: q") and "\nAnswer: a" in first


def test_batches_are_length_sorted_and_stops_cut():
    assert length_sorted_batches([3, 9, 1, 9, 5], 2, ["c", "b", "e", "a", "d"]) == [[3, 1], [4, 0], [2]]
    assert cut_at_stops(" 42\n\nQuestion: next", ["Question:", "</s>"]) == " 42\n\n"


# ---------------------------------------------------------------- the command on a tiny model


def eval_cli(*args: str):
    return runner.invoke(app, ["eval", *args])


def predictions(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "predictions.jsonl").read_text().splitlines()]


def test_eval_resumes_after_interruption_without_losing_or_repeating(tmp_path, tiny_llama):
    out = tmp_path / "out"
    common = [
        "--model",
        str(tiny_llama),
        "--data",
        "generated",
        "--limit",
        "6",
        "--batch-size",
        "4",
        "--max-new-tokens",
        "6",
        "--output",
        str(out),
        "model.dtype=float32",
    ]
    first = eval_cli(*common)
    assert first.exit_code == 0, first.output
    complete = predictions(out)
    assert sorted(r["index"] for r in complete) == list(range(6))
    assert {"question", "gold", "completion", "extracted", "correct", "formatted", "new_tokens"} <= set(complete[0])

    # A kill mid-write: two whole records survive, the third is cut short.
    lines = (out / "predictions.jsonl").read_text().splitlines(keepends=True)
    (out / "predictions.jsonl").write_text("".join(lines[:2]) + lines[2][:15])
    second = eval_cli(*common, "--json")
    assert second.exit_code == 0, second.output
    resumed = predictions(out)
    assert sorted(r["index"] for r in resumed) == list(range(6))  # none lost, none twice
    assert resumed[:2] == complete[:2]  # what was scored stays as it was
    summary = json.loads(second.stdout)["results"][0]
    assert summary["problems"] == 6 and summary["session"]["problems"] == 4
    assert summary == json.loads((out / "summary.json").read_text())
    assert set(summary["filters"]) == {"strict-match", "flexible-extract"}
    for name, f in summary["filters"].items():
        assert f["correct"] == sum(bool(r["correct"][name]) for r in resumed)
        assert f["ci95"] == pytest.approx(list(wilson_interval(f["correct"], 6)))

    other = eval_cli(*common[:-1], "model.dtype=bfloat16")  # same output, other settings: refuse, keep the file
    assert other.exit_code == 2 and "other settings" in other.output and "dtype" in other.output
    assert predictions(out) == resumed
    # The same model by another path is the same setting: the evaluation continues (nothing is left to score).
    respelled = tiny_llama.parent / ".." / tiny_llama.parent.name / tiny_llama.name
    again = eval_cli("--model", str(respelled), *common[2:])
    assert again.exit_code == 0, again.output
    assert predictions(out) == resumed
    # Nothing left to score: the summary keeps the timing of the session that generated, not an empty one.
    assert json.loads((out / "summary.json").read_text())["session"] == summary["session"]


def test_eval_lm_eval_protocol_on_local_files(tmp_path, tiny_llama):
    from conftest import write_jsonl
    from rewards.gsm8k_task import generate_problems

    data = tmp_path / "gsm"
    data.mkdir()
    write_jsonl(generate_problems(5, seed=3), data / "test.jsonl")
    missing = eval_cli(
        "--model",
        str(tiny_llama),
        "--protocol",
        "lm-eval",
        "--data",
        str(data / "test.jsonl"),
        "--output",
        str(tmp_path / "out"),
    )
    assert missing.exit_code == 2 and "eval.fewshot_source" in missing.output
    assert not (tmp_path / "out").exists()  # a mistake leaves nothing behind
    write_jsonl(generate_problems(20, seed=4), data / "train.jsonl")
    result = eval_cli(
        "--model",
        str(tiny_llama),
        "--protocol",
        "lm-eval",
        "--data",
        str(data / "test.jsonl"),
        "--max-new-tokens",
        "5",
        "--output",
        str(tmp_path / "out"),
        "model.dtype=float32",
    )
    assert result.exit_code == 0, result.output
    records = predictions(tmp_path / "out")
    assert len(records) == 5
    golds = {i: row["answer"] for i, row in enumerate(generate_problems(5, seed=3))}
    for r in records:
        completion = r["completion"]
        assert "Question:" not in completion  # lm-eval's stop sequence ends the completion
        first_hashes = re.search(r"#### (\-?[0-9\.\,]+)", completion)
        assert r["extracted"]["strict-match"] == (first_hashes.group(1).strip() if first_hashes else "[invalid]")
        numbers = re.findall(r"-?[$0-9.,]{2,}|-?[0-9]+", completion)
        assert r["extracted"]["flexible-extract"] == (numbers[-1].strip() if numbers else "[invalid]")
        assert r["formatted"] == bool(first_hashes)
        for name, value in r["extracted"].items():
            assert r["correct"][name] == lm_eval_exact_match(value, golds[r["index"]])


def test_eval_user_mistakes(tmp_path, tiny_llama):
    nothing = eval_cli("--output", str(tmp_path / "never"))
    assert nothing.exit_code == 2 and "nothing to evaluate" in nothing.output
    not_run = eval_cli("--run", str(tmp_path))
    assert not_run.exit_code == 2 and "not a run directory" in not_run.output
    bad_limit = eval_cli("--model", str(tiny_llama), "--limit", "0")
    assert bad_limit.exit_code == 2 and "eval.limit" in bad_limit.output
    bad_protocol = eval_cli("--model", str(tiny_llama), "--protocol", "lmeval")
    assert bad_protocol.exit_code == 2 and "eval.protocol" in bad_protocol.output
    # Offline, the hub default cannot load: the message names the key the user set (--data), not training's.
    offline = eval_cli("--model", str(tiny_llama), "--output", str(tmp_path / "offline"))
    assert (
        offline.exit_code == 2
        and "eval.source (--data)" in offline.output
        and "data.source" not in offline.output.replace("eval.source", "")
    )
    assert not (tmp_path / "offline").exists()
    two_runs = eval_cli("--run", str(tmp_path), "--checkpoints", str(tmp_path))
    assert two_runs.exit_code == 2 and "give one of --run, --compare and --checkpoints" in two_runs.output
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "recipe.yaml").write_text("{}")
    (tmp_path / "run" / "checkpoint-3").mkdir()
    one_checkpoint = eval_cli("--checkpoints", str(tmp_path / "run" / "checkpoint-3"))
    assert one_checkpoint.exit_code == 2 and "not one checkpoint" in one_checkpoint.output
    for result in (nothing, not_run, bad_limit, bad_protocol, offline, two_runs, one_checkpoint):
        assert "Traceback" not in result.output


@pytest.mark.slow  # real training steps
def test_compare_base_and_trained_lora_run(tmp_path, tiny_llama):
    recipe = write_recipe(
        tmp_path, tiny_llama, lora={"r": 4, "dropout": 0.0}, training={"max_steps": 1, "save_steps": 1}
    )
    trained = runner.invoke(app, ["train", str(recipe)])
    assert trained.exit_code == 0, trained.output
    run_dir = tmp_path / "run"
    result = eval_cli("--compare", str(run_dir), "--data", "generated", "--limit", "4", "--max-new-tokens", "6")
    assert result.exit_code == 0, result.output
    assert "trained vs base" in result.output and "fixed" in result.output
    root = run_dir / "eval" / "chat-test"
    comparison = json.loads((root / "comparison.json").read_text())
    assert comparison["problems"] == 4
    base, after = predictions(root / "base"), predictions(root / "trained")
    assert [r["question"] for r in sorted(base, key=lambda r: r["index"])] == [
        r["question"] for r in sorted(after, key=lambda r: r["index"])
    ]  # the same problems for both
    settings = json.loads((root / "trained" / "settings.json").read_text())
    assert settings["adapter"] == str(run_dir / "final")
    for label, records in (("base", base), ("trained", after)):
        behaviour = comparison[label + "_behaviour"]
        assert behaviour["cut_rate"] == sum(r["new_tokens"] >= 6 for r in records) / 4
        assert behaviour["mean_new_tokens"] == sum(r["new_tokens"] for r in records) / 4
    for name, f in comparison["filters"].items():
        changed = sum(
            bool(a["correct"][name]) != bool(b["correct"][name])
            for a, b in zip(sorted(base, key=lambda r: r["index"]), sorted(after, key=lambda r: r["index"]))
        )
        assert f["fixed"] + f["broken"] == changed

    card = (run_dir / "README.md").read_text()  # the model card now carries the evaluation
    assert (
        "## Evaluation (GSM8K" in card
        and "| chat, test | base | 4 |" in card
        and "| chat, test | trained | 4 |" in card
    )

    # A second compare reuses the base evaluation (--base): nothing is regenerated for it, and its file is unchanged.
    before = (root / "base" / "predictions.jsonl").read_bytes()
    again = eval_cli(
        "--compare",
        str(run_dir),
        "--base",
        str(root / "base"),
        "--output",
        str(tmp_path / "second"),
        "--data",
        "generated",
        "--limit",
        "4",
        "--max-new-tokens",
        "6",
    )
    assert again.exit_code == 0, again.output
    assert (root / "base" / "predictions.jsonl").read_bytes() == before
    assert json.loads((tmp_path / "second" / "comparison.json").read_text())["base"] == str(root / "base")
    assert not (tmp_path / "second" / "base").exists()
    # ... but not one made with other settings.
    other = eval_cli(
        "--compare",
        str(run_dir),
        "--base",
        str(root / "base"),
        "--output",
        str(tmp_path / "third"),
        "--data",
        "generated",
        "--limit",
        "4",
        "--max-new-tokens",
        "7",
    )
    assert other.exit_code == 2 and "max_new_tokens" in other.output
    alone = eval_cli("--run", str(run_dir), "--base", str(root / "base"))
    assert alone.exit_code == 2 and "--compare" in alone.output

    # A checkpoint of the run compares the same way; the run's card (the final model's) is left as it is.
    card_before = (run_dir / "README.md").read_bytes()
    checkpoint = eval_cli(
        "--compare",
        str(run_dir / "checkpoint-1"),
        "--base",
        str(root / "base"),
        "--data",
        "generated",
        "--limit",
        "4",
        "--max-new-tokens",
        "6",
    )
    assert checkpoint.exit_code == 0, checkpoint.output
    at_checkpoint = run_dir / "eval" / "chat-test-checkpoint-1"
    assert json.loads((at_checkpoint / "trained" / "settings.json").read_text())["adapter"] == str(
        run_dir / "checkpoint-1"
    )
    assert json.loads((at_checkpoint / "comparison.json").read_text())["problems"] == 4
    assert (run_dir / "README.md").read_bytes() == card_before

    # The run copied to a machine without its training data or reward file: evaluation reads neither.
    import yaml

    from conftest import write_jsonl
    from rewards.gsm8k_task import generate_problems

    resolved = yaml.safe_load((run_dir / "recipe.yaml").read_text())
    resolved["data"]["source"] = str(tmp_path / "gone" / "train.jsonl")
    resolved["rewards"].append({"name": str(tmp_path / "gone" / "my_rewards.py") + ":score"})
    (run_dir / "recipe.yaml").write_text(yaml.safe_dump(resolved))
    test_file = write_jsonl(generate_problems(3, seed=5), tmp_path / "test.jsonl")
    copied = eval_cli(
        "--run", str(run_dir), "--data", str(test_file), "--max-new-tokens", "4", "--output", str(tmp_path / "copied")
    )
    assert copied.exit_code == 0, copied.output
    assert len(predictions(tmp_path / "copied")) == 3
