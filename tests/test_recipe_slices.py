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


def _names_recipe(annotation: ast.expr | None, aliases: set[str]) -> bool:
    """The annotation mentions the Recipe class anywhere: `Recipe`, `schema.Recipe`, `"Recipe"`, `Recipe | None`,
    `Optional[Recipe]`, or a name the file imported Recipe as."""
    for node in ast.walk(annotation) if annotation is not None else ():
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation: read its text
            try:
                if _names_recipe(ast.parse(node.value, mode="eval").body, aliases):
                    return True
            except SyntaxError:
                continue
        elif (isinstance(node, ast.Name) and node.id in aliases) or (
            isinstance(node, ast.Attribute) and node.attr == "Recipe"
        ):
            return True
    return False


def recipe_takers_in(source: str) -> set[str]:
    """Names of the functions in the source with a parameter that takes the whole Recipe: one annotated with it,
    whatever its name (`cfg: Recipe`, `*recipes: Recipe`, keyword-only too), or an unannotated one named `recipe`."""
    tree = ast.parse(source)
    aliases = {"Recipe"} | {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name == "Recipe" and alias.asname
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
            if any(_names_recipe(p.annotation, aliases) or p.arg == "recipe" for p in params):
                found.add(node.name)
    return found


def recipe_takers() -> set[str]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if "cli" in path.relative_to(PACKAGE).parts:
            continue
        relative = path.relative_to(PACKAGE).as_posix()
        found |= {f"{relative}:{name}" for name in recipe_takers_in(path.read_text(encoding="utf-8"))}
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


def test_a_recipe_parameter_is_found_by_its_annotation_whatever_its_name():
    planted = (
        "from grpo_cli.recipe import schema\n"
        "from grpo_cli.recipe.schema import Recipe as R\n"
        "def a(cfg: Recipe): ...\n"
        "def b(r: 'Recipe'): ...\n"
        "def c(x: Recipe | None = None): ...\n"
        "def d(*, conf: Optional[Recipe]): ...\n"
        "def e(*recipes: Recipe): ...\n"
        "def f(**by_name: 'dict[str, Recipe]'): ...\n"
        "def g(s: schema.Recipe): ...\n"
        "def h(s: R): ...\n"
        "async def i(self, recipe): ...\n"
        "def sliced(model: ModelSection, training: 'TrainingSection', runner: RecipeTrainer): ...\n"
    )
    assert recipe_takers_in(planted) == set("abcdefghi")
