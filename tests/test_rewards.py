from __future__ import annotations

import ast
import math
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards import BUILTINS, RewardLookupError, resolve_reward

ROOT = Path(__file__).resolve().parent.parent
GOOD = "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>\n"


def call(name, completions, **columns):
    return resolve_reward(name)(prompts=["q"] * len(completions), completions=completions, **columns)


def test_correctness_compares_numbers_not_strings():
    texts = ["<answer>7</answer>", "<answer>7.0</answer>", "<answer>$7</answer>", "so 7.", "<answer>8</answer>", "none"]
    assert call("correctness", texts, answer=["7"] * 6) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]


def test_correctness_reads_chat_completions_and_thousands():
    completions = [[{"role": "assistant", "content": "<answer>1,234</answer>"}]]
    assert call("correctness", completions, answer=["1234"]) == [1.0]


def test_correctness_without_gold_abstains():
    assert call("correctness", ["7"]) == [None]


def test_format_rewards():
    bad = "7"
    assert call("strict_format", [GOOD, bad, GOOD.replace("\n", " ")]) == [1.0, 0.0, 0.0]
    assert call("soft_format", [GOOD.replace("\n", " "), bad]) == [1.0, 0.0]
    assert call("think_format", ["<think>a</think>\n<answer>7</answer>", GOOD]) == [1.0, 0.0]
    assert call("xml_count", [GOOD])[0] == pytest.approx(1.0)
    assert call("xml_count", [GOOD + "trailing text"])[0] < 1.0
    assert call("integer", ["<answer>7</answer>", "<answer>7.5</answer>", "x"]) == [1.0, 0.0, 0.0]
    assert call("answer_tag", ["<answer>7</answer>", "<answer>seven</answer>", "7"]) == [1.0, 0.0, 0.0]
    # GSM8K's marker: full credit for stopping right after `#### N`, half for the line with text after it.
    assert call(
        "hashes_format", ["3 + 4 = 7\n#### 7", "#### 1,234.5 \n", "#### 7\nThe answer is 7", "7", "#### x"]
    ) == [1.0, 1.0, 0.5, 0.0, 0.0]


def test_format_pays_only_after_work_when_asked_and_marked_correctness_is_strict_match():
    worked = "Each box holds 3 apples and there are 4 boxes, so 3 * 4 = 12.\n#### 12"
    gated = resolve_reward("hashes_format", {"min_work_chars": 40})
    assert gated(completions=[worked, "#### 12", "The answer is:\n#### 12"]) == [1.0, 0.0, 0.0]
    marked = resolve_reward("marked_correctness")
    assert marked.__name__ == "marked_correctness"
    assert marked(completions=[worked, "3 * 4 = 12", "#### 13", worked], answer=["12", "12", "12", None]) == [
        1.0,
        0.0,
        0.0,
        None,
    ]
    tagged = resolve_reward("marked_correctness", {"marker": "tag"})
    assert tagged(completions=["<answer>12</answer>", "#### 12"], answer=["12", "12"]) == [1.0, 0.0]
    with pytest.raises(RewardLookupError):
        resolve_reward("marked_correctness", {"marker": "boxed"})


def test_correctness_reads_the_hashes_marker_before_trailing_numbers():
    assert call("correctness", ["#### 7\nThen 12 more.", "#### 8 then 7"], answer=["7", "7"]) == [1.0, 0.0]


def test_parameterised_rewards():
    length = resolve_reward("length_target", {"target": 4})
    assert length.__name__ == "length_target"
    assert length(completions=["a", "b"], completion_ids=[[1, 2, 3, 4], [1] * 8]) == [1.0, 0.0]
    proximity = resolve_reward("proximity")
    scores = proximity(completions=["<answer>10</answer>", "<answer>12</answer>", "none"], answer=["10"] * 3)
    assert scores[0] == 1.0 and 0.0 < scores[1] < 1.0 and scores[2] == 0.0
    pickle.dumps(length)  # multi-process data loaders pickle reward functions


def test_user_reward_from_file_with_kwargs(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "def shout(prompts, completions, bonus=0.0, **kwargs):\n"
        "    return [float(c.isupper()) + bonus for c in completions]\n"
    )
    monkeypatch.chdir(tmp_path)
    fn = resolve_reward("my_rewards.py:shout", {"bonus": 0.5})
    assert fn.__name__ == "shout"
    assert fn(prompts=["p", "p"], completions=["HI", "hi"]) == [1.5, 0.5]


def test_user_reward_from_module():
    fn = resolve_reward("rewards.gsm8k:soft_format")
    assert fn is BUILTINS["soft_format"]
    assert resolve_reward("rewards.gsm8k.soft_format") is fn  # TRL's dotted form
    with pytest.raises(RewardLookupError, match="no attribute `nope`"):
        resolve_reward("rewards.gsm8k.nope")


def test_reward_file_that_exits_on_import_is_an_error(tmp_path):
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(RewardLookupError, match="sys.exit"):
        resolve_reward(f"{tmp_path / 'exits.py'}:f")


def test_unknown_reward_lists_valid_names():
    with pytest.raises(RewardLookupError) as err:
        resolve_reward("corectness")
    assert "did you mean `correctness`" in str(err.value)
    for name in BUILTINS:
        assert name in str(err.value)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.text(max_size=300), min_size=1, max_size=4), gold=st.text(max_size=20))
def test_builtins_never_raise_and_return_finite_floats(texts, gold):
    for name in BUILTINS:
        func = resolve_reward(name)
        for completions in (texts, [[{"role": "assistant", "content": t}] for t in texts]):
            scores = func(
                prompts=["p"] * len(texts),
                completions=completions,
                answer=[gold] * len(texts),
                completion_ids=[[1] * len(t) for t in texts],
            )
            assert len(scores) == len(texts)
            for score in scores:
                assert score is None or (isinstance(score, float) and math.isfinite(score)), (name, score)


@settings(max_examples=200, deadline=None)
@given(number=st.integers(min_value=-(10**12), max_value=10**12), noise=st.text(alphabet="abc .,\n", max_size=20))
def test_correctness_finds_written_numbers(number, noise):
    text = f"{noise} <answer>{number:,}</answer>"
    assert call("correctness", [text], answer=[str(number)]) == [1.0]


def test_no_reward_code_evaluates_model_output():
    """Rewards and answer parsing must never eval/exec/compile what a model wrote."""
    files = list((ROOT / "rewards").glob("*.py"))
    assert ROOT / "rewards" / "answers.py" in files
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"eval", "exec", "compile", "__import__"}, f"{path.name}:{node.lineno}"
