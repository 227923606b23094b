"""Generation lives in one package: every class with a `generate` method is defined in grpo_cli/generation/, and
outside it nothing calls a model's `generate` (TRL generates inside the trainer itself)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "grpo_cli"
WING = PACKAGE / "generation"


def generator_classes(tree: ast.AST) -> list[str]:
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(isinstance(item, ast.FunctionDef) and item.name == "generate" for item in node.body)
    ]


def model_generate_calls(tree: ast.AST) -> list[int]:
    """Lines calling `<something>.model.generate(...)` or `model.generate(...)`: a model's own generate."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "generate":
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("model", "lm", "policy"):
                lines.append(node.lineno)
    return sorted(lines)


def outside_the_wing(finder) -> dict[str, list]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if WING in path.parents:
            continue
        hits = finder(ast.parse(path.read_text(encoding="utf-8")))
        if hits:
            found[path.relative_to(PACKAGE).as_posix()] = hits
    return found


def test_every_generator_class_is_defined_in_the_generation_package():
    assert outside_the_wing(generator_classes) == {}


def test_nothing_outside_the_generation_package_calls_a_models_generate():
    assert outside_the_wing(model_generate_calls) == {}


def test_the_finders_find_what_they_look_for():
    planted = ast.parse(
        "class Sampler:\n    def generate(self, prompts):\n        return self.model.generate(ids)\n"
        "def f(model):\n    return model.generate(x)\n"
    )
    assert generator_classes(planted) == ["Sampler"]
    assert model_generate_calls(planted) == [3, 5]
    assert generator_classes(ast.parse((WING / "transformers_engine.py").read_text(encoding="utf-8"))) == [
        "HFGenerator"
    ]
