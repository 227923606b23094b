"""The folder listing is the architecture: few flat modules, small modules and functions, no import cycles, and
data flowing down (plan/ without torch or train/, rewards/ without grpo_cli)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "grpo_cli"
REWARDS = PACKAGE.parent / "rewards"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, prefix: str = "grpo_cli", top_level_only: bool = False) -> set[str]:
    """Modules under `prefix` imported in the file: anywhere (function-level imports count), or at module level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == prefix:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from grpo_cli.plan import gpus`
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == prefix)
    return found


def test_few_flat_modules_and_one_package_per_job():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= 10, flat
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert {"recipe", "train", "plan", "preflight", "eval"} <= packages


def test_no_module_over_300_lines_and_no_function_over_80():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 300
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
        climbs = {
            m
            for m in imports_of(path)
            if m.startswith(("grpo_cli.train", "grpo_cli.plan", "grpo_cli.eval", "grpo_cli.preflight", "grpo_cli.data"))
        }
        assert not climbs, (path.name, climbs)


def test_no_import_cycle():
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: {m for m in imports_of(path) if m in files and m != name} for name, path in files.items()}
    # A package's __init__ is imported on the way to its modules; it must not import them back.
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(nxt) :] + [node, nxt]))
            if nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


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
    assert drawn_paths(page) == {
        "grpo_cli/cli/root.py",
        "grpo_cli/cli/parts.py",
        "grpo_cli/errors.py",
        "grpo_cli/eval/command.py",
        "grpo_cli/eval/view.py",
        "grpo_cli/eval/lean_lora.py",
        "rewards/gsm8k.py",
        "rewards/answers.py",
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


# Package cycles that exist today; one that is gone fails the test below, so this list can only shrink.
# recipe/ -> tools/: recipe/tool_checks.py resolves the recipe's tool names with tools/registry.py;
# tools/ -> recipe/: tools/wiring.py takes the whole Recipe (it reads recipe.tools, .environment and .model.name).
KNOWN_PACKAGE_CYCLES = {frozenset({"recipe/", "tools/"})}


def _package(module: str) -> str:
    """The unit of grpo_cli a module belongs to: its first-level package (`train/`) or the flat module (`data.py`)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    return parts[1] + ("/" if (PACKAGE / parts[1]).is_dir() else ".py")


def package_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = {_package(m) for m in imports_of(path) if m in files and m != "grpo_cli"}
        graph.setdefault(_package(name), set()).update(targets - {_package(name)})
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The graph's cycles, each as the set of nodes that reach each other (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_package_loop():
    graph = {"recipe/": {"tools/", "errors.py"}, "tools/": {"recipe/"}, "train/": {"recipe/"}, "errors.py": set()}
    assert strongly_connected(graph) == [{"recipe/", "tools/"}]
    assert strongly_connected({"a/": {"b/"}, "b/": {"c/"}, "c/": set()}) == []


def test_no_import_cycle_between_packages():
    """The file-level check above cannot see two packages that import each other through different files; a
    package loop is a layering nobody can draw."""
    cycles = {frozenset(c) for c in strongly_connected(package_graph())}
    assert sorted(map(sorted, cycles - KNOWN_PACKAGE_CYCLES)) == [], "new package cycle"
    assert sorted(map(sorted, KNOWN_PACKAGE_CYCLES - cycles)) == [], "gone: take it off KNOWN_PACKAGE_CYCLES"
