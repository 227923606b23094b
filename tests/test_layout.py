"""The folder listing is the architecture: few flat modules, small modules and functions, no import cycles, and
data flowing down (plan/ without torch or train/, rewards/ without grpo_cli)."""

from __future__ import annotations

import ast
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


def test_every_module_is_named_in_docs_layout():
    """docs/layout.md is the map of the code: a module missing from it is a module nobody can find."""
    page = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    modules = [*PACKAGE.rglob("*.py"), *REWARDS.glob("*.py")]
    unnamed = [
        str(p.relative_to(PACKAGE.parent))
        for p in modules
        if p.name not in ("__init__.py", "__main__.py") and f"{p.stem}.py" not in page
    ]
    assert not unnamed, unnamed
