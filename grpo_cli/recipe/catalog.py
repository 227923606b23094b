"""The shipped recipes: inside the wheel after `pip install`, or the checkout's recipes/ folder."""

from __future__ import annotations

from pathlib import Path

from grpo_cli.errors import UserError

RENAMED_RECIPES = {"demo_warmup": "demo_sft"}  # old name -> new name, for commands written before the rename


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


def recipes_table():
    """`grpo recipes list`: each shipped recipe and the command it opens with."""
    from rich.table import Table

    table = Table("recipe", "how to run it", box=None, pad_edge=False)
    for name, path in shipped_recipes().items():
        table.add_row(name, first_comment(path))
    return table


def find_recipe(name: str) -> Path:
    recipes = shipped_recipes()
    key = name.removesuffix(".yaml")
    if key in recipes:
        return recipes[key]
    if key in RENAMED_RECIPES:
        raise UserError(f"the shipped recipe `{key}` is called `{RENAMED_RECIPES[key]}` now; use that name")
    raise UserError(f"no shipped recipe `{name}`; `grpo recipes list` shows them: {', '.join(recipes)}")


def copy_recipe(name: str, dest: Path, force: bool = False) -> Path:
    """Copy a shipped recipe to `dest` (a file, or an existing folder); never over a file without `force`."""
    import shutil

    from grpo_cli.files import check_writable_dir, check_writable_file

    source = find_recipe(name)
    target = dest / source.name if dest.is_dir() else dest
    check_writable_dir(target.parent)  # a missing folder is made
    if target.parent.exists():
        check_writable_file(target, force)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    except OSError as exc:
        raise UserError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target
