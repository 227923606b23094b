"""Configuration slices: below grpo_cli/cli a function should receive the sections it reads, not the whole Recipe.

The functions that still take `recipe` are listed in tests/recipe_takers.txt, an allowlist that can only shrink
(issue 68 aims at 40 or fewer): a new function taking the whole recipe fails here, and one that stopped taking it
must leave the list, so the count in this file is always the true one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "grpo_cli"
ALLOWLIST = Path(__file__).with_name("recipe_takers.txt")


def recipe_takers() -> set[str]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if "cli" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                if any(a.arg == "recipe" for a in args):
                    found.add(f"{path.relative_to(PACKAGE).as_posix()}:{node.name}")
    return found


def allowed() -> set[str]:
    lines = ALLOWLIST.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_no_new_function_below_cli_takes_the_whole_recipe():
    new = sorted(recipe_takers() - allowed())
    assert not new, f"pass these the sections they read instead of `recipe` (or, reading 3+ sections, say why): {new}"


def test_the_allowlist_only_names_functions_that_still_take_the_recipe():
    gone = sorted(allowed() - recipe_takers())
    assert not gone, f"these no longer take `recipe`: remove them from {ALLOWLIST.name}: {gone}"


def test_at_most_forty_functions_take_the_whole_recipe():
    """Entry points and the few that read three or more sections or change the recipe (docs/layout.md)."""
    assert len(allowed()) <= 40, len(allowed())
