"""`model.chat_template`: a chat template for the tokenizer in place of its own, by the name of one TRL ships or from a
.jinja file. The use: a model whose own template renders no tools, such as SmolLM2-135M-Instruct, which speaks the
same ChatML as Qwen2.5; given TRL's `qwen2_5` template it renders tool calls the Qwen2.5 way, and TRL recognises the
template and reads the calls back with its Qwen2.5 parser (docs/tools.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
