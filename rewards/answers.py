"""Pulling answers out of text, whatever the task: numbers, <answer> tags, `#### N` markers. Shared by data
preparation, rewards and evaluation; what is particular to GSM8K is in gsm8k_task.py. Never evaluates model output
as code.
"""

from __future__ import annotations

import math
import re
from typing import Any

# A number as people write it in GSM8K answers: optional sign and $, thousands commas, decimals.
NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?|-?\$?\.\d+")
_TAG_CACHE: dict[str, re.Pattern[str]] = {}
# GSM8K's own marker for the final answer (`#### 72`), which models trained on GSM8K-style data write unasked.
HASHES = re.compile(r"####\s*(-?\$?\d[\d,]*(?:\.\d+)?|-?\$?\.\d+)")
HASHES_LINE = re.compile(r"####[ \t]*([^\n]*)")  # the same marker before an answer of any kind


def normalize_number(text: str) -> str:
    """'$1,234.50.' -> '1234.50'; the string form lm-eval compares."""
    text = text.strip().replace(",", "").replace("$", "")
    return text[:-1] if text.endswith(".") else text


def to_number(text: str | None) -> float | None:
    """A finite float, or None when `text` is not a single number."""
    if text is None:
        return None
    try:
        value = float(normalize_number(text))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def last_number(text: str) -> str | None:
    """The last number in free text (lm-eval's flexible-extract idea), normalised."""
    found = NUMBER.findall(text)
    return normalize_number(found[-1]) if found else None


def tag_content(text: str, tag: str = "answer") -> str | None:
    """Content of the last <tag>...</tag>; an unclosed final tag runs to the end of the text."""
    pattern = _TAG_CACHE.get(tag)
    if pattern is None:
        escaped = re.escape(tag)
        pattern = _TAG_CACHE[tag] = re.compile(rf"<{escaped}>(.*?)(?:</{escaped}>|$)", re.DOTALL)
    matches = pattern.findall(text)
    return matches[-1].strip() if matches else None


def hashes_answer(text: str) -> str | None:
    """The number after the last `####` (GSM8K's answer marker), normalised; None without one."""
    found = HASHES.findall(text)
    return normalize_number(found[-1]) if found else None


def answer_text(text: str, tag: str = "answer") -> str | None:
    """The final answer as written, for answers that are not numbers: inside the last <tag>, else the rest of the
    line after the last `####`; None when neither marker is there."""
    inside = tag_content(text, tag)
    if inside is not None:
        return inside
    found = HASHES_LINE.findall(text)
    return found[-1].strip() if found else None


def marked_answer(text: str, marker: str = "tag", tag: str = "answer") -> str | None:
    """The answer only if it is marked the way the prompt asked: inside <answer> (`tag`) or after `####` (`hashes`)."""
    if marker == "hashes":
        return hashes_answer(text)
    inside = tag_content(text, tag)
    return last_number(inside) if inside is not None else None


def extract_answer(text: str, tag: str = "answer") -> str | None:
    """The model's final answer: the number inside <answer>, else after `####`, else the last number."""
    return marked_answer(text, "tag", tag) or hashes_answer(text) or last_number(text)


def numbers_equal(predicted: str | None, gold: str | None) -> bool:
    """Numeric comparison, so '18', '18.0' and '$18' all match a gold '18'."""
    a, b = to_number(predicted), to_number(gold)
    if a is None or b is None:
        return False
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def completion_text(completion: Any) -> str:
    """What the model wrote: TRL passes plain strings, or chat messages `[{"role": "assistant", "content": ...}]`.
    With tools a completion holds several turns and the tools' answers between them; only the model's own turns
    count, so a number a tool returned is never taken for the model's answer."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(
            str(m.get("content") or "") if isinstance(m, dict) else str(m)
            for m in completion
            if not isinstance(m, dict) or m.get("role", "assistant") != "tool"
        )
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return "" if completion is None else str(completion)
