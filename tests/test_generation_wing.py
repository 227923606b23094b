"""Generation lives in one package: every class with a `generate` method is defined in grpo_cli/generation/, and
outside it nothing calls a model's `generate` (TRL generates inside the trainer itself).

Outside the package every `x.generate(...)` counts as a model's, however `x` is spelled (`net`, `self.policy`,
`unwrap_model(m)`, `models[0]`), unless the code says it is one of the package's generators: a parameter annotated
with a class imported from grpo_cli.generation, or a name the function binds only to what such a class or factory
returns (`generator = HFGenerator(...)`)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "grpo_cli"
WING = PACKAGE / "generation"
WING_MODULE = "grpo_cli.generation"

# Calls on an unannotated generator the code cannot show is one, (file, function, receiver); each must still be
# there (the list only shrinks). Empty: annotate a generator parameter with generation/base.py's Generator.
KNOWN_GENERATORS: set[tuple[str, str, str]] = set()


def generator_classes(tree: ast.AST) -> list[str]:
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(isinstance(item, ast.FunctionDef) and item.name == "generate" for item in node.body)
    ]


def wing_names(tree: ast.AST) -> set[str]:
    """Names the file binds to the generation package or something in it (`from grpo_cli.generation.x import C`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(WING_MODULE):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.asname for a in node.names if a.asname and a.name.startswith(WING_MODULE))
    return names


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from: `engines` for `engines.build_generator`."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _wing_annotation(annotation: ast.expr | None, wing: set[str]) -> bool:
    """`PolicySampler`, `"PolicySampler"`, `PolicySampler | None`: the package's class (None aside), nothing else."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _wing_annotation(ast.parse(annotation.value, mode="eval").body, wing)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [
            s for s in (annotation.left, annotation.right) if not (isinstance(s, ast.Constant) and s.value is None)
        ]
        return bool(sides) and all(_wing_annotation(s, wing) for s in sides)
    return isinstance(annotation, (ast.Name, ast.Attribute)) and _root(annotation) in wing


def _own_nodes(scope: ast.AST):
    """The nodes of one function (or of the module), nested functions left to their own turn (a lambda's body is
    its enclosing function's)."""
    for child in ast.iter_child_nodes(scope):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield child
            yield from _own_nodes(child)


def known_generators(scope: ast.AST, wing: set[str]) -> set[str]:
    """Names that in this scope hold only one of the package's generators: a parameter annotated with its class, or a
    name every assignment of which is a call of something the package exports. One other binding and it is unknown."""
    known, other = set(), set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        arguments = [*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs]
        known |= {a.arg for a in arguments if _wing_annotation(a.annotation, wing)}
        other |= {a.arg for a in arguments} - known
    for node in _own_nodes(scope):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            made = isinstance(node.value, ast.Call) and _root(node.value.func) in wing
            for target in targets:
                if isinstance(target, ast.Name):
                    (known if made else other).add(target.id)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.comprehension)):
            targets = [i.optional_vars for i in node.items] if hasattr(node, "items") else [node.target]
            other |= {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}
    return known - other


def model_generate_calls(source: str) -> list[tuple[int, str, str]]:
    """(line, function, receiver) for each `<receiver>.generate(...)` whose receiver is not shown to be one of the
    generation package's generators: by default a generate call is a model's."""
    tree = ast.parse(source)
    wing = wing_names(tree)
    found = []
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        known = known_generators(scope, wing)
        for node in _own_nodes(scope):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "generate":
                receiver = node.func.value
                if not (isinstance(receiver, ast.Name) and receiver.id in known):
                    found.append((node.lineno, getattr(scope, "name", "<module>"), ast.unparse(receiver)))
    return sorted(found)


def outside_the_wing(finder) -> dict[str, list]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if WING in path.parents:
            continue
        hits = finder(path.read_text(encoding="utf-8"))
        if hits:
            found[path.relative_to(PACKAGE).as_posix()] = hits
    return found


def test_every_generator_class_is_defined_in_the_generation_package():
    assert outside_the_wing(lambda source: generator_classes(ast.parse(source))) == {}


def test_nothing_outside_the_generation_package_calls_a_models_generate():
    calls = {
        (path, function, receiver)
        for path, hits in outside_the_wing(model_generate_calls).items()
        for _, function, receiver in hits
    }
    assert sorted(calls - KNOWN_GENERATORS) == []
    assert sorted(KNOWN_GENERATORS - calls) == [], "gone: take it off KNOWN_GENERATORS"


def test_the_finders_find_what_they_look_for():
    planted = (
        "class Sampler:\n    def generate(self, prompts):\n        return self.model.generate(ids)\n"
        "def f(model):\n    return model.generate(x)\n"
    )
    assert generator_classes(ast.parse(planted)) == ["Sampler"]
    assert model_generate_calls(planted) == [(3, "generate", "self.model"), (5, "f", "model")]
    assert generator_classes(ast.parse((WING / "transformers_engine.py").read_text(encoding="utf-8"))) == [
        "HFGenerator"
    ]


def test_a_model_is_found_however_its_generate_is_reached():
    """A model under any name, a call's result, an item, an attribute chain: each is a model until shown otherwise."""
    planted = (
        "from grpo_cli.generation.transformers_engine import HFGenerator\n"
        "def f(net, m, models, g: HFGenerator):\n"
        "    net.generate(x)\n"
        "    unwrap_model(m).generate(x)\n"
        "    models[0].generate(x)\n"
        "    self.policy.net.generate(x)\n"
        "    g.generate(x)\n"  # annotated with the package's class: a generator
        "def h(model):\n"
        "    generator = model\n"  # named like one, bound to the model: still a model
        "    generator.generate(x)\n"
        "    made = HFGenerator(model, tok)\n"
        "    made.generate(x)\n"  # made by the package: a generator
        "    run(lambda: made.generate(x), lambda lm: lm.generate(x))\n"  # a lambda's body is h's
    )
    assert model_generate_calls(planted) == [
        (3, "f", "net"),
        (4, "f", "unwrap_model(m)"),
        (5, "f", "models[0]"),
        (6, "f", "self.policy.net"),
        (10, "h", "generator"),
        (13, "h", "lm"),
    ]
