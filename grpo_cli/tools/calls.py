"""Counting what a completion did with its tools, from the chat messages TRL (or eval's loop) built for it: turns,
calls made, calls that failed, and malformed attempts: a call written in a form the template's parser does not read
(a fenced ```json {"name": ..., "arguments": ...}``` block, a `<tool_call>` block that does not parse) or naming a
tool that does not exist. A model that tries and fails then shows up as such instead of as a silent zero.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

# A JSON object that opens like a tool call: {"name": "...", "arguments": ...}, fenced or bare, in plain content.
_CALL_LIKE = re.compile(r'\{\s*"name"\s*:\s*"[^"]*"\s*,\s*"(?:arguments|parameters)"\s*:')
_TOOL_CALL_TAG = "<tool_call>"
# TRL (and eval's loop, which matches it) hands a failed call's error to the model as str({"error": ...}).
ERROR_PREFIX = "{'error': "


@dataclass
class ToolFigures:
    turns: int = 0  # assistant turns
    calls: int = 0  # calls the parser read
    failures: int = 0  # calls that returned an error
    malformed: int = 0  # attempts the parser did not read, or calls of an unknown tool

    def add(self, other: ToolFigures) -> None:
        for key, value in asdict(other).items():
            setattr(self, key, getattr(self, key) + value)


def figures(messages: Any, tool_names: set[str]) -> ToolFigures:
    """The tool figures of one completion (a list of chat messages; plain text counts as one turn)."""
    if not isinstance(messages, list):
        return ToolFigures(turns=1, malformed=_unread_attempts(str(messages or "")))
    out = ToolFigures()
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            out.failures += str(message.get("content", "")).startswith(ERROR_PREFIX)
            continue
        out.turns += 1
        for call in message.get("tool_calls") or []:
            out.calls += 1
            out.malformed += call_name(call) not in tool_names
        out.malformed += _unread_attempts(str(message.get("content") or ""))
    return out


def batch_metrics(completions: list[Any], tool_names: set[str]) -> dict[str, float]:
    """Per-completion means for metrics.jsonl, beside TRL's tools/call_frequency and tools/failure_frequency."""
    total = ToolFigures()
    for completion in completions:
        total.add(figures(completion, tool_names))
    count = max(1, len(completions))
    return {"tools/malformed_frequency": total.malformed / count, "tools/turns": total.turns / count}


def call_name(call: dict) -> str:
    function = call["function"] if isinstance(call.get("function"), dict) else call
    return str(function.get("name", ""))


def _unread_attempts(text: str) -> int:
    """Call-like blocks left in a turn's text: a parsed call is removed from the content, so what is left was not
    read as one."""
    return max(text.count(_TOOL_CALL_TAG), len(_CALL_LIKE.findall(text)))


def transcript(completion: Any) -> str:
    """A whole multi-turn completion as one readable text: each turn's words, its calls and the tools' answers."""
    if not isinstance(completion, list):
        return (
            completion
            if isinstance(completion, str)
            else str(completion.get("content", ""))
            if isinstance(completion, dict)
            else ""
        )
    parts = []
    for message in completion:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            parts.append(f"<tool_response>\n{message.get('content', '')}\n</tool_response>")
            continue
        if message.get("content"):
            parts.append(str(message["content"]))
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call.get("function"), dict) else call
            body = json.dumps({"name": function.get("name"), "arguments": function.get("arguments")}, default=str)
            parts.append(f"<tool_call>\n{body}\n</tool_call>")
    return "\n".join(parts)
