"""The shipped recipes: inside the wheel after `pip install`, or the checkout's recipes/ folder."""

from __future__ import annotations

from pathlib import Path

from grpo_cli.errors import UserError


def recipes_root() -> Path:
    package = Path(__file__).resolve().parent.parent  # grpo_cli/
    packaged = package / "recipes"  # where the wheel puts them
    return packaged if packaged.is_dir() else package.parent / "recipes"


def shipped_recipes() -> dict[str, Path]:
    """`qwen2.5/0.5b_lora` -> path, for every YAML under the recipes folder."""
    root = recipes_root()
    return {str(p.relative_to(root).with_suffix("")): p for p in sorted(root.rglob("*.yaml"))}


def first_comment(path: Path) -> str:
    """The command line each recipe opens with, shown by `grpo recipes list`."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def find_recipe(name: str) -> Path:
    recipes = shipped_recipes()
    key = name.removesuffix(".yaml")
    if key in recipes:
        return recipes[key]
    raise UserError(f"no shipped recipe `{name}`; `grpo recipes list` shows them: {', '.join(recipes)}")
