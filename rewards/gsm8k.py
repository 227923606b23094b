"""Built-in rewards for GSM8K-style tasks, with TRL's exact reward signature.

Every function takes `(prompts, completions, completion_ids, **columns)` and returns one float (or None
when it cannot judge, e.g. no gold answer) per completion. They never raise on any string and never
evaluate model output.
"""

from __future__ import annotations

import re
from typing import Any

from rewards.answers import (
    HASHES,
    completion_text,
    extract_answer,
    marked_answer,
    numbers_equal,
    tag_content,
    to_number,
)

STRICT_FORMAT = re.compile(r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n?$", re.DOTALL)
SOFT_FORMAT = re.compile(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>", re.DOTALL)
HASHES_AT_END = re.compile(HASHES.pattern + r"\s*$")
THINK_FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def _texts(completions: Any) -> list[str]:
    return [completion_text(c) for c in (completions or [])]


def _golds(answer: Any, count: int) -> list[Any]:
    if answer is None:
        return [None] * count
    return list(answer) if isinstance(answer, (list, tuple)) else [answer] * count


def correctness(prompts=None, completions=None, completion_ids=None, answer=None, **kwargs) -> list[float | None]:
    """1.0 when the answer (inside <answer>, else the last number) equals the gold number; None without gold."""
    texts = _texts(completions)
    out: list[float | None] = []
    for text, gold in zip(texts, _golds(answer, len(texts))):
        out.append(None if gold is None else float(numbers_equal(extract_answer(text), str(gold))))
    return out


def integer_answer(prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
    """1.0 when the answer is a whole number (GSM8K answers always are)."""
    out = []
    for text in _texts(completions):
        value = to_number(extract_answer(text))
        out.append(float(value is not None and value == int(value)))
    return out


def strict_format(prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
    """1.0 for exactly `<reasoning>\\n...\\n</reasoning>\\n<answer>\\n...\\n</answer>`, newlines included."""
    return [float(bool(STRICT_FORMAT.match(text))) for text in _texts(completions)]


def soft_format(prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
    """1.0 when a <reasoning> block is followed by an <answer> block, whitespace free."""
    return [float(bool(SOFT_FORMAT.search(text))) for text in _texts(completions)]


def think_format(prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
    """1.0 for `<think>...</think>` then `<answer>...</answer>` and nothing else."""
    return [float(bool(THINK_FORMAT.match(text))) for text in _texts(completions)]


def xml_count(prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
    """0.25 per reasoning/answer tag that appears exactly once, minus a little for text after </answer>.

    Dense partial credit that small models can climb before they get the whole format right.
    """
    out = []
    for text in _texts(completions):
        score = sum(
            (0.25 for tag in ("<reasoning>", "</reasoning>", "<answer>", "</answer>") if text.count(tag) == 1), 0.0
        )
        if text.count("</answer>") == 1:
            trailing = text.split("</answer>")[-1].strip()
            score -= min(0.25, 0.001 * len(trailing))
        out.append(score)
    return out


class LengthTarget:
    """1.0 at `target` completion tokens, falling linearly to 0 at 0 and 2 x target tokens."""

    def __init__(self, target: int = 200):
        if not isinstance(target, int) or target < 1:
            raise ValueError("target must be a positive number of tokens")
        self.target = target
        self.__name__ = "length_target"

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
        texts = _texts(completions)
        if completion_ids is not None and len(completion_ids) == len(texts):
            lengths = [len(ids) for ids in completion_ids]
        else:  # no token ids (called outside TRL): whitespace words are a fair stand-in
            lengths = [len(text.split()) for text in texts]
        return [max(0.0, 1.0 - abs(n - self.target) / self.target) for n in lengths]


class Proximity:
    """Partial credit for near misses: 1 / (1 + |predicted - gold| / max(1, |gold|)); 0 without a number."""

    def __init__(self, tag: str = "answer"):
        if not isinstance(tag, str) or not tag:
            raise ValueError("tag must be a non-empty string")
        self.tag = tag
        self.__name__ = "proximity"

    def __call__(self, prompts=None, completions=None, completion_ids=None, answer=None, **kwargs):
        texts = _texts(completions)
        out: list[float | None] = []
        for text, gold in zip(texts, _golds(answer, len(texts))):
            gold_value = to_number(None if gold is None else str(gold))
            if gold_value is None:
                out.append(None)
                continue
            predicted = to_number(extract_answer(text, self.tag))
            if predicted is None:
                out.append(0.0)
                continue
            relative = abs(predicted - gold_value) / max(1.0, abs(gold_value))
            out.append(1.0 / (1.0 + relative) if relative < 1e300 else 0.0)
        return out


def answer_tag_present(prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
    """1.0 when an <answer> block holding a number is present: the first step towards the full format."""
    out = []
    for text in _texts(completions):
        inside = tag_content(text)
        out.append(float(inside is not None and "</answer>" in text and to_number(inside) is not None))
    return out


class HashesFormat:
    """1.0 when the completion ends with GSM8K's `#### <number>`; 0.5 when that line is there but text follows.

    The partial credit matters: small instruct models already write `####` now and then, but rarely stop after it.
    With `min_work_chars`, a marker pays only after at least that many characters of work: a model paid for the
    format alone learns to drop its reasoning and answer a bare `#### N`, which is mostly wrong.
    """

    def __init__(self, min_work_chars: int = 0):
        if not isinstance(min_work_chars, int) or min_work_chars < 0:
            raise ValueError("min_work_chars must be a whole number of characters, 0 or more")
        self.min_work_chars = min_work_chars
        self.__name__ = "hashes_format"

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float]:
        out = []
        for text in _texts(completions):
            first = HASHES.search(text)
            if first is None or len(text[: first.start()].strip()) < self.min_work_chars:
                out.append(0.0)
            else:
                out.append(1.0 if HASHES_AT_END.search(text) else 0.5)
        return out


class MarkedCorrectness:
    """1.0 when the answer marked as the prompt asked (`####`, or <answer> with marker `tag`) equals the gold
    number: what `grpo eval` counts as strict-match. An unmarked right answer earns 0 here; pair it with
    `correctness` (which also reads the last number) so the reasoning keeps paying while the marker is learned."""

    def __init__(self, marker: str = "hashes", tag: str = "answer"):
        if marker not in ("hashes", "tag"):
            raise ValueError("marker must be `hashes` (`#### N`) or `tag` (<answer>N</answer>)")
        self.marker, self.tag = marker, tag
        self.__name__ = "marked_correctness"

    def __call__(self, prompts=None, completions=None, completion_ids=None, answer=None, **kwargs):
        texts = _texts(completions)
        return [
            None if gold is None else float(numbers_equal(marked_answer(text, self.marker, self.tag), str(gold)))
            for text, gold in zip(texts, _golds(answer, len(texts)))
        ]
