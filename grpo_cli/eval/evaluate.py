"""`grpo eval`: accuracy of a base model or a trained run, resumable, with honest intervals.

Three protocols (`task` scores the recipe's own data with its own verifiers: eval/task.py). GSM8K's two:
- `chat`: zero-shot, the chat template and the recipe's system prompt, the way the model was trained. strict-match =
  the number inside <answer>; flexible-extract = that, else the last number (the training reward's rule).
- `lm-eval`: lm-evaluation-harness's `gsm8k` task (0.4.13): 5-shot "Question: ...\\nAnswer:" prompts with few-shot
  examples drawn by its sampler, its stop sequences, 256 new tokens, and its two filters and exact_match
  normalisation (rewards/answers.py, shared with the training rewards), so the figures sit beside published ones.

Every scored problem is appended to predictions.jsonl at once; a rerun with the same output continues with the
problems not yet there, so none is lost or scored twice. Sampled (`--samples N --temperature T`), a problem's record
holds its N completions (eval/sampled.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from grpo_cli.eval.sampled import ProblemSamples, by_problem, repeated, sampled_record, sampling_of
from grpo_cli.eval.store import PredictionStore, previous_session
from grpo_cli.eval.suite import EvalSuite, build_suite, max_new_tokens
from grpo_cli.eval.targets import Target
from grpo_cli.eval.task import task_settings
from grpo_cli.files import sole_writer
from grpo_cli.generation.base import Generator
from grpo_cli.generation.engines import build_generator, choose_engine, engine_label
from grpo_cli.generation.tool_loop import tool_summary
from grpo_cli.progress import quiet_libraries
from grpo_cli.recipe.precision import compute_dtype
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.user_code import EnvironmentSpec, ToolSpec
from grpo_cli.runs.layout import SUMMARY_FILE


@dataclass
class EvalResult:
    output: Path
    summary: dict[str, Any]
    records: dict[int, dict[str, Any]] = field(default_factory=dict)


def settings_of(recipe: Recipe, target: Target, compute_dtype: str | None = None) -> dict[str, Any]:
    """What makes two evaluations the same one (limit and batch size may change between resumes). `compute_dtype` is
    recorded only where it differs from the weights' dtype: an evaluation that computes in its weights' dtype has
    settings without the key, and those still match a folder whose settings lack it. Reads the eval, model and data
    sections, and the tools, environment, tool-call limit and rewards where they take part."""
    ev = recipe.eval
    return {
        "model": target.model,
        "adapter": target.adapter,
        "dtype": recipe.model.dtype,
        **({"compute_dtype": compute_dtype} if compute_dtype not in (None, recipe.model.dtype) else {}),
        "source": ev.source,
        "config": ev.config,
        "split": ev.split,
        "protocol": ev.protocol,
        "max_new_tokens": max_new_tokens(ev),
        **(drawn.settings() if (drawn := sampling_of(ev)) is not None else {}),  # greedy: no sampling keys
        **(
            {
                "tools": [t.name for t in recipe.tools],
                "max_tool_calling_iterations": recipe.grpo.max_tool_calling_iterations,
                **({"environment": recipe.environment.model_dump()} if recipe.environment else {}),
            }
            if uses_tools(recipe.tools, recipe.environment)
            else {}
        ),
        **(task_settings(ev, recipe.data, recipe.rewards) if ev.protocol == "task" else {}),
        **(
            {"num_fewshot": ev.num_fewshot, "fewshot_source": ev.fewshot_source, "fewshot_seed": ev.fewshot_seed}
            if ev.protocol == "lm-eval"
            else {
                "system_prompt": recipe.data.system_prompt,
                "chat": recipe.data.chat,
                **({"answer_marker": recipe.data.answer_marker} if recipe.data.answer_marker != "tag" else {}),
            }
        ),
    }


def evaluate(recipe: Recipe, target: Target, output: Path, display=None, engine: str = "auto") -> EvalResult:
    """Score every problem of the split (up to eval.limit) that `output` does not hold yet, generating with `engine`
    (grpo_cli/generation/engines.py); no other grpo process writes `output` meanwhile."""
    with sole_writer(output, "grpo eval --output"):
        return _evaluate(recipe, target, output, display, engine)


def _evaluate(recipe: Recipe, target: Target, output: Path, display, engine: str) -> EvalResult:
    """`evaluate` once it holds `output`. Reads the eval, data, model and quantization sections, and the rewards,
    training seed, tools, environment and tool-call limit where the protocol or the recipe uses them."""
    ev, data = recipe.eval, recipe.data
    quiet_libraries()  # dataset-loading bars and hub retry warnings would sit above our own progress
    note = display.note if display else None
    suite = build_suite(ev, data, recipe.rewards, recipe.model, recipe.training.seed, note)  # refusals before any file
    problems, unscorable = list(suite.problems), suite.unscorable
    model = recipe.model.model_copy(update={"name": target.model})  # the target, not the recipe's own model
    tools_used = uses_tools(recipe.tools, recipe.environment)
    if tools_used:  # before any file is written or weight loaded
        from grpo_cli.models import load_tokenizer
        from grpo_cli.tools.template import check_tool_template

        check_tool_template(load_tokenizer(model), target.model)
    choice = choose_engine(engine, recipe.quantization, target.adapter, tools_used)  # before any file
    sampling, names = sampling_of(ev), suite.names
    dtype = compute_dtype(recipe.model, recipe.quantization)
    store = PredictionStore(output, settings_of(recipe, target, dtype) | choice.settings(), problems)
    todo = [p for p in problems if p.index not in store.records]
    wall, new_tokens, engine_used = 0.0, 0, None
    if todo:
        if display and choice.note:
            display.note(f"{target.label}: {choice.note}")
        budget = suite.budget
        generator, tokenizer = build_generator(
            model, recipe.quantization, target.adapter, choice, dtype, budget, suite.stops, sampling
        )
        engine_used = {"engine": generator.name, "engine_version": generator.version, "lora_path": choice.lora_path}
        limit = recipe.grpo.max_tool_calling_iterations
        loop = _tool_loop(recipe.tools, recipe.environment, recipe.model.name, generator, tokenizer, budget, limit)
        stream = _stream(suite, generator, tokenizer, todo, sampling, loop)
        if display:
            display.start(
                target.label,
                len(problems),
                done=[store.records[p.index] for p in problems if p.index in store.records],
                unscorable=unscorable,
                engine=engine_label(generator, dtype),
                names=names,
            )
        record = partial(_record, suite=suite)
        wall, new_tokens = _score_batches(stream, todo, store, display, record)
        if display:
            display.stop()
        generator.close()  # vLLM's engine holds its weights and KV cache until freed; the next target starts one
    scored = [store.records[p.index] for p in problems]
    summary = {
        "target": target.label,
        "model": target.model,
        "adapter": target.adapter,
        "protocol": ev.protocol,
        "max_new_tokens": max_new_tokens(ev),
        "data": {
            "source": ev.task_data(data)[0] if ev.protocol == "task" else ev.source,
            "split": ev.split,
            "limit": ev.limit,
            "unscorable": unscorable,
        },
        **suite.summary(scored, wall, len(todo), new_tokens, sampling),
    }
    tools = tool_summary(scored)
    if tools is not None:
        summary["tools"] = tools
    summary["session"].update(engine_used or {})
    if not todo:  # nothing generated now (a finished evaluation reused): keep the last generating session's timing
        summary["session"] = previous_session(output) or summary["session"]
    (output / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return EvalResult(output, summary, {p.index: store.records[p.index] for p in problems})


def _score_batches(stream, todo: list, store: PredictionStore, display, record) -> tuple[float, int]:
    """Each batch of `stream` scored by `record` and stored as it comes; the seconds it took and the new tokens."""
    started, new_tokens = time.perf_counter(), 0
    for batch in stream:
        records = [record(todo[item.index], item) for item in batch]
        new_tokens += sum(item.model_tokens for item in batch)
        store.add(records)
        if display:
            display.advance(records, time.perf_counter() - started)
    return time.perf_counter() - started, new_tokens


def _record(problem, item, suite: EvalSuite) -> dict[str, Any]:
    """One scored problem, as predictions.jsonl stores it (sampled: with each of its completions)."""
    if isinstance(item, ProblemSamples):
        verdicts = [suite.verdict(problem, s.text) for s in item.samples]
        return sampled_record(problem, item.samples, verdicts, suite.ev.protocol)
    return {
        "index": problem.index,
        "question": problem.question,
        "gold": problem.gold,
        "completion": item.text,
        **suite.verdict(problem, item.text),
        "new_tokens": item.new_tokens,
        **item.extra,
    }


def _stream(suite: EvalSuite, generator: Generator, tokenizer, todo: list, sampling, loop=None):
    """The completions, a batch at a time: one per problem, or sampled, each problem's N together; through the tool
    `loop` when the recipe has tools."""
    batch_size = suite.ev.batch_size
    if loop is not None:
        return _tool_stream(loop, todo, suite.data.system_prompt, batch_size)
    prompts = suite.prompts(tokenizer, todo)
    if sampling is None:
        return generator.generate(prompts, batch_size)
    prompts, seeds = repeated(prompts, todo, sampling)
    return by_problem(generator.generate(prompts, batch_size, seeds=seeds), sampling.samples)


def uses_tools(tools: list[ToolSpec], environment: EnvironmentSpec | None) -> bool:
    return bool(tools) or environment is not None


def _tool_loop(
    tools: list[ToolSpec],
    environment: EnvironmentSpec | None,
    model_name: str,
    generator: Generator,
    tokenizer,
    budget: int,
    max_iterations: int | None,
):
    """The tool loop on `generator`, with the recipe's tools and environment behind their guards, up to `budget` new
    tokens and `max_iterations` tool turns (grpo.max_tool_calling_iterations) a completion; None without tools."""
    if not uses_tools(tools, environment):
        return None
    from grpo_cli.generation.tool_loop import ToolLoop
    from grpo_cli.tools.wiring import recipe_tools

    guarded, environment_factory = recipe_tools(tools, environment, model_name, tokenizer)
    return ToolLoop(generator, tokenizer, guarded, environment_factory, budget, max_iterations)


def _tool_stream(loop, todo: list, system_prompt: str | None, batch_size: int):
    """The problems through the tool loop, asked with the recipe's system prompt as chat."""
    from grpo_cli.data import build_prompt

    examples = [
        {
            "index": k,
            "prompt": build_prompt(p.question, system_prompt, True),
            "question": p.question,
            "answer": p.gold,
        }
        for k, p in enumerate(todo)
    ]
    return loop.run(examples, batch_size)
