"""The verifiers for answers that are not GSM8K numbers (rewards/verifiers.py, rewards/math_judge.py), on hand-made
cases: right, wrong, equivalent forms, and hostile strings that must score 0 fast without growing memory."""

from __future__ import annotations

import pickle
import resource
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import fails_cleanly, write_jsonl, write_recipe
from grpo_cli.cli import app
from grpo_cli.data import gold_answer
from rewards import math_judge, registry, resolve_reward
from rewards.answers import answer_text
from rewards.verifiers import normalize_text

HOSTILE = [
    "9**9**9**9",
    "$9^{9^{9^{9}}}$",
    "\\boxed{(10^{10})!}",
    "$\\frac{1}{2}^{9999999999}$",
    "$3^{10^{9}} - 3^{10^{9}}$",
    "{" * 5000 + "1" + "}" * 5000,
    "\\boxed{" * 3000,
    "\\sqrt{" * 2000 + "2" + "}" * 2000,
    "1" * 100_000,
    "$" + "x+" * 50_000 + "1$",
    "\x00\ud800 $\\frac{1}{0}$ \\\\\\",
]


def score(name, completions, answers):
    return resolve_reward(name)(prompts=["q"] * len(completions), completions=completions, answer=answers)


def test_answer_text_reads_the_tag_then_the_hashes_line():
    assert answer_text("so <answer>\n Paris, France \n</answer>") == "Paris, France"
    assert answer_text("work\n#### \\frac{1}{2}\nthanks") == "\\frac{1}{2}"
    assert answer_text("<answer>a</answer> #### b") == "a"
    assert answer_text("no marker") is None


def test_exact_match_is_character_for_character():
    completions = ["<answer>\nParis\n</answer>", "<answer>paris</answer>", "#### Paris", " Paris ", "It is Paris."]
    assert score("exact_match", completions, ["Paris"] * 5) == [1.0, 0.0, 1.0, 1.0, 0.0]
    chat = [[{"role": "assistant", "content": "<answer>[1, 2)</answer>"}]]
    assert score("exact_match", chat, ["[1, 2)"]) == [1.0]
    assert score("exact_match", ["Paris", "Paris"], [None, "  "]) == [None, None]  # no gold: not judged


def test_normalized_match_ignores_case_punctuation_articles_and_spacing():
    assert normalize_text("  The  Eiffel-Tower!  ") == "eiffeltower"
    assert normalize_text("“An apple,” a day") == "apple day"
    assert normalize_text("theatre and anthem") == "theatre and anthem"  # articles only as whole words
    completions = [
        "<answer>The Eiffel Tower.</answer>",
        "<answer>eiffel   tower</answer>",
        "#### EIFFEL TOWER!",
        "<answer>Tower of Eiffel</answer>",
        "<answer>Louvre</answer>",
    ]
    assert score("normalized_match", completions, ["Eiffel Tower"] * 5) == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert score("normalized_match", ["<answer>Paris, France</answer>"], ["paris france"]) == [1.0]


EQUAL = [
    ("\\frac{1}{2}", "0.5"),
    ("0.5", "\\frac{1}{2}"),
    ("\\boxed{1/2}", "\\frac12"),
    ("$\\frac{2}{4}$", "1/2"),
    ("[1, 2)", "[1,2)"),
    ("(0, \\infty)", "$(0,\\infty)$"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"),
    ("\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt 2}{2}"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("x = 3", "3"),
    ("\\{1, 2\\}", "\\{2, 1\\}"),
]
UNEQUAL = [
    ("\\frac{1}{3}", "0.5"),
    ("(1, 2)", "[1, 2)"),
    ("\\sqrt{3}", "\\sqrt{2}"),
    ("2", "-2"),
    ("", "1"),
]


@pytest.mark.parametrize(("answer", "gold"), EQUAL)
def test_math_correctness_accepts_equivalent_forms(answer, gold):
    assert score("math_correctness", [f"<answer>{answer}</answer>", f"work\n#### {answer}"], [gold] * 2) == [1.0, 1.0]


@pytest.mark.parametrize(("answer", "gold"), UNEQUAL)
def test_math_correctness_rejects_different_values(answer, gold):
    assert score("math_correctness", [f"<answer>{answer}</answer>"], [gold]) == [0.0]


def test_math_correctness_reads_an_unmarked_completion_as_trl_does():
    completions = [
        "Half of it: so the answer is $\\boxed{\\frac{1}{2}}$.",
        "We get $x = \\frac{1}{2}$.",
        "The answer is \\boxed{3}.",
        [{"role": "assistant", "content": "Therefore $\\frac{1}{2}$"}],
    ]
    assert score("math_correctness", completions, ["1/2"] * 4) == [1.0, 1.0, 0.0, 1.0]
    assert score("math_correctness", ["$\\frac12$"], [None]) == [None]
    pickle.dumps(resolve_reward("math_correctness"))  # multi-process data loaders pickle reward functions


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_answers_score_zero_fast(text):
    completions = [f"<answer>{text}</answer>", text, f"#### {text}"]
    for name in ("math_correctness", "exact_match", "normalized_match"):
        started = time.monotonic()
        assert score(name, completions, ["7"] * 3) == [0.0, 0.0, 0.0], name
        # three answers, each ended by the child's own 1 s limits or the parent's deadline
        assert time.monotonic() - started < 3 * (math_judge.DEADLINE_S + 1), name


def test_hostile_answers_leave_memory_bounded():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    score("math_correctness", [f"<answer>{t}</answer>" for t in HOSTILE], ["7"] * len(HOSTILE))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024  # sympy's work happens in the child; this process only sends strings
    assert score("math_correctness", ["<answer>3</answer>"], ["3"]) == [1.0]  # a child is running, replaced or not
    process = math_judge._JUDGE._process
    limits = Path(f"/proc/{process.pid}/limits") if process is not None else None
    if sys.platform != "linux" or limits is None or not limits.exists():
        pytest.skip("the child's memory limit is read from Linux's /proc")
    line = next(x for x in limits.read_text().splitlines() if x.startswith("Max address space"))
    assert int(line.split()[3]) <= 1 << 30, line


def test_a_child_past_its_deadline_is_replaced(monkeypatch):
    judge = math_judge.MathJudge()
    try:
        assert judge.equal("$\\frac{1}{2}$", "$0.5$")
        first = judge._process.pid
        monkeypatch.setattr(math_judge, "DEADLINE_S", 0.0)  # every answer is now too slow
        assert not judge.equal("$\\frac{1}{2}$", "$0.5$")
        assert judge._process is None
        monkeypatch.undo()
        assert judge.equal("$\\frac{1}{2}$", "$0.5$")
        assert judge._process.pid != first
    finally:
        judge.close()


def test_a_forked_copy_starts_its_own_child_and_leaves_the_parents_alone():
    judge = math_judge.MathJudge()
    assert judge.equal("$2$", "$\\sqrt{4}$")
    parents = judge._process
    judge._owner = -1  # as if this process were a fork (a data-loader worker) of the one that started the child
    try:
        assert judge.equal("$2$", "$\\sqrt{4}$")
        assert judge._process is not parents and parents.poll() is None
    finally:
        judge.close()
        parents.kill()
        parents.wait()
        parents.stdin.close()
        parents.stdout.close()


def test_math_correctness_works_in_a_thread_and_keeps_the_reward_timer():
    found = []
    thread = threading.Thread(target=lambda: found.extend(score("math_correctness", ["\\boxed{0.25}"], ["1/4"])))
    thread.start()
    thread.join(60)
    assert found == [1.0]  # math-verify's own signal-based limit cannot run in a thread; the child's can
    # The reward guard limits a whole call with SIGALRM's timer (grpo_cli/reward_guard.py); a verdict must not stop it.
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 300)
    try:
        assert score("math_correctness", ["<answer>0.75</answer>"], ["\\frac{3}{4}"]) == [1.0]
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_plain_gold_answers_keep_their_commas_unless_they_are_numbers():
    assert gold_answer("[1, 2)", "plain") == "[1, 2)"
    assert gold_answer(" Paris, France. ", "plain") == "Paris, France."
    assert gold_answer("$1,234.", "plain") == "1234"


def test_validate_accepts_a_recipe_with_the_verifiers(tmp_path, tiny_llama):
    rows = [{"question": "Half of one?", "answer": "\\frac{1}{2}"}, {"question": "Capital?", "answer": "Paris"}]
    recipe = write_recipe(
        tmp_path,
        tiny_llama,
        data={"source": str(write_jsonl(rows, tmp_path / "rows.jsonl")), "answer_format": "plain"},
        rewards=[{"name": "math_correctness"}, {"name": "exact_match"}, {"name": "normalized_match", "weight": 0.5}],
    )
    result = CliRunner().invoke(app, ["validate", str(recipe)])
    assert result.exit_code == 0, result.output


def test_validate_names_the_reward_and_the_install_when_math_verify_is_missing(tmp_path, tiny_llama, monkeypatch):
    monkeypatch.setitem(registry.OPTIONAL, "math_correctness", ("no_such_module_here", "pip install 'grpo-cli[math]'"))
    recipe = write_recipe(tmp_path, tiny_llama, rewards=[{"name": "math_correctness"}])
    result = CliRunner().invoke(app, ["validate", str(recipe)])
    line = fails_cleanly(result, "rewards[0].name", "`math_correctness`", "pip install 'grpo-cli[math]'")
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "no-such-module-here" in line
