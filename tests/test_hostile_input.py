"""Hostile or accidental non-recipes are refused at once: one line naming the file, exit 2, no traceback.

Speed and memory are measured by benchmarks/hostile_yaml.py; the bound here only catches a hang.
"""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app

runner = CliRunner()


def alias_bomb() -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        name, prev = chr(ord("a") + i), chr(ord("a") + i - 1)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"  # 9^10 = 3.5 billion strings once expanded


HOSTILE = {
    "alias_bomb": (alias_bomb().encode(), "expands to over"),
    "recursive_alias": (b"model: &m\n  name: x\n  again: *m\n", "recursive alias"),
    "deep_flow": (b"model: " + b"[" * 20000 + b"]" * 20000 + b"\n", "nested too deeply"),
    "deep_block": (
        "".join("  " * i + f"k{i}:\n" for i in range(200)).encode() + b"  " * 200 + b"v: 1\n",
        "nested too deeply",
    ),
    "huge": (b"model:\n  name: x\n" + (b"# " + b"x" * 98 + b"\n") * 520_000, "is not a recipe"),
    "binary": (b"model:\n  name: x\x00\x01\x02\n", "binary content"),
    "not_utf8": (b"model:\n  name: x\n# caf\xe9\n", "byte 0xe9 is not UTF-8"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_recipe_is_refused_fast(tmp_path, name):
    content, expected = HOSTILE[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(content)
    started = time.perf_counter()
    result = runner.invoke(app, ["validate", str(path)])
    assert time.perf_counter() - started < 10  # a hang, not a benchmark
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(str(path)) and expected in lines[0], result.output


def test_non_utf8_byte_is_reported_with_its_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"model:\n  name: x\n# caf\xe9\n")
    assert runner.invoke(app, ["validate", str(path)]).output.startswith(f"{path}:3: ")


def test_anchors_and_merge_keys_still_work(tmp_path, tiny_llama):
    path = tmp_path / "anchors.yaml"
    path.write_text(
        f"model: {{name: {tiny_llama}, dtype: float32}}\n"
        "data: {source: generated}\n"
        "rewards:\n  - &r {name: correctness, weight: 2.0}\n  - *r\n"
        "eval: &e {batch_size: 4}\n"
        "training:\n  <<: {learning_rate: 1.0e-5, max_steps: 3}\n  seed: 7\n"
    )
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "learning_rate: 1.0e-05" in result.output and "max_steps: 3" in result.output
    assert result.output.count("name: correctness") == 2


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "model:\n  name: !!python/object/apply:os.system ['echo pwned']\nrewards: [correctness]\n",
            ":2: cannot build",
        ),
        ("model:\n  name: !custom x\nrewards: [correctness]\n", ":2: cannot build"),
        ("model: {name: x}\n? [a, b]\n: 1\n", ":2: a list is used as a key"),
        ("model: {name: x}\n? {a: 1}\n: 1\n", ":2: a mapping is used as a key"),
    ],
)
def test_yaml_the_loader_cannot_build_is_one_line(tmp_path, text, expected):
    path = tmp_path / "tagged.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}{expected}"), result.output


def test_merge_keys_with_overrides_beside_them(tmp_path, tiny_llama):
    path = tmp_path / "merge.yaml"
    path.write_text(
        f"model: {{name: {tiny_llama}, dtype: float32}}\ndata: {{source: generated}}\n"
        "rewards: [correctness]\ngrpo: &g {num_generations: 4, temperature: 0.7}\n"
        "training:\n  <<: {learning_rate: 1.0e-5, max_steps: 3}\n  max_steps: 5\n  per_device_train_batch_size: 4\n"
    )
    result = runner.invoke(app, ["validate", str(path), "training.seed=3"])
    assert result.exit_code == 0, result.output
    assert "max_steps: 5" in result.output and "learning_rate: 1.0e-05" in result.output
    broken = path.read_text().replace("max_steps: 5", "max_steps: -7")
    path.write_text(broken)
    assert f"{path}:7: training.max_steps" in runner.invoke(app, ["validate", str(path)]).output
