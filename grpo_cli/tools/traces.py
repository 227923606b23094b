"""Worked solutions as calculator traces: the chat a model would have written had it called the calculator at every
annotated step, so SFT can teach the call format before GRPO rewards using it.

GSM8K's reference solutions annotate each arithmetic step as `<<expression=result>>`, just before the result is
written out in the text: `Natalia sold 48/2 = <<48/2=24>>24 clips in May.` A solution with N annotations becomes
N assistant turns that each end in a call and are each followed by the tool's answer, then one closing turn:

    assistant  "Natalia sold 48/2 ="              calls calculator(expression="48/2")
    tool       "24"                               (the built-in calculator's own result)
    assistant  "24 clips in May. ... #### 72"

The turn after a call starts with the result as the annotator wrote it, so the model learns to read the tool's
answer and carry on. The tool turn holds what the calculator really returns for the expression; an annotation it
cannot reproduce (no `=`, an expression it refuses, or a result that differs from the written one) makes the whole
row malformed: it is dropped and counted, never trained on half-right. Nothing here runs model output: the
annotations are the dataset's, and the calculator parses arithmetic without executing it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from grpo_cli.tools.calculator import CalculatorError, calculator, evaluate

ANNOTATION = re.compile(r"<<([^<>]*)>>")
TOOL = "calculator"


@dataclass
class Trace:
    messages: list[dict[str, Any]] | None  # the completion's turns; None when the row is malformed
    calls: int = 0
    problem: str | None = None  # why it is malformed


def calculator_trace(worked: str, closing: str) -> Trace:
    """The turns for a worked solution (annotations inline) that ends with `closing` (the marked answer line).

    `closing` is appended to the text after the last annotation, in the final assistant turn."""
    pieces = ANNOTATION.split(worked)
    texts, notes = pieces[0::2], pieces[1::2]
    stray = next((t for t in texts if "<<" in t or ">>" in t), None)
    if stray is not None:  # `<<1+<<2+3=5>>=6>>` or `<<48/2=24`: no call could stand for it, and no text either
        at = stray[max(0, stray.find("<<") if "<<" in stray else stray.find(">>")) :][:40]
        return Trace(None, problem=f"a nested or unclosed annotation ({at!r})")
    messages: list[dict[str, Any]] = []
    for before, note in zip(texts, notes):
        expression, equals, written = note.rpartition("=")
        if not equals or not expression.strip():
            return Trace(None, problem=f"annotation <<{note[:40]}>> has no `expression=result` form")
        if not written.strip().rstrip("."):
            return Trace(None, problem=f"annotation <<{note[:40]}>> has no result after `=`")
        try:
            result = calculator(expression)
            same = evaluate(result) == _number(written)
        except (CalculatorError, ValueError, ZeroDivisionError) as exc:
            return Trace(None, problem=f"annotation <<{note[:40]}>>: {exc}")
        if not same:
            return Trace(None, problem=f"annotation <<{note[:40]}>>: the calculator gives {result}")
        call = {"type": "function", "function": {"name": TOOL, "arguments": {"expression": expression.strip()}}}
        messages.append({"role": "assistant", "content": before.strip(), "tool_calls": [call]})
        messages.append({"role": "tool", "name": TOOL, "content": result})
    last = texts[-1].strip()
    messages.append({"role": "assistant", "content": f"{last}\n{closing}" if last else closing})
    return Trace(messages, calls=len(notes))


def _number(written: str) -> Fraction:
    """A result as annotators write it (`24`, `1,200`, `.5`, `$30`), exactly."""
    return evaluate(written.strip().rstrip(".") or "x")
