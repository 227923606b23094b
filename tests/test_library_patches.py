"""TRL and vLLM are changed in two places only: the trainer class overrides TRL's seams, and the seams file holds and
sets the private names grpo relies on. No other module assigns to, deletes from or `setattr`s on a trl/vllm module,
one of their classes or functions, or a trainer (a trainer class, or an instance however it is named): a replacement
made from elsewhere makes the order of such patches a contract nobody can read.

The check reads the code (AST), per scope. Library objects: names bound by `import trl...`, `from vllm... import X`
or `importlib.import_module("trl...")` (or a constant naming one, in this module or another of grpo's), attribute
chains of them, and a module imported by a name known only at run time. Trainers: a name or attribute ending in
`trainer`, a `*Trainer` class, what a `*trainer(...)` call returns, a parameter annotated with a `*Trainer` class.
Assigning one of a trainer's method names to any object but `self` counts too, whatever the object is called. So do
a write to `sys.modules` (it decides what every later `import` returns, TRL's and vLLM's included), a library reached
through it (`sys.modules["trl"].X = f`), and any use of `unittest.mock.patch` (`mock.patch`, `patch.object`, ...).
"""

from __future__ import annotations

import ast
import functools
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("trl", "vllm")

TRAINER_CLASS = "grpo_cli/train/recipe_trainer.py"  # the one GRPOTrainer subclass: each TRL seam overridden once
# The seams file: every private TRL and vLLM name grpo relies on, checked at start-up, and the few it sets (the LM
# head's tile width, vLLM's CPU LoRA functions, the engine's start options).
SEAMS_FILE = "grpo_cli/libraries/seams.py"
ALLOWED_FILES = (TRAINER_CLASS, SEAMS_FILE)  # each must exist: an exemption for a file that is gone exempts nothing

# Changes made outside the allowed files today, (file, what the check names): one that is gone fails the test, so
# this list only shrinks.
KNOWN_PATCHES = {
    # Marks bitsandbytes absent so that peft, transformers and TRL import without it (its module docstring says why).
    ("grpo_cli/process/optional_libraries.py", "sys.modules['bitsandbytes']"),
    # Registers (and on a failed import removes) the user's reward file under its own grpo_user_rewards_* name.
    ("rewards/registry.py", "sys.modules[module_name]"),
}
MOCK_PATCHES = {"unittest.mock.patch" + kind for kind in ("", ".object", ".dict", ".multiple")}


@functools.cache
def trainer_methods() -> frozenset[str]:
    """Method names of TRL's trainers (and transformers' Trainer below them), the dunder ones aside."""
    from trl import GRPOTrainer, SFTTrainer

    return frozenset(
        name
        for cls in (GRPOTrainer, SFTTrainer)
        for name in dir(cls)
        if not name.startswith("__") and callable(getattr(cls, name, None))
    )


def _library_path(text: object) -> bool:
    return isinstance(text, str) and (text in LIBRARIES or text.startswith(tuple(f"{lib}." for lib in LIBRARIES)))


def _trainerish(name: str) -> bool:
    return name.lower().endswith("trainer")


def _terminal(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        return node.value.rsplit(".", 1)[-1]
    return None


def _own_nodes(scope: ast.AST):
    """The nodes of one scope, nested functions and classes left to their own scope."""
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield child
        yield from _own_nodes(child)


def _nested_scopes(scope: ast.AST):
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
        else:
            yield from _nested_scopes(child)


class _Scope:
    """Names bound in one scope to a library object ("lib", its dotted path) or to a trainer ("trainer", as written);
    the string constants in reach (a module named by one may be a library's), and grpo's own modules imported, whose
    module-level string constants `constants` holds (module name -> {name: value})."""

    def __init__(self, node: ast.AST, outer: _Scope | None, constants: dict[str, dict[str, str]]):
        self.node = node
        self.outer = outer
        self.constants = constants
        self.bound: dict[str, tuple[str, str]] = dict(outer.bound) if outer else {}
        self.strings: dict[str, str] = dict(outer.strings) if outer else {}
        self.modules: dict[str, str] = dict(outer.modules) if outer else {}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                for names in (self.bound, self.strings, self.modules):
                    names.pop(arg.arg, None)
                if arg.annotation is not None and _trainerish(_terminal(arg.annotation) or ""):
                    self.bound[arg.arg] = ("trainer", arg.arg)
        own = list(_own_nodes(node))
        for _ in range(3):  # chains of bindings: a = trl.x; b = a.y
            for child in own:
                self._bind(child)

    def describe(self, node: ast.expr) -> tuple[str, str] | None:
        """("lib", dotted path) or ("trainer", text) for an expression that denotes one, else None."""
        if isinstance(node, ast.Name):
            if node.id in self.bound:
                return self.bound[node.id]
            return ("trainer", node.id) if _trainerish(node.id) else None
        if isinstance(node, ast.Attribute):
            base = self.describe(node.value)
            if base is not None:
                return base[0], f"{base[1]}.{node.attr}"
            return ("trainer", ast.unparse(node)) if _trainerish(node.attr) else None
        key = _table_entry(node)
        if key is not None:  # sys.modules["trl"], sys.modules.get(name)
            module = self.string(key)
            if module is None:
                return ("lib", f"<the module {ast.unparse(key)} names>")
            return ("lib", module) if _library_path(module) else None
        if isinstance(node, ast.Call):
            if _terminal(node.func) in ("import_module", "__import__") and node.args:
                module = self.string(node.args[0])
                if module is None:  # named at run time: it may be a library's
                    return ("lib", f"<the module {ast.unparse(node.args[0])} names>")
                return ("lib", module) if _library_path(module) else None
            if _trainerish(_terminal(node.func) or ""):  # RecipeTrainer(...), build_trainer(...)
                return ("trainer", f"{ast.unparse(node.func)}(...)")
        return None

    def string(self, node: ast.expr) -> str | None:
        """The string an expression holds where the code says it: a literal, a constant, another module's constant."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return self.strings.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.modules:
            return self.constants.get(self.modules[node.value.id], {}).get(node.attr)
        return None

    def mock_patch(self, node: ast.AST) -> str | None:
        """`unittest.mock.patch(target, ...)` (or patch.object, .dict, .multiple) as the call names it, else None:
        `mock` and `patch` resolved through this scope's imports, the third-party `mock` read as unittest.mock."""
        if not isinstance(node, ast.Call):
            return None
        chain, root = [], node.func
        while isinstance(root, ast.Attribute):
            chain.insert(0, root.attr)
            root = root.value
        if not isinstance(root, ast.Name):
            return None
        dotted = ".".join([self.modules.get(root.id, root.id), *chain])
        dotted = "unittest." + dotted if dotted.split(".")[0] == "mock" else dotted
        if dotted not in MOCK_PATCHES:
            return None
        shown = node.args[: 2 if dotted.endswith(".object") else 1]  # the target: patch.object's is two arguments
        return f"{dotted}({', '.join(ast.unparse(arg) for arg in shown)})"

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _library_path(alias.name):
                    name = alias.asname or alias.name.split(".")[0]
                    self.bound[name] = ("lib", alias.name if alias.asname else name)
                elif alias.asname:
                    self.modules[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                name = alias.asname or alias.name
                if _library_path(node.module):
                    self.bound[name] = ("lib", f"{node.module}.{alias.name}")
                elif alias.name in self.constants.get(node.module, {}):
                    self.strings[name] = self.constants[node.module][alias.name]
                else:
                    self.modules[name] = f"{node.module}.{alias.name}"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name, value in _pairs(target, node.value):
                    described, text = self.describe(value), self.string(value)
                    if described is not None:
                        self.bound[name] = described
                    elif text is not None:
                        self.strings[name] = text
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                described = self.describe(item.context_expr)
                if described is not None and item.optional_vars is not None:
                    for name in _names(item.optional_vars):
                        self.bound[name] = described


def _pairs(target: ast.expr, value: ast.expr) -> list[tuple[str, ast.expr]]:
    """(name, the expression it takes) for `a = x` and `a, b = x, y`; every name of `a, b = f()` takes `f()`."""
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
        if len(target.elts) == len(value.elts):
            return [pair for t, v in zip(target.elts, value.elts, strict=True) for pair in _pairs(t, v)]
    return [(name, value) for name in _names(target)]


def module_constants(root: Path) -> dict[str, dict[str, str]]:
    """Module-level string constants of every module under root/grpo_cli, by module name."""
    constants: dict[str, dict[str, str]] = {}
    for path in (root / "grpo_cli").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        scope = _Scope(ast.parse(path.read_text(encoding="utf-8")), None, {})
        constants[module] = scope.strings
    return constants


def _module_table(node: ast.expr) -> bool:
    """`sys.modules` as spelled: the one way grpo's code reaches it."""
    return ast.unparse(node) == "sys.modules"


def _table_entry(node: ast.expr) -> ast.expr | None:
    """The key of `sys.modules[key]` or `sys.modules.get(key)`, else None."""
    if isinstance(node, ast.Subscript) and _module_table(node.value):
        return node.slice
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        return node.args[0] if _module_table(node.func.value) else None
    return None


def _table_writes(node: ast.AST):
    """The key of each entry of sys.modules the node sets or deletes; None where the call names no one key."""
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            for element in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if isinstance(element, ast.Subscript) and _module_table(element.value):
                    yield element.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _module_table(node.func.value):
        if node.func.attr in ("__setitem__", "__delitem__", "setdefault", "pop") and node.args:
            yield node.args[0]
        elif node.func.attr in ("update", "clear", "popitem"):
            yield None


def _names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _names(element)]
    return []


def _assigned_attributes(node: ast.AST):
    """(object, attribute name or None) for each attribute the node assigns, deletes or sets by setattr."""
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        stack = list(targets)
        while stack:
            target = stack.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                stack.extend(target.elts)
            elif isinstance(target, ast.Attribute):
                yield target.value, target.attr
            elif isinstance(target, ast.Subscript):  # vars(module)[name] = f, module.__dict__[name] = f
                holder = target.value
                if isinstance(holder, ast.Call) and _terminal(holder.func) == "vars" and holder.args:
                    yield holder.args[0], None
                elif isinstance(holder, ast.Attribute) and holder.attr == "__dict__":
                    yield holder.value, None
    elif isinstance(node, ast.Call):
        name = _terminal(node.func)
        if name in ("setattr", "delattr", "__setattr__", "__delattr__") and len(node.args) >= 2:
            attribute = node.args[1]
            constant = attribute.value if isinstance(attribute, ast.Constant) else None
            yield node.args[0], constant if isinstance(constant, str) else None
        elif name == "update" and isinstance(node.func, ast.Attribute):  # vars(module).update(...)
            holder = node.func.value
            if isinstance(holder, ast.Call) and _terminal(holder.func) == "vars" and holder.args:
                yield holder.args[0], None
            elif isinstance(holder, ast.Attribute) and holder.attr == "__dict__":
                yield holder.value, None


def patches(source: str, constants: dict[str, dict[str, str]] | None = None) -> list[tuple[int, str]]:
    """(line, what) for every change the source makes to TRL, vLLM or a trainer; `constants` resolves module names
    held in other modules' constants (module_constants)."""
    found: list[tuple[int, str]] = []

    def visit(scope: _Scope) -> None:
        for node in _own_nodes(scope.node):
            for key in _table_writes(node):  # None: update(), clear() and popitem() name no one entry
                module = scope.string(key) if key is not None else None
                shown = repr(module) if module else ("<computed>" if key is None else ast.unparse(key))
                found.append((node.lineno, f"sys.modules[{shown}]"))
            if (mocked := scope.mock_patch(node)) is not None:
                found.append((node.lineno, mocked))
            for holder, attribute in _assigned_attributes(node):
                shown = attribute or "<computed>"
                described = scope.describe(holder)
                if described is not None:
                    found.append((node.lineno, f"{described[1]}.{shown}"))
                elif attribute in trainer_methods() and not (
                    isinstance(holder, ast.Name) and holder.id in ("self", "cls")
                ):
                    found.append((node.lineno, f"{ast.unparse(holder)}.{shown} (a trainer method's name)"))
        # A class body's names are not seen by its methods: they start from the scope around the class.
        around = scope.outer if isinstance(scope.node, ast.ClassDef) else scope
        for nested in _nested_scopes(scope.node):
            visit(_Scope(nested, around, constants or {}))

    visit(_Scope(ast.parse(source), None, constants or {}))
    return sorted(found)


def scan(root: Path) -> dict[tuple[str, str], list[int]]:
    """Every patch in the package and rewards/ under `root`, outside the allowed files: (file, what) -> lines."""
    found: dict[tuple[str, str], list[int]] = {}
    constants = module_constants(root)
    for path in sorted([*(root / "grpo_cli").rglob("*.py"), *(root / "rewards").glob("*.py")]):
        relative = path.relative_to(root).as_posix()
        if relative in ALLOWED_FILES:
            continue
        for line, what in patches(path.read_text(encoding="utf-8"), constants):
            found.setdefault((relative, what), []).append(line)
    return found


def test_only_the_trainer_class_and_the_seams_file_change_trl_vllm_or_a_trainer():
    assert [name for name in ALLOWED_FILES if not (ROOT / name).is_file()] == [], "exempted, and not there"
    found = scan(ROOT)
    new = [f"{path}:{lines[0]}: {what}" for (path, what), lines in found.items() if (path, what) not in KNOWN_PATCHES]
    assert not new, new
    assert sorted(KNOWN_PATCHES - set(found)) == [], "gone: take it off KNOWN_PATCHES"


# Each snippet changes TRL, vLLM or a trainer: the check names what it changes.
PLANTED = {
    "a TRL module's global": (
        "import trl.trainer.grpo_trainer\ntrl.trainer.grpo_trainer.X = f\n",
        "trl.trainer.grpo_trainer.X",
    ),
    "a TRL module imported under another name": (
        "import trl.trainer.utils as u\nu._CHUNKED_LOGPROB_CHUNK_SIZE = 1\n",
        "trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE",
    ),
    "setattr on a TRL class": (
        'from trl import GRPOTrainer\nsetattr(GRPOTrainer, "training_step", f)\n',
        "trl.GRPOTrainer.training_step",
    ),
    "del on a TRL class": (
        "from trl import GRPOTrainer\ndel GRPOTrainer._calculate_rewards\n",
        "trl.GRPOTrainer._calculate_rewards",
    ),
    "setattr on a built trainer held under another name": (
        "from grpo_cli.train.trainer import build_trainer\n"
        "def run(recipe, f):\n    policy, _ = build_trainer(recipe)\n    setattr(policy, 'compute_loss', f)\n",
        "build_trainer(...).compute_loss",
    ),
    "an attribute of a trainer instance": (
        "from grpo_cli.train.recipe_trainer import RecipeTrainer\n"
        "def make(args):\n    t = RecipeTrainer(*args)\n    t.use_vllm = False\n",
        "RecipeTrainer(...).use_vllm",
    ),
    "a parameter annotated as a trainer": (
        "def hook(model: 'GRPOTrainer'):\n    model.args.max_steps = 1\n",
        "model.args.max_steps",
    ),
    "a trainer method's name on any object": (
        "def patch(obj, f):\n    setattr(obj, 'compute_loss', f)\n",
        "obj.compute_loss (a trainer method's name)",
    ),
    "a vLLM module's function": (
        "import vllm.lora.punica_wrapper.punica_cpu\nvllm.lora.punica_wrapper.punica_cpu.fn = g\n",
        "vllm.lora.punica_wrapper.punica_cpu.fn",
    ),
    "a vLLM module imported from its package": (
        "from vllm.lora.punica_wrapper import punica_cpu as p\np.bgmv_shrink = g\n",
        "vllm.lora.punica_wrapper.punica_cpu.bgmv_shrink",
    ),
    "a vLLM module found by importlib, by a constant, names computed": (
        "import importlib\nMODULE = 'vllm.lora.punica_wrapper.punica_cpu'\n"
        "def use(names):\n    w = importlib.import_module(MODULE)\n"
        "    for n in names:\n        setattr(w, n, globals()[n])\n",
        "vllm.lora.punica_wrapper.punica_cpu.<computed>",
    ),
    "a vLLM module named in another module's constant": (
        "import importlib\nfrom grpo_cli import seams\n"
        "def use(g):\n    setattr(importlib.import_module(seams.LORA_WRAPPER), 'bgmv_shrink', g)\n",
        "vllm.lora.punica_wrapper.punica_cpu.bgmv_shrink",
    ),
    "a module named at run time": (
        "import importlib\ndef use(name, g):\n    module = importlib.import_module(name)\n    module.fn = g\n",
        "<the module name names>.fn",
    ),
    "a TRL module's namespace": (
        "from trl.generation import vllm_generation\nvars(vllm_generation)['LLM'] = g\n",
        "trl.generation.vllm_generation.<computed>",
    ),
    "in a method, from the module's imports": (
        "from trl import SFTTrainer\nclass Hooks:\n    def install(self, g):\n        SFTTrainer.training_step = g\n",
        "trl.SFTTrainer.training_step",
    ),
    "a module put in TRL's place": ("import sys\nsys.modules['trl'] = fake\n", "sys.modules['trl']"),
    "a module taken out of the table": ("import sys\nname = 'vllm'\ndel sys.modules[name]\n", "sys.modules['vllm']"),
    "the module table updated": ("import sys\nsys.modules.update(stubs)\n", "sys.modules[<computed>]"),
    "a TRL class reached through the table": ("sys.modules['trl'].GRPOTrainer = f\n", "trl.GRPOTrainer"),
    "a vLLM module got from the table": (
        "def f(g):\n    m = sys.modules.get('vllm.lora')\n    m.fn = g\n",
        "vllm.lora.fn",
    ),
    "mock.patch on a TRL name": (
        "from unittest import mock\nwith mock.patch('trl.X', f):\n    run()\n",
        "unittest.mock.patch('trl.X')",
    ),
    "patch.object as a decorator": (
        "from unittest.mock import patch\n@patch.object(GRPOTrainer, 'training_step')\ndef f(m): ...\n",
        "unittest.mock.patch.object(GRPOTrainer, 'training_step')",
    ),
    "unittest.mock.patch spelled out": (
        "import unittest.mock\nunittest.mock.patch('vllm.LLM').start()\n",
        "unittest.mock.patch('vllm.LLM')",
    ),
}
# Each snippet uses TRL, vLLM or a trainer without changing them.
HARMLESS = {
    "calling a trainer": "trainer.train()\ntrainer.add_callback(cb)\n",
    "a TRL config object": "from trl import GRPOConfig\nconfig = GRPOConfig(output_dir='x')\nconfig.max_steps = 3\n",
    "a vLLM request object": "import vllm\nparams = vllm.SamplingParams()\nparams.max_tokens = 5\n",
    "reading a library name": "import trl\nversion = trl.__version__\n",
    "an object's own state named like a trainer method": (
        "class Recorder:\n    def __init__(self):\n        self.log = []\n"
    ),
    "the model a trainer holds": (
        "model = trainer.accelerator.unwrap_model(trainer.model)\nmodel.config.use_cache = False\n"
    ),
    "a class body's name is not its methods'": (
        "class A:\n    import trl as lib\n    def f(self):\n        lib.x = 1\n"
    ),
    "reading the module table": "import sys\nloaded = 'trl' in sys.modules\nm = sys.modules.get('json')\n",
    "grpo's own function named patch": "def patch(x):\n    return x\npatch('trl.X')\n",
}


@pytest.mark.parametrize("source, what", PLANTED.values(), ids=PLANTED)
def test_the_check_finds_a_planted_patch(source, what):
    constants = {"grpo_cli.seams": {"LORA_WRAPPER": "vllm.lora.punica_wrapper.punica_cpu"}}
    assert what in [found for _, found in patches(source, constants)]


@pytest.mark.parametrize("source", HARMLESS.values(), ids=HARMLESS)
def test_the_check_leaves_use_without_change_alone(source):
    assert patches(source) == []


def test_a_patch_planted_in_a_copy_of_the_package_is_found_outside_the_allowed_files_only(tmp_path):
    for folder in ("grpo_cli", "rewards"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    before = scan(tmp_path)
    planted = "\n".join(
        [
            "import trl.trainer.grpo_trainer",
            "import vllm.lora.punica_wrapper.punica_cpu",
            "from trl import GRPOTrainer",
            "trl.trainer.grpo_trainer.X = print",
            "setattr(GRPOTrainer, 'training_step', print)",
            "vllm.lora.punica_wrapper.punica_cpu.fn = print",
        ]
    )
    for name in ALLOWED_FILES:
        with (tmp_path / name).open("a", encoding="utf-8") as file:
            file.write("\n" + planted + "\n")
    assert scan(tmp_path) == before
    with (tmp_path / "grpo_cli/eval/view.py").open("a", encoding="utf-8") as file:
        file.write("\n" + planted + "\n")
    added = set(scan(tmp_path)) - set(before)
    assert added == {
        ("grpo_cli/eval/view.py", "trl.trainer.grpo_trainer.X"),
        ("grpo_cli/eval/view.py", "trl.GRPOTrainer.training_step"),
        ("grpo_cli/eval/view.py", "vllm.lora.punica_wrapper.punica_cpu.fn"),
    }
