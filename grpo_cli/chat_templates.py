"""`model.chat_template`: a chat template for the tokenizer in place of its own, by the name of one TRL ships or from a
.jinja file. The use: a model whose own template renders no tools, such as SmolLM2-135M-Instruct, which speaks the
same ChatML as Qwen2.5; given TRL's `qwen2_5` template it renders tool calls the Qwen2.5 way, and TRL recognises the
template and reads the calls back with its Qwen2.5 parser (docs/tools.md). And the prompt as the model reads it, through
whichever template the tokenizer has."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from grpo_cli.errors import UserError

KEY = "model.chat_template"


def trl_templates() -> dict[str, Path]:
    """TRL's shipped templates by name (its `*_training` variants left out: TRL picks those itself), found without
    importing TRL."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return {}
    folder = Path(spec.submodule_search_locations[0]) / "chat_templates"
    return {p.stem: p for p in sorted(folder.glob("*.jinja")) if not p.stem.endswith("_training")}


def template_problem(choice: str) -> str | None:
    """Why `choice` names no template (None: it does)."""
    if choice.endswith(".jinja"):
        path = Path(choice).expanduser()
        found = path.is_file()
        return None if found else f"chat template file not found: {path} (relative paths start at {Path.cwd()})"
    names = trl_templates()
    if choice in names:
        return None
    return f"TRL ships no chat template `{choice}`; use one of: {', '.join(names) or 'none found'}, or a .jinja file"


def template_text(choice: str) -> str:
    problem = template_problem(choice)
    if problem:
        raise UserError(problem, path=KEY)
    path = Path(choice).expanduser() if choice.endswith(".jinja") else trl_templates()[choice]
    return path.read_text(encoding="utf-8")


def apply_choice(tokenizer, choice: str | None):
    """The tokenizer with the recipe's chat template in place of its own (unchanged when the recipe names none)."""
    if choice:
        tokenizer.chat_template = template_text(choice)
    return tokenizer


TEXT_TOKENS_KEY = "model.text_tokens"


def write_as_text(tokenizer, names: list[str]):
    """The tokenizer with each named added token written as the ordinary text pieces it spells.

    Why: a model never trained on a template's markers (Qwen2.5-Coder-0.5B-Instruct's `<tool_call>`, whose embedding
    and output rows are untrained and identical to `</tool_call>`'s) cannot learn to write them through an adapter,
    but it writes `<`, `tool`, `_call`, `>` like any other text. The chat template and TRL's parser read the same
    string either way; only the token ids change. Rows of the removed ids stay in the model, unused."""
    if not names:
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UserError(
            f"{type(tokenizer).__name__} is not a fast tokenizer, so its added tokens cannot be written as text; "
            "remove text_tokens",
            path=TEXT_TOKENS_KEY,
        )
    from tokenizers import Tokenizer

    state = json.loads(backend.to_str())
    added = [entry["content"] for entry in state.get("added_tokens", [])]
    unknown = [name for name in names if name not in added]
    if unknown:
        plain = [a for a in added if not a.startswith("<|")][:12]
        raise UserError(
            f"{', '.join(unknown)} is not an added token of this tokenizer; its added tokens include: "
            f"{', '.join(plain) or 'none'}",
            path=TEXT_TOKENS_KEY,
        )
    state["added_tokens"] = [entry for entry in state["added_tokens"] if entry["content"] not in names]
    # The fast tokenizer's backend is swapped in place, so the class, template and special tokens stay as loaded.
    tokenizer._tokenizer = Tokenizer.from_str(json.dumps(state))
    return tokenizer


def adapt(tokenizer, model):
    """The tokenizer as the recipe's model section asks: its chat template, and the tokens it writes as text."""
    apply_choice(tokenizer, model.chat_template)
    return write_as_text(tokenizer, model.text_tokens)


def render_prompt(tokenizer, prompt: Any, tools: list | None = None) -> str:
    """The text the model reads: chat messages through the tokenizer's chat template (with the generation prompt and
    the descriptions of the `tools` it may call), plain text as it is. Training (TRL), preflight sampling and
    evaluation all see the same string."""
    if isinstance(prompt, list):
        return tokenizer.apply_chat_template(prompt, tools=tools or None, add_generation_prompt=True, tokenize=False)
    return prompt


def prompt_lengths(tokenizer, prompts: list, tools: list | None = None) -> list[int]:
    """Tokens the model will see for each prompt (with the chat template, tools and generation prompt), tokenized in
    one batch (thousands of prompts in about a second)."""
    texts = [render_prompt(tokenizer, p, tools) for p in prompts]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []
