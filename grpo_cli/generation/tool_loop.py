"""The tool loop TRL runs in training (`GRPOTrainer._tool_call_loop`), over any engine of this package: `grpo eval`'s
(greedy, continuous batching) and preflight's (sampled as training samples: policy_sampler.py).

A finished turn is parsed with TRL's parser for the template; its calls run behind the same guards as in training; the
results are appended as TRL appends them (the template's tool-response tokens, computed from a dummy conversation as
TRL does), and generation continues from the exact token ids, up to `max_tool_calling_iterations` turns and within
one completion budget (a result that would overflow it is dropped and the completion ends, as in TRL). Under greedy
decoding this gives the token sequences TRL's loop gives (tests/test_tools_eval.py).

Problems go through the loop a chunk at a time, so predictions.jsonl grows as problems finish and a rerun resumes.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.generation.base import Generated
from grpo_cli.tools.calls import call_name, figures, transcript
from grpo_cli.tools.guard import EnvironmentFailure
from rewards.answers import completion_text

CHUNK_BATCHES = 2  # problems per chunk = batch size x this


@dataclass
class Conversation:
    index: int  # the caller's problem index
    messages: list[dict]  # the prompt, as chat messages
    tools: list[Callable[..., Any]]  # what this conversation's model may call (tools + its environment's methods)
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)  # model and tool tokens, as TRL's completion_ids
    completion: list[dict] = field(default_factory=list)  # the turns: assistant and tool messages
    calls: list[dict] = field(default_factory=list)  # each call with its result
    model_tokens: int = 0

    @property
    def names(self) -> set[str]:
        return {getattr(tool, "__name__", "") for tool in self.tools}


@dataclass
class ToolLoopResult(Generated):
    """One conversation's completion: `text` is the model's own turns (which are scored), `new_tokens` counts model
    and tool tokens (reaching the budget means the completion was cut), `extra` holds the calls."""

    completion_ids: list[int] = field(default_factory=list)  # model and tool tokens, as TRL's completion_ids
    messages: list[dict] = field(default_factory=list)  # the completion as TRL hands it to rewards


class ToolLoop:
    def __init__(
        self,
        generator,
        tokenizer,
        tools: list[Callable[..., Any]],
        environment_factory,
        budget: int,
        max_iterations: int | None,
    ):
        from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

        self.generator, self.tokenizer = generator, tokenizer
        self.tools, self.environment_factory = tools, environment_factory
        self.budget = budget
        self.max_iterations = max_iterations if max_iterations is not None else 1 << 30
        # TRL renders with a prefix-preserving training template when the model's own is not one.
        self.chat_template = (
            None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
        )
        config = getattr(generator, "model", None) and generator.model.config
        self.max_model_len = getattr(config, "max_position_embeddings", None) or 1 << 30

    def run(self, examples: list[dict[str, Any]], batch_size: int) -> Iterator[list[ToolLoopResult]]:
        """`examples`: {"index", "prompt" (messages), plus the row's columns for an environment's reset}."""
        size = max(1, batch_size * CHUNK_BATCHES)
        for start in range(0, len(examples), size):
            conversations = [self._start(example) for example in examples[start : start + size]]
            self._generate(conversations, batch_size)
            yield [self._result(c) for c in conversations]

    def _start(self, example: dict[str, Any]) -> Conversation:
        messages = [dict(m) for m in example["prompt"]]
        tools = list(self.tools)
        if self.environment_factory is not None:
            from grpo_cli.tools.registry import environment_methods

            environment = self.environment_factory()
            try:
                observation = environment.reset(**{k: v for k, v in example.items() if k != "index"})
            except EnvironmentFailure as failure:  # the problems already finished are kept
                raise UserError(
                    f"{failure}; fix the environment and run the same command again", "environment"
                ) from None
            if isinstance(observation, str):
                messages[-1] = {**messages[-1], "content": messages[-1]["content"] + observation}
            tools += [getattr(environment, name) for name, _ in environment_methods(type(environment))]
        conversation = Conversation(example["index"], messages, tools)
        conversation.prompt_ids = self._render(messages, tools)
        return conversation

    def _render(self, messages: list[dict], tools) -> list[int]:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            chat_template=self.chat_template,
        )

    def _generate(self, conversations: list[Conversation], batch_size: int) -> None:
        pending = self._turn(conversations, [c.prompt_ids for c in conversations], batch_size)
        iteration = 0
        while pending and iteration < self.max_iterations:
            continuing, contexts = [], []
            for conversation in pending:
                context = self._with_results(conversation)
                if context is not None:
                    continuing.append(conversation)
                    contexts.append(context)
            pending = self._turn(continuing, contexts, batch_size) if continuing else []
            iteration += 1

    def _turn(self, conversations: list[Conversation], contexts: list[list[int]], batch_size: int) -> list:
        """Generate the next turn of each conversation from its context; those whose turn calls tools."""
        budgets = [self.budget - (len(ctx) - len(c.prompt_ids)) for c, ctx in zip(conversations, contexts)]
        calling = []
        for batch in self.generator.generate(contexts, batch_size, budgets):
            for item in batch:
                conversation, context = conversations[item.index], contexts[item.index]
                ids = item.tokens + ([self.tokenizer.eos_token_id] if item.stopped else [])
                conversation.completion_ids = context[len(conversation.prompt_ids) :] + ids
                conversation.model_tokens += len(ids)
                if not ids:
                    continue
                message = self._parse(ids, context, conversation.tools)
                conversation.completion.append(message)
                if message.get("tool_calls"):
                    calling.append(conversation)
        return sorted(calling, key=lambda c: c.index)

    def _parse(self, ids: list[int], prefix: list[int], tools) -> dict:
        from trl.chat_template_utils import parse_response

        return parse_response(self.tokenizer, ids, prefix=prefix, tools=tools)

    def _with_results(self, conversation: Conversation) -> list[int] | None:
        """Run the last turn's calls and return the context to continue from; None when the results would not fit
        the budget (they are dropped, and the completion ends as it is)."""
        kept = len(conversation.completion)
        results = [self._call(conversation, call) for call in conversation.completion[-1]["tool_calls"]]
        for name, content in results:
            conversation.completion.append({"role": "tool", "name": name, "content": content})
        context = conversation.prompt_ids + conversation.completion_ids + self._suffix_ids(results)
        if len(context) - len(conversation.prompt_ids) > self.budget or len(context) >= self.max_model_len:
            del conversation.completion[kept:]
            return None
        return context

    def _call(self, conversation: Conversation, call: dict) -> tuple[str, str]:
        """(tool name, the text the model reads): the result, or str({"error": ...}) as TRL writes a failure."""
        name = call_name(call)
        function = call["function"] if isinstance(call.get("function"), dict) else call
        arguments = function["arguments"] if isinstance(function.get("arguments"), dict) else {}
        tool = next((t for t in conversation.tools if getattr(t, "__name__", None) == name), None)
        try:
            if call.get("type", "function") != "function":
                raise ValueError(f"Unsupported tool call type: {call.get('type')}")
            if tool is None:
                raise ValueError(f"Tool {name} not found.")
            result = tool(**arguments)
            if inspect.iscoroutine(result):
                result = asyncio.run(result)
            content, ok = (result if isinstance(result, str) else str(result)), True
        except Exception as exc:  # the guard has made it one short line already
            content, ok = str({"error": str(exc)}), False
        conversation.calls.append({"name": name, "arguments": arguments, "result": content[:500], "ok": ok})
        return name, content

    def _suffix_ids(self, results: list[tuple[str, str]]) -> list[int]:
        """The template's tokens for the tool messages and the next assistant header, cut from a dummy conversation
        exactly as TRL's `_get_tool_suffix_ids` does."""
        messages = [{"role": "tool", "name": n, "content": c} for n, c in results]
        dummy = [
            {"role": "user", "content": "dummy"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": results[0][0], "arguments": {}}}],
            },
        ]
        render = self.tokenizer.apply_chat_template
        prefix = render(
            dummy, add_generation_prompt=False, tokenize=True, return_dict=False, chat_template=self.chat_template
        )
        full = render(
            dummy + messages,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            chat_template=self.chat_template,
        )
        ends = [i for i, token in enumerate(prefix) if token == self.tokenizer.eos_token_id]
        if ends:
            prefix = prefix[: ends[-1] + 1]
        return full[len(prefix) :]

    def _result(self, conversation: Conversation) -> ToolLoopResult:
        counted = figures(conversation.completion, conversation.names)
        failures = sum(not call["ok"] for call in conversation.calls)
        extra = {
            "transcript": transcript(conversation.completion),
            "tool_calls": conversation.calls,
            "tools": {
                "calls": len(conversation.calls),
                "failures": failures,
                "malformed": counted.malformed,
                "turns": counted.turns,
            },
        }
        return ToolLoopResult(
            conversation.index,
            completion_text(conversation.completion),
            len(conversation.completion_ids),
            model_tokens=conversation.model_tokens,
            extra=extra,
            completion_ids=conversation.completion_ids,
            messages=conversation.completion,
        )


def tool_summary(records: list[dict[str, Any]]) -> dict[str, float] | None:
    """Calls, failures, malformed attempts and turns per completion (eval has one per problem), for summary.json and
    preflight; None without tools."""
    figures_of = [r["tools"] for r in records if isinstance(r.get("tools"), dict)]
    if not figures_of:
        return None
    n = len(figures_of)
    calls = sum(f["calls"] for f in figures_of)
    return {
        "completions_with_calls": sum(f["calls"] > 0 for f in figures_of) / n,
        "calls_per_completion": calls / n,
        "failure_rate": sum(f["failures"] for f in figures_of) / calls if calls else 0.0,
        "malformed_per_completion": sum(f["malformed"] for f in figures_of) / n,
        "completions_with_malformed": sum(f["malformed"] > 0 for f in figures_of) / n,
        "turns_per_completion": sum(f["turns"] for f in figures_of) / n,
    }
