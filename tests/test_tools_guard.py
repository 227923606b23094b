"""The built-in calculator and the guard every tool runs behind: arithmetic only, bounded, and nothing a tool does
stops a run or floods the model."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from conftest import ASSETS, write_recipe
from grpo_cli.cli import app
from grpo_cli.tools.calculator import CalculatorError, calculator
from grpo_cli.tools.guard import ToolFailure, guard_tool
from tool_models import SYSTEM

runner = CliRunner()


@pytest.mark.parametrize(
    "expression, result",
    [
        ("48 / 2 + 3", "27"),
        ("0.1 + 0.2", "0.3"),
        ("1/3", "0.333333333333"),
        ("2**10", "1024"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("(1 + 2) * 3.5", "10.5"),
        ("1,234 * 2", "2468"),
        ("$5 * 3", "15"),
        ("2**-2", "0.25"),
        ("1.5e-3 * 2", "0.003"),
        ("(-2)**3", "-8"),
    ],
)
def test_calculator_is_exact(expression, result):
    assert calculator(expression) == result


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "open('/etc/passwd')",
        "x + 1",
        "(1).real",
        "'a' * 3",
        "[1, 2]",
        "1 if 2 else 3",
        "lambda: 1",
        "1 < 2",
        "True + 1",
        "0x10",
        "2 ^ 3",
        "f'{1}'",
        "{1: 2}",
        "1; 2",
        "",
    ],
)
def test_calculator_refuses_everything_but_arithmetic(expression):
    with pytest.raises(CalculatorError):
        calculator(expression)


@pytest.mark.parametrize(
    "expression, reason",
    [
        ("9**9**9", "exponent larger than"),
        ("10**100000", "exponent larger than"),
        ("2**99999", "exponent larger than"),
        ("1" * 10_000, "longer than 500 characters"),
        ("1e999999", "more than 1000 digits"),
        ("(" * 400 + "1" + ")" * 400, "longer than 500 characters"),
        ("99999999999999**999", "result would have more than 1000 digits"),
        ("1/3**9999", "result would have more than 1000 digits"),
    ],
)
def test_calculator_refuses_hostile_input_fast(expression, reason):
    """Each is refused with its reason, in well under the guard's time limit, before any big number is built."""
    started = time.perf_counter()
    with pytest.raises(CalculatorError, match=reason):
        calculator(expression)
    assert time.perf_counter() - started < 0.1


def test_calculator_answers_a_long_but_harmless_expression_fast():
    started = time.perf_counter()
    assert calculator("-" * 499 + "1") == "-1"  # 499 unary minuses: odd, so negative
    assert time.perf_counter() - started < 0.1


def test_guard_keeps_the_tools_description_and_shortens_failures():
    from transformers.utils import get_json_schema

    guarded = guard_tool(calculator, timeout_s=1.0, max_chars=50)
    assert guarded.__name__ == "calculator" and get_json_schema(guarded) == get_json_schema(calculator)
    with pytest.raises(ToolFailure, match=r"^calculator: division by zero$"):
        guarded(expression="1/0")
    with pytest.raises(ToolFailure, match=r"unexpected keyword argument 'expr'.*\(arguments: expression\)"):
        guarded(expr="1")
    assert guarded(expression="2**100").startswith("1267650600228229401496703205376")


@pytest.mark.parametrize(
    "tool, seen",
    [
        ("raising", "the service is down"),
        ("hanging", "took longer than 0.2 s"),
        ("flooding", "[cut: 9999960 more characters]"),
    ],
)
@pytest.mark.slow  # builds tool_model (training steps)
def test_a_misbehaving_tool_never_stops_the_run(tmp_path, tool_model, tool, seen):
    """Failures reach the model as one short error and are counted; a flood is cut to max_result_chars (kept small
    here so the cut result fits the tiny completion budget, which would otherwise drop it as TRL does)."""
    recipe = write_recipe(
        tmp_path,
        tool_model,
        data={"source": "generated", "limit": 32, "system_prompt": SYSTEM},
        tools=[{"name": f"{ASSETS / 'faulty_tools.py'}:{tool}", "timeout_s": 0.2, "max_result_chars": 40}],
        grpo={"num_generations": 4, "max_completion_length": 160, "temperature": 0.7},
        training={"per_device_train_batch_size": 16, "max_steps": 2, "log_completions": 16},
    )
    result = runner.invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    called = [m for m in metrics if m["tools/call_frequency"] > 0]
    assert called, "the tiny model made no call"
    if tool != "flooding":
        assert all(m["tools/failure_frequency"] == 1.0 for m in called)
    samples = (tmp_path / "run" / "samples.jsonl").read_text()
    assert seen in samples and len(samples) < 200_000
