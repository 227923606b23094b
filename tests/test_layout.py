"""The folder listing is the architecture: few flat modules, small modules and functions, no import cycles, and
data flowing down (plan/ without torch or train/, rewards/ without grpo_cli)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "grpo_cli"
REWARDS = PACKAGE.parent / "rewards"


def module_name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module an import names, a relative one resolved from the importing module's package: in a.b.c,
    `from . import x` names a.b, `from .d import y` a.b.d, `from ..e import z` a.e."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path, prefix: str = "grpo_cli", top_level_only: bool = False, root: Path = PACKAGE.parent):
    """Modules under `prefix` imported in the file (below `root`, the folder holding grpo_cli/ and rewards/):
    anywhere (function-level imports count), or at module level; a relative import counts as the module it names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module, is_package = module_name(path, root), path.name == "__init__.py"
    found = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _absolute(node, module, is_package)
            if target.split(".")[0] == prefix:
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)  # `from grpo_cli.plan import gpus`
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == prefix)
    return found


def test_few_flat_modules_and_one_package_per_job():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= 10, flat
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert {"recipe", "train", "plan", "preflight", "eval"} <= packages


def test_no_module_over_280_lines_and_no_function_over_80():
    """A module that reaches the cap is split by idea, not squeezed under it."""
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 280
    }
    assert not long, long
    functions = {
        f"{p.relative_to(PACKAGE)}:{node.name}": node.end_lineno - node.lineno + 1
        for p in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    assert not {name: n for name, n in functions.items() if n > 80}


def test_plan_needs_neither_torch_nor_training():
    """`grpo plan` runs before any weight exists: nothing in plan/ imports train/ or preflight/, nor torch at
    module level."""
    for path in (PACKAGE / "plan").glob("*.py"):
        climbs = {m for m in imports_of(path) if m.startswith(("grpo_cli.train", "grpo_cli.preflight"))}
        assert not climbs, (path.name, climbs)
        for heavy in ("torch", "transformers", "trl"):
            assert not imports_of(path, heavy, top_level_only=True), (path.name, heavy)


def test_rewards_depend_on_nothing_in_grpo_cli():
    """rewards/ is below grpo_cli: grpo_cli imports it, never the other way round."""
    for path in REWARDS.glob("*.py"):
        assert not imports_of(path), path.name


def test_recipe_is_the_bottom_layer():
    """The recipe package reads YAML and checks it; it never reaches up into the commands' packages."""
    for path in (PACKAGE / "recipe").glob("*.py"):
        above = ("grpo_cli.train", "grpo_cli.plan", "grpo_cli.eval", "grpo_cli.preflight", "grpo_cli.data")
        climbs = {m for m in imports_of(path) if m.startswith(above)}
        assert not climbs, (path.name, climbs)


def _crosses(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_train_and_eval_meet_only_in_runs():
    """Training writes the run directory and evaluation reads it, through runs/ and never through each other: eval/
    imports nothing from train/, train/ nothing from eval/, and runs/ neither (nor preflight/, which sits above)."""
    rules = {
        "eval": ("grpo_cli.train",),
        "train": ("grpo_cli.eval",),
        "runs": ("grpo_cli.train", "grpo_cli.eval", "grpo_cli.preflight"),
    }
    for package, banned in rules.items():
        for path in (PACKAGE / package).glob("*.py"):
            crossing = {m for m in imports_of(path) if _crosses(m, banned)}
            assert not crossing, (f"{package}/{path.name}", crossing)


def test_run_and_evaluation_file_names_are_defined_once():
    """A file name that runs and evaluations share is spelled only in runs/layout.py; every reader imports it."""
    from grpo_cli.runs import layout

    names = {v for k, v in vars(layout).items() if k.endswith("_FILE")}
    assert {"metrics.jsonl", "summary.json", "comparison.json", "predictions.jsonl", "recipe.yaml"} <= names
    spelled = set()
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "runs" / "layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                spelled |= {
                    (str(path.relative_to(PACKAGE)), name)
                    for name in names
                    if node.value == name or node.value.endswith("/" + name)
                }
    assert not spelled, sorted(spelled)


ENTRY = re.compile(r"^( {0,6})([\w.]+/|[\w.]+\.py)(?: +|$)")
MODULE = re.compile(r"(?<![\w/.])(\w+\.py)\b")


def _outside_parentheses(text: str) -> str:
    """The text with every parenthesised part dropped (nested ones too): an entry's notes name other modules."""
    kept, depth = [], 0
    for char in text:
        depth += char == "("
        if depth == 0:
            kept.append(char)
        depth -= char == ")" and depth > 0
    return "".join(kept)


def drawn_paths(page: str) -> set[str]:
    """The modules docs/layout.md draws, as repository paths: a folder line (`  train/ ...`, by its indent) opens a
    folder, the `name.py` words of its text outside parentheses are its modules, and a `name.py` line is one
    module. Notes in parentheses (`built here, handed to train/ by cli/recipe_commands.py`) name nothing."""
    drawing = page.split("```\n", 2)[1]
    paths: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indent, folder path) of the open folders, outermost first
    entries: list[tuple[str, str]] = []  # (folder path, text) for each folder entry with its continuation lines
    for line in drawing.splitlines():
        entry = ENTRY.match(line)
        if entry is None:
            if entries:
                entries[-1] = (entries[-1][0], entries[-1][1] + " " + line.strip())
            continue
        indent, name = len(entry.group(1)), entry.group(2)
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        if name.endswith("/"):
            folders.append((indent, parent + name))
            entries.append((parent + name, line[entry.end() :]))
        else:
            paths.add(parent + name)
            entries.append(("", ""))  # a module's own text names no modules
    for folder, text in entries:
        paths |= {folder + name for name in MODULE.findall(_outside_parentheses(text))} if folder else set()
    return paths


def test_the_layout_drawing_is_read_as_paths():
    page = """```
grpo_cli/
  cli/            root.py (the app), parts.py (where a mistake
                  becomes one line (and an exit code), not eval.py)
  errors.py       the exceptions (not cli.py)
  eval/           command.py, view.py (built by cli/recipe_commands.py,
                  handed to train/), lean_lora.py
rewards/          gsm8k.py, answers.py
```"""
    assert drawn_paths(page) == {"grpo_cli/errors.py", "rewards/gsm8k.py", "rewards/answers.py"} | {
        f"grpo_cli/{m}.py" for m in ("cli/root", "cli/parts", "eval/command", "eval/view", "eval/lean_lora")
    }


def test_docs_layout_draws_every_module_at_its_path_and_nothing_else():
    """docs/layout.md is the map of the code: a module missing from it is a module nobody can find, and a drawn path
    that is not there sends the reader to nothing."""
    drawn = drawn_paths((PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8"))
    modules = {
        p.relative_to(PACKAGE.parent).as_posix()
        for p in [*PACKAGE.rglob("*.py"), *REWARDS.rglob("*.py")]
        if p.name not in ("__init__.py", "__main__.py")
    }
    assert sorted(modules - drawn) == [], "not drawn in docs/layout.md"
    assert sorted(drawn - modules) == [], "drawn in docs/layout.md, not in the code"


def test_the_text_around_the_drawing_names_only_paths_that_exist():
    """A `name.py` or `folder/` quoted in the page's prose is a file or folder of the package, or of the repository."""
    page = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    before, _, after = page.split("```\n", 2)
    prose = before + after.split("```", 1)[-1]
    quoted = set(re.findall(r"`([\w./]+(?:\.py|/))`", prose))
    assert quoted
    missing = sorted(q for q in quoted if not any((base / q).exists() for base in (PACKAGE, PACKAGE.parent)))
    assert not missing, missing


# Package cycles that exist today; one that is gone fails the test below, so this list can only shrink. (The last,
# recipe/ <-> tools/, went when tools/ took its entries through protocols of its own, tools/registry.py.)
KNOWN_PACKAGE_CYCLES: set[frozenset[str]] = set()


def _package(module: str, package: Path = PACKAGE) -> str:
    """The unit of grpo_cli a module belongs to: its first-level package (`train/`) or the flat module (`data.py`)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    return parts[1] + ("/" if (package / parts[1]).is_dir() else ".py")


def package_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, targets in module_graph(package).items():
        units = {_package(m, package) for m in targets if m != package.name}
        graph.setdefault(_package(name, package), set()).update(units - {_package(name, package)})
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        fresh = set(graph.get(todo.pop(), ())) - seen
        seen |= fresh
        todo.extend(fresh)
    return seen


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The graph's cycles, each as the set of nodes that reach each other, in the order of their first node."""
    reach = {node: _reachable(graph, node) for node in graph}
    found: list[set[str]] = []
    for node in sorted(graph):
        component = {other for other in reach[node] if node in reach.get(other, ())}
        if len(component) > 1 and component not in found:
            found.append(component)
    return found


def test_no_import_cycle_between_packages():
    """The file-level check (test_no_import_cycle) cannot see two packages that import each other through different
    files; a package loop is a layering nobody can draw."""
    cycles = {frozenset(c) for c in strongly_connected(package_graph())}
    assert sorted(map(sorted, cycles - KNOWN_PACKAGE_CYCLES)) == [], "new package cycle"
    assert sorted(map(sorted, KNOWN_PACKAGE_CYCLES - cycles)) == [], "gone: take it off KNOWN_PACKAGE_CYCLES"


def module_graph(package: Path) -> dict[str, set[str]]:
    """Each module of the package (a grpo_cli/ folder) and the package's modules it imports."""
    files = {module_name(p, package.parent): p for p in package.rglob("*.py")}
    imported = {name: imports_of(path, package.name, root=package.parent) for name, path in files.items()}
    return {name: {m for m in found if m in files and m != name} for name, found in imported.items()}


def test_no_import_cycle():
    # A package's __init__ is imported on the way to its modules; it must not import them back.
    cycles = strongly_connected(module_graph(PACKAGE))
    assert cycles == [], f"import cycles: {cycles}"


RELATIVE_LOOP = """
one/__init__.py
one/a.py          from . import b
one/b.py          from .c import g
one/c.py          from ..two import d
two/__init__.py
two/d.py          from ..one.a import x
"""


def test_the_cycle_checks_read_relative_imports(tmp_path):
    """`from . import x`, `from .x import y` and `from ..pkg import z` are imports like the absolute ones: a package
    whose modules import each other only by relative imports (RELATIVE_LOOP) has a loop through one/ and two/."""
    for line in RELATIVE_LOOP.strip().splitlines():
        name, _, source = line.partition(" ")
        (tmp_path / "grpo_cli" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "grpo_cli" / name).write_text(source.strip() + "\n", encoding="utf-8")
    graph = module_graph(tmp_path / "grpo_cli")
    assert graph["grpo_cli.one.a"] == {"grpo_cli.one", "grpo_cli.one.b"}
    assert strongly_connected(graph) == [{f"grpo_cli.{m}" for m in ("one.a", "one.b", "one.c", "two.d")}]
    assert strongly_connected(package_graph(tmp_path / "grpo_cli")) == [{"one/", "two/"}]
    assert strongly_connected({"a/": {"b/"}, "b/": {"c/"}, "c/": set()}) == []


# What builds an evaluation: its problems, few-shot pool, prompts, scorer and verdicts (eval/problems.py, task.py,
# scoring.py). eval/suite.py alone calls them; grpo eval, validation while training and preflight go through a suite.
EVALUATION_BUILDERS = {
    "grpo_cli.eval.problems": {"load_problems", "fewshot_pool", "lm_eval_prompts", "chat_prompts"},
    "grpo_cli.eval.task": {"task_problems", "load_task_problems", "TaskScorer"},
    "grpo_cli.eval.scoring": {"score"},
}
SUITE = "eval/suite.py"
WHOLE = {f"{module} (whole module)" for module in EVALUATION_BUILDERS}


def evaluation_builders_imported(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in EVALUATION_BUILDERS:
            found |= {alias.name for alias in node.names} & EVALUATION_BUILDERS[node.module]
        elif isinstance(node, ast.ImportFrom):  # `from grpo_cli.eval import task`: the module whole hides its builders
            found |= {f"{node.module}.{a.name} (whole module)" for a in node.names} & WHOLE
        elif isinstance(node, ast.Import):
            found |= {f"{a.name} (whole module)" for a in node.names} & WHOLE
    return found


def test_only_the_evaluation_suite_builds_problems_prompts_and_verdicts():
    builders = {module.removeprefix("grpo_cli.").replace(".", "/") + ".py" for module in EVALUATION_BUILDERS}
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        name = str(path.relative_to(PACKAGE))
        if name == SUITE or name in builders:
            continue
        found = evaluation_builders_imported(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            offenders[name] = sorted(found)
    assert not offenders, f"build evaluations through eval/suite.py (build_suite, EvalSuite): {offenders}"


def test_the_suite_guard_catches_a_builder_imported_elsewhere():
    direct = ast.parse("from grpo_cli.eval.problems import Problem, chat_prompts\n")
    whole = ast.parse("from grpo_cli.eval import task\n")
    aliased = ast.parse("import grpo_cli.eval.scoring as s\n")
    assert evaluation_builders_imported(direct) == {"chat_prompts"}
    assert evaluation_builders_imported(whole) == {"grpo_cli.eval.task (whole module)"}
    assert evaluation_builders_imported(aliased) == {"grpo_cli.eval.scoring (whole module)"}
    assert not evaluation_builders_imported(ast.parse("from grpo_cli.eval.problems import Problem\n"))
