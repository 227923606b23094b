"""Reward models and judges, checked offline: the entry's shape, what the folder holds (a classification head or a
causal LM, read from config.json's `architectures`), the judge's prompt, and the model's context against a prompt
and its completion. Whether the weights load and what the head computes needs the weights: training checks that as
it starts (grpo_cli/model_rewards/)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from grpo_cli.chat_templates import template_problem
from grpo_cli.errors import UserError
from grpo_cli.recipe.data_section import DataSection
from grpo_cli.recipe.machine import DistributedSection
from grpo_cli.recipe.schema import GRPOSection
from grpo_cli.recipe.sources import looks_like_path, model_location
from grpo_cli.recipe.user_code import POLICY, RewardSpec
from grpo_cli.recipe.yaml_source import KeyPath

PLACEHOLDERS = ("question", "completion", "reference")
PLACEHOLDER = re.compile(r"\{(\w*)\}")
# Settings that only a reward model or a judge reads.
MODEL_OPTIONS = ("max_length", "batch_size", "dtype", "device", "chat_template")
CLASSIFIER = "ForSequenceClassification"
CAUSAL_LM = ("ForCausalLM", "LMHeadModel")

Problems = list[tuple[KeyPath, str]]


def reward_entry_problems(rewards: list[RewardSpec], data: DataSection, distributed: DistributedSection) -> Problems:
    """Rules of one entry that need no file: a function or a model, the settings each reads, the judge's prompt."""
    out: Problems = []
    for index, spec in enumerate(rewards):
        at = ("rewards", index)
        if not spec.is_model:
            given = [key for key in MODEL_OPTIONS if spec.given(key)]
            if given:
                out.append(
                    (
                        (*at, given[0]),
                        f"`{given[0]}` is a setting of a reward model or judge (`model:` or `judge:`), not of the "
                        f"reward function `{spec.name}`",
                    )
                )
            continue
        if spec.model is not None and spec.judge is not None:
            out.append((at, "give `model` (a reward model) or `judge` (an LLM judge), not both"))
        if spec.kwargs:
            out.append(((*at, "kwargs"), "a reward model or judge takes no kwargs"))
        if spec.model == POLICY:
            out.append(
                (
                    (*at, "model"),
                    "the policy is a causal LM, not a sequence classifier: ask it as a judge, "
                    "judge: {model: policy, prompt: '... {completion} ...', score: yes_no}",
                )
            )
        if spec.chat_template not in (None, "none") and template_problem(spec.chat_template):
            out.append(((*at, "chat_template"), f"{template_problem(spec.chat_template)}, or `none` for plain text"))
        if spec.judge is not None:
            out += _judge_problems(index, spec, data, distributed)
    return out + _shared_names(rewards)


def _shared_names(rewards: list[RewardSpec]) -> Problems:
    """TRL logs each reward under its name: a reward model or judge named like another reward would share its
    column."""
    names = [spec.name for spec in rewards]
    return [
        (
            ("rewards", index, "name"),
            f"another reward is named `{spec.name}`, and both would be logged as rewards/{spec.name}/mean; give "
            "this one a `name` of its own",
        )
        for index, spec in enumerate(rewards)
        if spec.name in names[:index] and (spec.is_model or rewards[names.index(spec.name)].is_model)
    ]


def _judge_problems(index: int, spec: RewardSpec, data: DataSection, distributed: DistributedSection) -> Problems:
    judge, at = spec.judge, ("rewards", index, "judge")
    out: Problems = []
    found = PLACEHOLDER.findall(judge.prompt)
    unknown = [name for name in found if name not in PLACEHOLDERS]
    if "completion" not in found:
        out.append(
            (
                (*at, "prompt"),
                "the judge's prompt has no {completion}, so the judge would never see the answer; put {completion} "
                "where the model's answer goes",
            )
        )
    if unknown:
        out.append(
            (
                (*at, "prompt"),
                f"unknown placeholder {{{unknown[0]}}} in the judge's prompt; it fills in {{question}}, {{completion}} "
                "and {reference} only",
            )
        )
    if "reference" in found and data.answer_column is None:
        out.append(((*at, "prompt"), "{reference} needs the data's reference answers; set data.answer_column"))
    if judge.model == POLICY:
        for key in ("dtype", "device", "chat_template"):
            if spec.given(key):
                out.append(
                    (
                        ("rewards", index, key),
                        f"the policy judges with the policy's own weights, tokenizer and device; remove `{key}`",
                    )
                )
        if distributed.num_processes > 1 and distributed.strategy in ("zero3", "fsdp"):
            out.append(
                (
                    (*at, "model"),
                    f"{distributed.strategy} shards the policy's weights, so it cannot judge in one forward "
                    "pass; use distributed.strategy ddp or zero2, or a judge model of its own",
                )
            )
    return out


def reward_model_problems(rewards: list[RewardSpec], data: DataSection, grpo: GRPOSection) -> Problems:
    """What the files say, offline: each model is found (folder, package file, or the Hugging Face cache), holds the
    kind of model its entry needs, and reads a whole prompt and completion (`data.max_prompt_length` and
    `grpo.max_completion_length` tokens)."""
    out: Problems = []
    for index, spec in enumerate(rewards):
        if spec.model is not None and spec.model != POLICY:
            name, key, classifier = spec.model, ("rewards", index, "model"), True
        elif spec.judge is not None and spec.judge.model != POLICY:
            name, key, classifier = spec.judge.model, ("rewards", index, "judge", "model"), False
        else:
            continue
        config, problem = read_config(name, classifier)
        if problem is None and config is not None:
            problem = _kind_problem(config, name, classifier)
        if problem is not None:
            out.append((key, problem))
            continue
        prompt, completion = data.max_prompt_length or 0, grpo.max_completion_length
        out += _context_problems(prompt, completion, index, spec, config or {}, key)
    return out


def read_config(name: str, classifier: bool) -> tuple[dict[str, Any] | None, str | None]:
    """(config.json, None), or (None, why it cannot be read here); (None, None) for a .gguf causal LM."""
    try:
        location = Path(model_location(name))
    except UserError as exc:
        return None, exc.problems[0].message
    if location.is_file() and location.suffix == ".gguf":
        return None, f"{name} is a .gguf causal LM, not a sequence classifier" if classifier else None
    if location.is_dir():
        config = location / "config.json"
        if not config.is_file():
            return None, f"{location} is a directory without config.json, so not a model directory"
        return _json(config)
    if location.exists() or looks_like_path(name):
        return None, f"no such model directory: {location} (relative paths start at {Path.cwd()})"
    return _hub_config(name)


def _hub_config(name: str) -> tuple[dict[str, Any] | None, str | None]:
    """A hub id: its config.json from the Hugging Face cache, or from the hub when it can be reached."""
    from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json")
    if isinstance(cached, str):
        return _json(Path(cached))
    if constants.HF_HUB_OFFLINE:
        return None, (
            f"`{name}` is not a local folder and not in the Hugging Face cache, and the hub is offline "
            f"(HF_HUB_OFFLINE): download it once (hf download {name}) or give its folder"
        )
    try:
        return _json(Path(hf_hub_download(name, "config.json")))
    except Exception as exc:  # not found, gated, or no network: all mean "cannot be used from here"
        return None, f"`{name}` cannot be found on the hub ({type(exc).__name__}); give a hub id or a local folder"


def _json(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"cannot read {path}: {exc}"
    return (config, None) if isinstance(config, dict) else (None, f"{path} is not a JSON object")


def _kind_problem(config: dict[str, Any], name: str, classifier: bool) -> str | None:
    """A reward model must hold a classification head with one output, a judge a causal LM (config's
    `architectures`; a config that names none cannot be told here)."""
    names = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if not names:
        return None
    is_classifier = any(a.endswith(CLASSIFIER) for a in names)
    is_causal = any(a.endswith(CAUSAL_LM) for a in names)
    if not (is_classifier or is_causal):
        return (
            f"{name} holds a {names[0]}: neither a sequence classifier (a reward model, `model:`) nor a causal LM "
            "(a judge, `judge: {model: ...}`)"
        )
    if classifier and not is_classifier:
        return (
            f"{name} holds a causal LM ({names[0]}), not a sequence classifier with a score head; ask it as a "
            "judge instead (judge: {model: ..., prompt: ..., score: yes_no})"
        )
    if not classifier and not is_causal:
        return f"{name} holds a sequence classifier ({names[0]}); give it as `model:` (a reward model), not a judge"
    labels = len(config.get("id2label") or {}) or config.get("num_labels")
    if classifier and isinstance(labels, int) and labels != 1:
        return f"{name} has {labels} outputs (id2label); a reward model has one score output"
    return None


def _context_problems(
    prompt: int, completion: int, index: int, spec: RewardSpec, config: dict[str, Any], key: KeyPath
) -> Problems:
    """A reward model or judge must read a whole prompt and completion (the recipe's limits, in the policy's
    tokens; `prompt` 0: no limit): the model's own positions, and `max_length` when given."""
    need = prompt + completion
    what = f"a prompt and its completion ({prompt} + {completion} tokens)" if prompt else f"{completion} tokens"
    out: Problems = []
    positions = config.get("max_position_embeddings") or (config.get("text_config") or {}).get(
        "max_position_embeddings"
    )
    name = spec.model or spec.judge.model
    if isinstance(positions, int) and positions < need:
        out.append(
            (
                key,
                f"{name} reads at most {positions} tokens (max_position_embeddings), fewer than {what}; shorten "
                "grpo.max_completion_length or data.max_prompt_length, or choose a model with a longer context",
            )
        )
    if spec.max_length is not None and spec.max_length < need:
        out.append(
            (
                ("rewards", index, "max_length"),
                f"{spec.max_length} tokens is fewer than {what}: the start would be cut; set at least {need}",
            )
        )
    return out


def unchecked_line(rewards: list[RewardSpec]) -> str | None:
    """What `grpo validate` cannot check without the weights, in one line (None: nothing of the kind)."""
    names = [f"`{spec.name}`" for spec in rewards if spec.is_model]
    if not names:
        return None
    return (
        f"# not checked without the weights: whether {', '.join(names)} can be loaded and scored (a reward model's "
        "one output, the tokenizer and its chat template, a judge's yes/no tokens); training checks this as it starts"
    )
