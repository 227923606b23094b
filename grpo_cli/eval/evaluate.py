"""`grpo eval`: GSM8K accuracy of a base model or a trained run, resumable, with honest intervals.

Two protocols:
- `chat`: zero-shot, the chat template and the recipe's system prompt, the way the model was trained.
  strict-match = the number inside <answer>; flexible-extract = that, else the last number (the training reward's
  rule). Numbers are compared numerically.
- `lm-eval`: lm-evaluation-harness's `gsm8k` task (0.4.13): 5-shot "Question: ...\\nAnswer:" prompts with few-shot
  examples drawn by its sampler, its stop sequences, 256 new tokens, and its two filters and exact_match
  normalisation (grpo_cli/answers.py), so the figures sit beside published ones.

Every scored problem is appended to predictions.jsonl at once; a rerun with the same output continues with the
problems not yet there, so none is lost or scored twice.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.answers import (
    LM_EVAL_FALLBACK, LM_EVAL_FLEXIBLE, LM_EVAL_STRICT, extract_answer, gsm8k_gold, lm_eval_exact_match,
    marked_answer, numbers_equal, regex_filter,
)
from grpo_cli.data import GENERATED, build_prompt, load_rows
from grpo_cli.errors import UserError
from grpo_cli.recipe.schema import EvalSection, Recipe
from grpo_cli.eval.stats import paired_difference, wilson_interval

PREDICTIONS = "predictions.jsonl"
SUMMARY = "summary.json"
SETTINGS = "settings.json"
COMPARISON = "comparison.json"
FILTERS = ("strict-match", "flexible-extract")
LM_EVAL_STOPS = ["Question:", "</s>", "<|im_end|>"]  # gsm8k.yaml `until`; the tokenizer's EOS is added
DEFAULT_MAX_NEW_TOKENS = {"chat": 512, "lm-eval": 256}
# Seeds for `generated` data: evaluation problems must not be the training problems (data.py uses seed 0).
GENERATED_TEST_SEED, GENERATED_FEWSHOT_SEED = 7919, 0


@dataclass(frozen=True)
class Problem:
    index: int  # position in the split: the identity used for resuming and for pairing base and trained
    question: str
    answer: str  # the full reference text (lm-eval compares against it after its normalisation)
    gold: str  # the number after ####


@dataclass(frozen=True)
class Target:
    """What is evaluated: a model (hub id, directory, .gguf) and optionally a LoRA adapter on top of it."""

    label: str
    model: str
    adapter: str | None = None


@dataclass
class EvalResult:
    output: Path
    summary: dict[str, Any]
    records: dict[int, dict[str, Any]] = field(default_factory=dict)


def max_new_tokens(ev: EvalSection) -> int:
    return ev.max_new_tokens or DEFAULT_MAX_NEW_TOKENS[ev.protocol]


# ---------------------------------------------------------------- problems and prompts


def load_problems(ev: EvalSection) -> list[Problem]:
    """The first `limit` problems of the split, in the split's order (so every model sees the same ones)."""
    rows = load_rows(ev.source, ev.config, ev.split, ev.limit, seed=GENERATED_TEST_SEED, key="eval.source (--data)")
    missing = [c for c in ("question", "answer") if c not in rows.column_names]
    if missing:
        raise UserError(f"evaluation data needs GSM8K's `question` and `answer` fields; it has: "
                        f"{', '.join(rows.column_names)}", path="eval.source")
    count = len(rows) if ev.limit is None else min(ev.limit, len(rows))
    return [Problem(i, str(r["question"]), str(r["answer"]), gsm8k_gold(str(r["answer"])))
            for i, r in enumerate(rows.select(range(count)))]


def fewshot_pool(ev: EvalSection) -> list[dict[str, Any]]:
    """lm-eval draws few-shot examples from GSM8K's train split."""
    source = ev.fewshot_source
    if source is None:
        local = Path(ev.source).expanduser()
        if ev.source == GENERATED or not local.is_file():
            source = ev.source
        else:
            sibling = local.with_name(re.sub(r"test", "train", local.name))
            if sibling == local or not sibling.is_file():
                raise UserError(f"the lm-eval protocol needs few-shot examples: no train file beside {local}; "
                                "set eval.fewshot_source=path/to/train.jsonl (or eval.num_fewshot=0)",
                                path="eval.fewshot_source")
            source = str(sibling)
    rows = load_rows(source, ev.config, "train", 1000 if source == GENERATED else None, seed=GENERATED_FEWSHOT_SEED,
                     key="eval.fewshot_source")
    return [dict(r) for r in rows]


def lm_eval_prompts(problems: list[Problem], pool: list[dict[str, Any]], num_fewshot: int, seed: int) -> list[str]:
    """lm-eval's context for each problem. Its sampler is one Random(seed) drawn from once per document in split
    order, so problem i's examples depend on the draws for problems 0..i-1: problems must start at index 0."""
    rnd = random.Random(seed)
    prompts = []
    for expected, problem in enumerate(problems):
        assert problem.index == expected, "lm-eval prompts are defined for a prefix of the split"
        shots = rnd.sample(pool, num_fewshot) if num_fewshot else []
        context = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
        prompts.append(f"{context}Question: {problem.question}\nAnswer:")
    return prompts


def chat_prompts(problems: list[Problem], recipe: Recipe, tokenizer) -> list[str]:
    """The training prompt: the recipe's system prompt, through the chat template (or plain text)."""
    prompts = []
    for problem in problems:
        prompt = build_prompt(problem.question, recipe.data.system_prompt, recipe.data.chat)
        if isinstance(prompt, list):
            prompt = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        prompts.append(prompt)
    return prompts


# ---------------------------------------------------------------- scoring


def score(protocol: str, completion: str, problem: Problem, marker: str = "tag") -> dict[str, Any]:
    """Extracted answers per filter, whether each is correct, and whether the answer format was followed.

    `marker` (chat protocol): how the recipe's system prompt asked the model to mark its answer."""
    if protocol == "lm-eval":
        extracted = {"strict-match": regex_filter(completion, LM_EVAL_STRICT),
                     "flexible-extract": regex_filter(completion, LM_EVAL_FLEXIBLE, group_select=-1)}
        correct = {name: lm_eval_exact_match(value, problem.answer) for name, value in extracted.items()}
        formatted = extracted["strict-match"] != LM_EVAL_FALLBACK
    else:
        extracted = {"strict-match": marked_answer(completion, marker),
                     "flexible-extract": extract_answer(completion)}
        correct = {name: numbers_equal(value, problem.gold) for name, value in extracted.items()}
        formatted = extracted["strict-match"] is not None
    return {"extracted": extracted, "correct": correct, "formatted": formatted}


def summarize(records: list[dict[str, Any]], wall_s: float, new_problems: int, new_tokens: int) -> dict[str, Any]:
    n = len(records)
    filters = {}
    for name in FILTERS:
        correct = sum(bool(r["correct"][name]) for r in records)
        low, high = wilson_interval(correct, n)
        filters[name] = {"correct": correct, "accuracy": correct / n if n else 0.0, "ci95": [low, high]}
    return {
        "problems": n,
        "filters": filters,
        "format_rate": sum(bool(r["formatted"]) for r in records) / n if n else 0.0,
        "mean_new_tokens": sum(r["new_tokens"] for r in records) / n if n else 0.0,
        # Throughput of this invocation's generation only (a resumed run does not count earlier sessions).
        "session": {"problems": new_problems, "generated_tokens": new_tokens, "wall_s": round(wall_s, 3),
                    "problems_per_s": new_problems / wall_s if wall_s > 0 else None,
                    "tokens_per_s": new_tokens / wall_s if wall_s > 0 else None},
    }


# ---------------------------------------------------------------- the per-problem file


class PredictionStore:
    """predictions.jsonl + settings.json in one output directory; appends, never rewrites a scored problem."""

    def __init__(self, directory: Path, settings: dict[str, Any]):
        self.directory = directory
        self.path = directory / PREDICTIONS
        directory.mkdir(parents=True, exist_ok=True)
        settings_file = directory / SETTINGS
        if settings_file.exists():
            previous = json.loads(settings_file.read_text(encoding="utf-8"))
            changed = [k for k in sorted(set(previous) | set(settings)) if previous.get(k) != settings.get(k)]
            if changed:
                detail = "; ".join(f"{k}: {previous.get(k)!r} there, {settings.get(k)!r} now" for k in changed[:3])
                raise UserError(f"{directory} holds an evaluation with other settings ({detail}); "
                                "choose another --output, or delete that directory to start over")
        else:
            settings_file.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        self.records = self._read()

    def _read(self) -> dict[int, dict[str, Any]]:
        """Scored problems so far. A line cut short by a kill is dropped (and cut from the file) to be redone."""
        if not self.path.exists():
            return {}
        raw = self.path.read_bytes()
        records, good_bytes = {}, 0
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break
            records[int(record["index"])] = record
            good_bytes += len(line)
        if good_bytes != len(raw):
            with open(self.path, "r+b") as handle:
                handle.truncate(good_bytes)
        return records

    def add(self, batch: list[dict[str, Any]]) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            for record in batch:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())  # a batch is minutes of CPU work: make it survive a power cut too
        for record in batch:
            self.records[record["index"]] = record


# ---------------------------------------------------------------- running


def settings_of(recipe: Recipe, target: Target) -> dict[str, Any]:
    """What makes two evaluations the same one (limit and batch size may change between resumes)."""
    ev = recipe.eval
    return {
        "model": target.model, "adapter": target.adapter, "dtype": recipe.model.dtype,
        "source": ev.source, "config": ev.config, "split": ev.split, "protocol": ev.protocol,
        "max_new_tokens": max_new_tokens(ev),
        **({"num_fewshot": ev.num_fewshot, "fewshot_source": ev.fewshot_source, "fewshot_seed": ev.fewshot_seed}
           if ev.protocol == "lm-eval" else {"system_prompt": recipe.data.system_prompt, "chat": recipe.data.chat,
                 **({"answer_marker": recipe.data.answer_marker} if recipe.data.answer_marker != "tag" else {})}),
    }


def evaluate(recipe: Recipe, target: Target, output: Path, display=None) -> EvalResult:
    """Score every problem of the split (up to eval.limit) that `output` does not hold yet."""
    ev = recipe.eval
    from grpo_cli.quiet import quiet_libraries

    quiet_libraries()  # dataset-loading bars and hub retry warnings would sit above our own progress
    problems = load_problems(ev)
    pool = fewshot_pool(ev) if ev.protocol == "lm-eval" and ev.num_fewshot else []  # its errors come before any file
    store = PredictionStore(output, settings_of(recipe, target))
    todo = [p for p in problems if p.index not in store.records]
    wall, new_tokens = 0.0, 0
    if todo:
        model_recipe = recipe.model_copy(update={"model": recipe.model.model_copy(update={"name": target.model})})
        generator, tokenizer = _generator(model_recipe, target, max_new_tokens(ev))
        if ev.protocol == "lm-eval":
            # Prompts for a prefix of the split, so the sampler's draws match lm-eval's; then keep the ones to do.
            all_prompts = lm_eval_prompts(problems, pool, ev.num_fewshot, ev.fewshot_seed)
            prompts = [all_prompts[p.index] for p in todo]
        else:
            prompts = chat_prompts(todo, recipe, tokenizer)
        if display:
            display.start(target.label, len(problems), done=[store.records[p.index] for p in problems
                                                             if p.index in store.records])
        started = time.perf_counter()
        for batch in generator.generate(prompts, ev.batch_size):
            records = []
            for item in batch:
                problem = todo[item.index]
                records.append({"index": problem.index, "question": problem.question, "gold": problem.gold,
                                "completion": item.text, **score(ev.protocol, item.text, problem, recipe.data.answer_marker),
                                "new_tokens": item.new_tokens})
                new_tokens += item.new_tokens
            store.add(records)
            if display:
                display.advance(records, time.perf_counter() - started)
        wall = time.perf_counter() - started
        if display:
            display.stop()
    scored = [store.records[p.index] for p in problems]
    summary = {"target": target.label, "model": target.model, "adapter": target.adapter, "protocol": ev.protocol,
               "data": {"source": ev.source, "split": ev.split, "limit": ev.limit},
               **summarize(scored, wall, len(todo), new_tokens)}
    (output / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return EvalResult(output, summary, {p.index: store.records[p.index] for p in problems})


def _generator(recipe: Recipe, target: Target, budget: int):
    """vLLM when installed on CUDA (not for bitsandbytes-quantized models), else transformers' generate."""
    import torch

    from grpo_cli.eval.generation import (
        ContinuousGenerator, HFGenerator, VLLMGenerator, supports_continuous_batching, vllm_available,
    )
    from grpo_cli.models import load_model, load_tokenizer, resolve_model_path
    from grpo_cli.quiet import quiet_libraries

    quiet_libraries()
    tokenizer = load_tokenizer(recipe)
    stops = LM_EVAL_STOPS if recipe.eval.protocol == "lm-eval" else []
    if vllm_available() and recipe.quantization is None:
        return VLLMGenerator(resolve_model_path(recipe.model.name), tokenizer, budget, stops, recipe.model.dtype,
                             target.adapter, recipe.model.trust_remote_code), tokenizer
    model = load_model(recipe)
    if target.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, target.adapter)
        if recipe.quantization is None:
            model = model.merge_and_unload()  # one plain model generates faster than base + adapter
    if torch.cuda.is_available() and recipe.quantization is None:
        model = model.to("cuda")
    model.eval()
    max_length = getattr(model.config, "max_position_embeddings", None)
    engine = ContinuousGenerator if supports_continuous_batching(model) else HFGenerator
    return engine(model, tokenizer, budget, stops, max_length), tokenizer


def default_output(ev: EvalSection, target: Target, run_dir: Path | None = None) -> Path:
    """RUN/eval/<protocol>-<data> for a run (base/ and trained/ beneath), else evals/<model>[-<adapter>]-<...>."""
    tag = f"{ev.protocol}-{Path(ev.source).stem if Path(ev.source).suffix else ev.split}"
    if run_dir is not None:
        return run_dir / "eval" / tag
    adapter = f"-{_slug(target.adapter)}" if target.adapter else ""
    return Path("evals") / f"{_slug(target.model)}{adapter}-{tag}"


def _slug(name: str) -> str:
    """A folder name from a hub id or a path: `Qwen/Qwen2.5-0.5B` -> `Qwen2.5-0.5B`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name.rstrip("/")).name.removesuffix(".gguf")) or "model"


def run_target(run_dir: Path, recipe: Recipe) -> Target:
    """The trained model of a finished run: its LoRA adapter on the recipe's base, or its full weights."""
    from grpo_cli.models import is_lora_adapter
    from grpo_cli.train.run_dir import FINAL_DIR

    final = run_dir / FINAL_DIR
    if is_lora_adapter(final):
        return Target("trained", recipe.model.name, str(final))
    if (final / "config.json").exists():
        return Target("trained", str(final))
    raise UserError(f"{run_dir} has no finished model in {final}: finish it with `grpo train RECIPE --resume`, "
                    "or evaluate a checkpoint with --adapter RUN/checkpoint-N (LoRA runs)")


def compare(base: EvalResult, trained: EvalResult, output: Path) -> dict[str, Any]:
    """Trained minus base on the problems both scored, per filter, with a paired 95% interval."""
    common = sorted(set(base.records) & set(trained.records))
    result = {"problems": len(common), "base": str(base.output), "trained": str(trained.output), "filters": {}}
    for name in FILTERS:
        before = [bool(base.records[i]["correct"][name]) for i in common]
        after = [bool(trained.records[i]["correct"][name]) for i in common]
        result["filters"][name] = {"base": sum(before) / len(common) if common else 0.0,
                                   "trained": sum(after) / len(common) if common else 0.0,
                                   **paired_difference(before, after)}
    output.mkdir(parents=True, exist_ok=True)
    (output / COMPARISON).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result
