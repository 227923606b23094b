"""The SFT stage's examples, as TRL's SFTTrainer reads prompt-completion pairs: from a file or hub dataset, or from the
recipe's own training rows with their reference solutions rendered in the asked answer format. (Examples sampled
from the model itself: sft_sampling.py.)"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.schema import ToolSpec
from grpo_cli.recipe.sft_section import REFERENCE, SELF, SftSection

# GSM8K's calculator annotations (`<<48/2=24>>`): tool traces of the annotators, not text a model should learn.
CALCULATOR = re.compile(r"<<[^<>]*>>")
KEY = "sft.source"


@dataclass
class SftExamples:
    rows: list[dict[str, Any]]  # {"prompt", "completion"}: chat messages or plain text
    source: dict[str, Any] = field(default_factory=dict)  # what RUN/sft/source.json records

    def describe(self) -> str:
        """One line: how many examples, from where."""
        s = self.source
        if s.get("source") == SELF:
            return (
                f"{len(self.rows)} examples kept of {s['samples']} completions sampled for {s['prompts']} training "
                f"prompts ({s['per_prompt']} each; {s['reward']} >= {s['min_reward']:g}; the answer marker added to "
                f"{s['marked']})"
            )
        if s.get("source") == REFERENCE:
            held = f"; rows past data.limit {s['limit']} stay held out" if s.get("limit") else ""
            calls = ""
            if "tool_calls" in s:
                calls = f"; {s['tool_calls']} calls"
                calls += f", {s['malformed']} rows dropped for a malformed annotation" if s["malformed"] else ""
            return (
                f"{len(self.rows)} examples: training rows with their reference solutions ({s['format']}){calls}{held}"
            )
        dropped = (
            f" ({s['unusable']} of its {s['rows']} rows without {s['needs']}, dropped)" if s.get("unusable") else ""
        )
        return f"{len(self.rows)} examples from {s.get('source')}{dropped}"


def training_examples(section: SftSection, data: DataSection, tools: list[ToolSpec], seed: int) -> SftExamples | None:
    """The examples of a file, hub dataset or the reference solutions of `data` (drawn as training draws them with
    `seed`, as tool traces when there are `tools`); None for `self` (it needs the model)."""
    if section.source == SELF:
        return None
    if section.source == REFERENCE:
        return reference_examples(data, section.count, seed, tools)
    return dataset_examples(section)


def dataset_examples(section: SftSection) -> SftExamples:
    """Rows with `messages` (the last assistant turn is the completion, the turns before it the prompt) or with
    `prompt` and `completion`."""
    from grpo_cli.data import load_rows

    rows = load_rows(section.source, section.config, section.split, key=KEY)
    columns = rows.column_names
    if len(rows) == 0:
        raise UserError(f"{section.source} holds no rows", path=KEY)
    if "messages" in columns:
        pairs = [_split_conversation(m) for m in rows["messages"]]
    elif "prompt" in columns and "completion" in columns:
        pairs = [_pair(p, c) for p, c in zip(rows["prompt"], rows["completion"])]
    else:
        raise UserError(
            f"{section.source} has no `messages` column and no `prompt` and `completion` columns (it has: "
            f"{', '.join(columns) or 'none'})",
            path=KEY,
        )
    usable = [p for p in pairs if p is not None]
    what = "an assistant turn after a user turn" if "messages" in columns else "a non-empty prompt and completion"
    if not usable:
        raise UserError(f"no usable example in {section.source}: each row needs {what}", path=KEY)
    unusable = len(pairs) - len(usable)
    usable = usable[: section.count] if section.count else usable
    return SftExamples(usable, {"source": section.source, "rows": len(rows), "unusable": unusable, "needs": what})


def _split_conversation(messages: Any) -> dict[str, Any] | None:
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        return None
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=0)
    if last == 0 or not str(messages[last].get("content") or "").strip():
        return None
    keep = ("role", "content")
    return {
        "prompt": [{k: m[k] for k in keep if k in m} for m in messages[:last]],
        "completion": [{"role": "assistant", "content": messages[last]["content"]}],
    }


def _pair(prompt: Any, completion: Any) -> dict[str, Any] | None:
    if isinstance(prompt, str) and isinstance(completion, str) and prompt.strip() and completion.strip():
        return {"prompt": prompt, "completion": completion}
    if _messages(prompt) and _messages(completion):
        return {"prompt": prompt, "completion": completion}
    return None


def _messages(turns: Any) -> bool:
    """A non-empty list of chat messages, each with a role and text content (a list of numbers is not a prompt)."""
    return (
        isinstance(turns, list)
        and bool(turns)
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in turns
        )
    )


def reference_examples(data: DataSection, count: int | None, seed: int, tools: list[ToolSpec] = ()) -> SftExamples:
    """The first `count` training rows (those GRPO trains on: within data.limit, after its shuffle and filters), each
    prompted as GRPO prompts it and answered with its reference solution in the asked format. When the recipe offers
    the calculator, each annotated step of a GSM8K-format solution becomes a calculator call (tools/traces.py)."""
    from grpo_cli.data import build_prompt, select_rows

    rows, _ = select_rows(data, seed)
    rows = rows[:count] if count else rows
    fmt = "`#### <answer>`" if data.answer_marker == "hashes" else "`<answer>` tags"
    source = {"source": REFERENCE, "rows": len(rows), "limit": data.limit, "format": fmt}
    prompts = [build_prompt(row[data.prompt_column], data.system_prompt, data.chat) for row in rows]
    answers = [str(row[data.answer_column]) for row in rows]
    if calls_calculator(data, tools):
        return _trace_examples(prompts, answers, data, tools, source)
    examples = [
        {"prompt": prompt, "completion": as_completion(reference_solution(answer, data), data.chat)}
        for prompt, answer in zip(prompts, answers)
    ]
    return SftExamples(examples, source)


def calls_calculator(data: DataSection, tools: list[ToolSpec]) -> bool:
    """Whether reference solutions become calculator traces: chat prompts, GSM8K-format solutions (their `<<...>>`
    notes are the calls) and a tool named `calculator` among the recipe's tools."""
    from grpo_cli.tools.traces import TOOL

    return data.chat and data.answer_format == "gsm8k" and any(_tool_name(spec) == TOOL for spec in tools)


def _tool_name(spec: ToolSpec) -> str:
    return spec.name.rsplit(":", 1)[-1]


def _trace_examples(prompts, answers, data: DataSection, tools, source: dict[str, Any]) -> SftExamples:
    """Reference solutions as calculator traces; rows whose annotations the calculator cannot reproduce are dropped
    and counted. Each example carries the tools' schemas so the template renders them as GRPO's prompts do."""
    from grpo_cli.data import gold_answer
    from grpo_cli.tools.traces import calculator_trace

    schemas = json.dumps(tool_schemas(tools))
    examples, problems, calls = [], [], 0
    for prompt, answer in zip(prompts, answers):
        worked = answer.split("####", 1)[0]
        trace = calculator_trace(worked, with_marker("", gold_answer(answer, data.answer_format), data))
        if trace.messages is None:
            problems.append(trace.problem)
            continue
        calls += trace.calls
        examples.append({"prompt": prompt, "completion": trace.messages, "tools": schemas})
    if not examples:
        first = f" (the first: {problems[0]})" if problems else ""
        raise UserError(f"no reference solution could be written as calculator calls{first}", path=KEY)
    source.update(
        format=f"calculator calls at each annotated step, then {source['format']}",
        tool_calls=calls,
        malformed=len(problems),
        malformed_examples=problems[:3],
        without_calls=sum(1 for e in examples if len(e["completion"]) == 1),
    )
    return SftExamples(examples, source)


def tool_schemas(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """The JSON schemas the chat template renders for the recipe's tools, as TRL builds them for GRPO's prompts."""
    from transformers.utils import get_json_schema

    from grpo_cli.tools.registry import guarded_tools

    return [get_json_schema(tool) for tool in guarded_tools(tools)]


def reference_solution(raw: str, data: DataSection) -> str:
    """A reference answer written as the system prompt asks: GSM8K's worked solution (calculator notes dropped),
    then the answer after `####` or inside <answer> (after a <reasoning> block when the prompt asks for one)."""
    from grpo_cli.data import gold_answer

    gold = gold_answer(raw, data.answer_format)
    working = CALCULATOR.sub("", raw.split("####", 1)[0]).strip() if data.answer_format == "gsm8k" else ""
    return with_marker(working, gold, data)


def with_marker(text: str, gold: str, data: DataSection) -> str:
    """`text` followed by the answer, marked as data.answer_marker asks."""
    text = text.rstrip()
    if data.answer_marker == "hashes":
        return f"{text}\n#### {gold}" if text else f"#### {gold}"
    answer = f"<answer>\n{gold}\n</answer>"
    if "<reasoning>" in (data.system_prompt or "") and "<reasoning>" not in text:
        return f"<reasoning>\n{text}\n</reasoning>\n{answer}"
    return f"{text}\n{answer}" if text else answer


def as_completion(text: str, chat: bool) -> Any:
    return [{"role": "assistant", "content": text}] if chat else text
