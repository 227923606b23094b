"""`grpo eval --samples N --temperature T`: the figures on hand-made cases (hostile answers included, never run as
code), then real sampled generations of the tiny models: N completions per problem, consistent figures, a resume that
redoes only unfinished problems with the same seeds, refusals of a mismatched folder, and --compare."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly, write_recipe
from grpo_cli.cli import app
from grpo_cli.errors import UserError
from grpo_cli.eval.problems import Problem
from grpo_cli.eval.sampled import check_sampling, majority_vote, sampled_record, summarize_sampled, vote_key
from grpo_cli.eval.scoring import FILTERS, score
from grpo_cli.eval.stats import mean_interval, paired_difference, paired_mean_difference, pass_at_k, wilson_interval
from grpo_cli.generation.base import Generated
from grpo_cli.generation.sampling import Sampling, draw
from grpo_cli.recipe.eval_section import EvalSection

runner = CliRunner()
PROBLEM = Problem(0, "How much?", "2 * 617 = 1234\n#### 1234", "1234")
SAMPLING = Sampling(samples=4, temperature=1.0, top_p=1.0, seed=0)


# ---------------------------------------------------------------- the figures on hand-made cases


def test_mean_interval_is_normal_over_problems():
    values = [1.0, 0.5, 0.0, 0.25]
    mean, low, high = mean_interval(values)
    sd = math.sqrt(sum((v - 0.4375) ** 2 for v in values) / 3)
    assert mean == 0.4375
    assert (low, high) == pytest.approx((0.4375 - 1.959964 * sd / 2, 0.4375 + 1.959964 * sd / 2), abs=1e-6)
    assert mean_interval([0.0, 0.0, 0.0]) == (0.0, 0.0, 0.0)  # every problem alike: no spread to measure
    assert mean_interval([1.0, 0.0]) == (0.5, 0.0, 1.0)  # clipped to [0, 1]
    assert mean_interval([0.75]) == (0.75, 0.0, 1.0) and mean_interval([]) == (0.0, 0.0, 1.0)


def test_paired_mean_difference_generalises_the_paired_difference():
    before, after = [True, True, False, False, True, False], [True, False, True, True, True, False]
    as_bools = paired_difference(before, after)
    as_values = paired_mean_difference([float(b) for b in before], [float(a) for a in after])
    for key in ("n", "difference", "low", "high"):
        assert as_values[key] == pytest.approx(as_bools[key])
    assert (as_values["improved"], as_values["worsened"]) == (as_bools["fixed"], as_bools["broken"])
    change = paired_mean_difference([0.25, 0.5, 0.0], [0.75, 0.5, 0.25])
    assert change["difference"] == pytest.approx(0.25) and (change["improved"], change["worsened"]) == (2, 0)
    assert change["low"] < 0.25 < change["high"]
    with pytest.raises(ValueError):
        paired_mean_difference([0.5], [])


def test_pass_at_k_unbiased_estimator():
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)  # k=1: the fraction right
    assert pass_at_k(4, 0, 3) == 0.0 and pass_at_k(4, 3, 2) == 1.0 and pass_at_k(4, 1, 4) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_majority_vote_first_seen_wins_a_tie_and_missing_answers_do_not_vote():
    assert majority_vote(["7", "9", "9", "7"], [7.0, 9.0, 9.0, 7.0], [False, True, True, False]) == {
        "answer": "7",
        "votes": 2,
        "correct": False,
    }
    assert majority_vote([None, None, "5"], [None, None, 5.0], [False, False, True])["answer"] == "5"
    assert majority_vote([None, None], [None, None], [False, False]) == {"answer": None, "votes": 0, "correct": False}


@pytest.mark.parametrize(
    "value, chat_key, lm_eval_key",
    [
        ("1,234", 1234.0, "1234"),
        ("$1234.", 1234.0, "1234"),
        ("1234.0", 1234.0, "1234.0"),  # one number to chat's numeric check; another string to lm-eval's
        ("[invalid]", None, None),  # lm-eval's fallback is no answer
        (None, None, None),
        ("__import__('pathlib').Path('PWNED').touch()", None, "__import__('pathlib').path('pwned').touch()"),
        ("1e999", None, "1e999"),  # overflows to infinity: not a number
        ("nan", None, "nan"),
        ("9" * 5000, None, "9" * 5000),
    ],
)
def test_vote_keys_never_evaluate_the_answer(value, chat_key, lm_eval_key, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert vote_key("chat", value) == chat_key
    assert vote_key("lm-eval", value) == lm_eval_key
    assert not (tmp_path / "PWNED").exists()


def fake(index: int, text: str) -> Generated:
    return Generated(index, text, len(text.split()))


def test_a_sampled_record_and_its_summary_on_hand_made_completions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    texts = [
        "<answer>1,234</answer>",
        "so 99 then __import__('os').system('touch PWNED') and 1234",
        "<answer>99</answer>",
        "<answer>$99</answer>; eval('1+1') exec('x')",
    ]
    samples = [fake(k, t) for k, t in enumerate(texts)]
    record = sampled_record(PROBLEM, samples, [score("chat", t, PROBLEM) for t in texts], "chat")
    assert [s["completion"] for s in record["samples"]] == texts
    assert record["correct"] == {"strict-match": 0.25, "flexible-extract": 0.5}
    assert record["passed"] == {"strict-match": True, "flexible-extract": True}
    # 99 twice (as 99 and $99) outvotes 1234 (once, strict): the majority answer is wrong
    assert record["majority"]["strict-match"] == {"answer": "99", "votes": 2, "correct": False}
    # flexible: 1234, 1234, 99, 99: a tie, the first seen wins
    assert record["majority"]["flexible-extract"] == {"answer": "1234", "votes": 2, "correct": True}
    assert record["formatted"] == 0.75
    assert not (tmp_path / "PWNED").exists()

    wrong = sampled_record(
        Problem(1, "q", "#### 5", "5"),
        [fake(k, "none") for k in range(4)],
        [score("chat", "none", PROBLEM)] * 4,
        "chat",
    )
    summary = summarize_sampled([record, wrong], SAMPLING, "chat", FILTERS, 1.0, 2, 40, 512)
    flexible = summary["filters"]["flexible-extract"]
    assert summary["problems"] == 2 and summary["completions"] == 8
    assert flexible["accuracy"] == 0.25 and flexible["correct"] == 2
    assert flexible["ci95"] == list(mean_interval([0.5, 0.0])[1:])
    assert flexible["pass"] == {"accuracy": 0.5, "correct": 1, "ci95": list(wilson_interval(1, 2))}
    assert flexible["majority"]["correct"] == 1 and summary["filters"]["strict-match"]["majority"]["correct"] == 0
    assert flexible["pass_at_k"] == {"1": 0.25, "2": pytest.approx((1 - 1 / 6) / 2)}
    assert summary["format_rate"] == 3 / 8  # over all completions
    assert summary["sampling"]["samples"] == 4 and "majority" not in summary["sampling"]


def test_sampler_seeds_and_top_p():
    import torch

    assert SAMPLING.seed_of(3, 1) == SAMPLING.seed_of(3, 1) < 2**63
    assert len({SAMPLING.seed_of(i, k) for i in range(20) for k in range(8)}) == 160
    assert Sampling(4, 1.0, 1.0, 1).seed_of(3, 1) != SAMPLING.seed_of(3, 1)
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.9]])
    narrow = Sampling(1, 1.0, 0.01, 0)  # only the most likely token is left
    generators = [torch.Generator().manual_seed(s) for s in (1, 2)]
    for _ in range(20):
        assert draw(logits, narrow, generators).tolist() == [1, 0]


def test_sampling_refusals_name_the_flag_and_the_fix():
    with pytest.raises(UserError, match="--samples 4 needs --temperature.*--temperature 1.0"):
        check_sampling(EvalSection(samples=4), uses_tools=False)
    with pytest.raises(UserError, match="eval.top_p"):
        check_sampling(EvalSection(top_p=0.9), uses_tools=False)
    with pytest.raises(UserError, match="tool loop"):
        check_sampling(EvalSection(samples=2, temperature=1.0), uses_tools=True)
    check_sampling(EvalSection(temperature=0.7), uses_tools=False)  # one sampled completion per problem is fine


def test_both_transformers_engines_draw_the_same_completions_whatever_the_batch(tiny_llama):
    """Each completion draws from its own seed: static batches (a logits processor) and continuous batching give
    the same tokens, at any batch size; without sampling both stay greedy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_cli.generation.continuous import ContinuousGenerator
    from grpo_cli.generation.transformers_engine import HFGenerator

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    sampling = Sampling(samples=3, temperature=1.0, top_p=0.9, seed=0)
    prompts = ["What is 2 plus 2?", "Hi", "A longer prompt about shells in boxes"] * 3
    seeds = [sampling.seed_of(i // 3, i % 3) for i in range(9)]

    def tokens(engine, batch_size, drawn=sampling):
        generator = engine(model, tokenizer, 8, [], 512, sampling=drawn)
        return {g.index: g.tokens for batch in generator.generate(prompts, batch_size, seeds=seeds) for g in batch}

    static = tokens(HFGenerator, 4)
    assert static == tokens(ContinuousGenerator, 2) == tokens(ContinuousGenerator, 9)
    assert len({tuple(t) for t in static.values()}) > 3  # the repeated prompts drew different completions
    greedy = tokens(ContinuousGenerator, 4, None)
    assert greedy == tokens(HFGenerator, 4, None) and greedy[0] == greedy[3] == greedy[6]


# ---------------------------------------------------------------- the command on a tiny model


def predictions(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "predictions.jsonl").read_text().splitlines()]


def by_index(directory: Path) -> dict[int, dict]:
    return {r["index"]: r for r in predictions(directory)}


def sampled_eval(model: Path, out: Path, *args: str):
    common = ["--data", "generated", "--limit", "5", "eval.max_new_tokens=6", "model.dtype=float32"]
    return runner.invoke(app, ["eval", "model", "--model", str(model), *common, "--output", str(out), *args])


def test_sampled_eval_writes_n_completions_resumes_and_refuses_other_sampling(tmp_path, tiny_llama):
    out = tmp_path / "out"
    sampled = ["--samples", "4", "--temperature", "1.0"]
    first = sampled_eval(tiny_llama, out, *sampled, "eval.batch_size=4", "--json")
    assert first.exit_code == 0, first.output
    summary = json.loads(first.stdout)["results"][0]
    records = predictions(out)
    assert sorted(r["index"] for r in records) == list(range(5))
    assert all(len(r["samples"]) == 4 and all(s["new_tokens"] <= 6 for s in r["samples"]) for r in records)
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["problems"] == 5 and summary["completions"] == 20
    assert summary["sampling"] | {"mean_interval": None} == {
        "samples": 4,
        "temperature": 1.0,
        "top_p": 1.0,
        "seed": 0,
        "mean_interval": None,
    }
    settings = json.loads((out / "settings.json").read_text())
    assert (settings["samples"], settings["temperature"], settings["seed"]) == (4, 1.0, 0)
    for name, f in summary["filters"].items():
        fractions = [sum(s["correct"][name] for s in r["samples"]) / 4 for r in records]
        assert f["accuracy"] == pytest.approx(sum(fractions) / 5)
        assert f["pass"]["correct"] == sum(any(s["correct"][name] for s in r["samples"]) for r in records)
        assert f["pass"]["accuracy"] >= f["accuracy"]
        assert f["majority"] is not None and 0 <= f["majority"]["correct"] <= f["pass"]["correct"]
        assert f["ci95"][0] <= f["accuracy"] <= f["ci95"][1]

    # A kill mid-write: two whole problems survive, the third is cut short. The rerun (another batch size) redoes
    # the other three with their own seeds: the same completions, and the two kept records are not touched.
    lines = (out / "predictions.jsonl").read_text().splitlines(keepends=True)
    (out / "predictions.jsonl").write_text("".join(lines[:2]) + lines[2][:40])
    second = sampled_eval(tiny_llama, out, *sampled, "eval.batch_size=3", "--json")
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["results"][0]["session"]["problems"] == 3
    resumed = predictions(out)
    assert resumed[:2] == records[:2] and len(resumed) == 5
    assert {i: [s["completion"] for s in r["samples"]] for i, r in by_index(out).items()} == {
        r["index"]: [s["completion"] for s in r["samples"]] for r in records
    }
    assert "mean@4" in sampled_eval(tiny_llama, out, *sampled).output  # the printed view; nothing left to do

    # Other sampling, or none, in the same folder: refused in one line, the file kept as it is.
    kept = (out / "predictions.jsonl").read_bytes()
    for other, differs in (
        (["--samples", "4", "--temperature", "0.7"], "temperature"),
        (["--samples", "2", "--temperature", "1.0"], "samples"),
        ([*sampled, "eval.seed=1"], "seed"),
        ([], "samples: 4 there"),
    ):
        refused = sampled_eval(tiny_llama, out, *other)
        fails_cleanly(refused, "other settings", differs, "choose another --output")
    assert (out / "predictions.jsonl").read_bytes() == kept


def test_samples_without_temperature_is_one_line_and_writes_nothing(tmp_path, tiny_llama):
    out = tmp_path / "never"
    fails_cleanly(sampled_eval(tiny_llama, out, "--samples", "4"), "--samples 4", "--temperature", "leave out")
    fails_cleanly(sampled_eval(tiny_llama, out, "--samples", "4", "--temperature", "0"), "eval.temperature")
    fails_cleanly(sampled_eval(tiny_llama, out, "--samples", "0", "--temperature", "1"), "eval.samples")
    fails_cleanly(sampled_eval(tiny_llama, out, "eval.top_p=0.5"), "eval.top_p", "--temperature")
    assert not out.exists()


def test_sampled_task_protocol_says_majority_is_not_available(tmp_path, tiny_llama):
    rewards = [{"name": "correctness"}, {"name": "strict_format"}]
    recipe = write_recipe(tmp_path, tiny_llama, rewards=rewards, eval={"protocol": "task"})
    args = ["--limit", "3", "eval.max_new_tokens=6", "--samples", "2", "--temperature", "1.0", "--json"]
    result = runner.invoke(app, ["eval", "model", str(recipe), *args, "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["results"][0]
    f = summary["filters"]["correctness"]
    assert f["majority"] is None and summary["sampling"]["majority"].startswith("not available")
    assert f["pass"]["accuracy"] >= f["accuracy"] and summary["completions"] == 6
    assert all(r["majority"] is None and len(r["samples"]) == 2 for r in predictions(tmp_path / "out"))


@pytest.mark.slow  # real training steps
def test_sampled_compare_pairs_the_fractions_of_each_problem(tmp_path, tiny_llama):
    recipe = write_recipe(
        tmp_path, tiny_llama, lora={"r": 4, "dropout": 0.0}, training={"max_steps": 1, "save_steps": 1}
    )
    trained = runner.invoke(app, ["train", str(recipe)])
    assert trained.exit_code == 0, trained.output
    run_dir = tmp_path / "run"
    args = ["--data", "generated", "--limit", "4", "eval.max_new_tokens=6", "--samples", "3", "--temperature", "1.0"]
    result = runner.invoke(app, ["eval", "compare", str(run_dir), *args])
    assert result.exit_code == 0, result.output
    assert "trained vs base" in result.output and "mean@3" in result.output and "pass@3" in result.output
    root = run_dir / "eval" / "chat-test"
    comparison = json.loads((root / "comparison.json").read_text())
    base, after = by_index(root / "base"), by_index(root / "trained")
    assert comparison["problems"] == 4 and comparison["sampling"]["samples"] == 3
    for name, f in comparison["filters"].items():
        differences = [after[i]["correct"][name] - base[i]["correct"][name] for i in range(4)]
        assert f["difference"] == pytest.approx(sum(differences) / 4)
        assert f["trained"] - f["base"] == pytest.approx(f["difference"])
        assert f["low"] <= f["difference"] <= f["high"]
        assert f["improved"] == sum(d > 0 for d in differences) and f["worsened"] == sum(d < 0 for d in differences)
        passed = [(base[i]["passed"][name], after[i]["passed"][name]) for i in range(4)]
        assert f["pass"]["fixed"] == sum(a and not b for b, a in passed)
        assert f["pass"]["broken"] == sum(b and not a for b, a in passed)
        assert "majority" in f
    for label, records in (("base", base), ("trained", after)):
        completions = [s for r in records.values() for s in r["samples"]]
        assert comparison[label + "_behaviour"]["mean_new_tokens"] == pytest.approx(
            sum(s["new_tokens"] for s in completions) / 12
        )
    card = (run_dir / "README.md").read_text()  # the model card says the figures are mean@3, not greedy
    assert "| chat, test | base, mean@3 at T 1 | 4 |" in card and "| chat, test | trained, mean@3 at T 1 | 4 |" in card


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (pip install vllm)")
def test_sampled_eval_on_vllm_is_seeded(tmp_path, vllm_model):
    sampled = ["--samples", "3", "--temperature", "1.0", "--engine", "vllm"]
    for out in ("a", "b"):
        result = sampled_eval(vllm_model, tmp_path / out, *sampled)
        assert result.exit_code == 0, result.output
    first, second = by_index(tmp_path / "a"), by_index(tmp_path / "b")
    assert all(len(r["samples"]) == 3 for r in first.values())
    assert {i: r["samples"] for i, r in first.items()} == {i: r["samples"] for i, r in second.items()}
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["session"]["engine"] == "vllm"
