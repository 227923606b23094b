"""The recipe loader reads YAML as YAML does. It keeps its own line numbers, so it is checked against
`yaml.safe_load` on generated documents with anchors, aliases, merges (single and list) and overrides. Merges follow
YAML's rule (https://yaml.org/type/merge.html): the earlier mapping of a merge list wins. PyYAML 6.0.4 breaks that
rule for keys longer than one character (yaml/pyyaml#953); where the installed PyYAML does, the reference is
safe_load with the merge handling every PyYAML before 6.0.4 had."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.recipe.yaml_source import read_yaml

runner = CliRunner()
ISSUE_DOCUMENT = (
    "defs:\n  a: &a {name: correctness, weight: 1.0}\n  b: &b {name: integer, weight: 2.0}\n"
    "rewards:\n  - <<: [*b, *a]\n"
)


class _MergeBySpecLoader(yaml.SafeLoader):
    def flatten_mapping(self, node):  # PyYAML 3.x - 6.0.3's SafeConstructor.flatten_mapping
        merge, index = [], 0
        while index < len(node.value):
            key_node, value_node = node.value[index]
            if key_node.tag == "tag:yaml.org,2002:merge":
                del node.value[index]
                if isinstance(value_node, yaml.MappingNode):
                    self.flatten_mapping(value_node)
                    merge.extend(value_node.value)
                else:
                    submerge = []
                    for subnode in value_node.value:
                        self.flatten_mapping(subnode)
                        submerge.append(subnode.value)
                    for value in reversed(submerge):
                        merge.extend(value)
            else:
                index += 1
        if merge:
            node.value = merge + node.value


def reference_load(text: str):
    return yaml.load(text, Loader=_MergeBySpecLoader) if SAFE_LOAD_BREAKS_MERGES else yaml.safe_load(text)


SAFE_LOAD_BREAKS_MERGES = yaml.safe_load(ISSUE_DOCUMENT)["rewards"][0]["name"] != "integer"

KEYS = ["name", "weight", "k", "lr", "kwargs", "x"]
scalars = st.one_of(
    st.integers(-5, 5),
    st.sampled_from(["a", "bb", "correctness", "yes", "1.5", "null", "~"]),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
)


def _scalar(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...").removesuffix("...").strip()


@st.composite
def documents(draw) -> str:
    """`defs:` with anchored mappings (each may merge earlier ones), then `out:` mappings that merge anchors (one, or
    a list, repeats allowed), write some keys of their own (overriding), and may use an anchor as a plain value."""
    lines, anchors = ["defs:"], []
    for i in range(draw(st.integers(1, 4))):
        lines.append(f"  d{i}: &d{i}")
        if anchors and draw(st.booleans()):
            lines.append(f"    <<: {_merge_value(draw, anchors)}")
        for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True)):
            lines.append(f"    {key}: {_scalar(draw(scalars))}")
        anchors.append(f"d{i}")
    lines.append("out:")
    for j in range(draw(st.integers(1, 3))):
        lines.append(f"  m{j}:")
        if draw(st.integers(0, 3)) > 0:  # mostly with a merge
            lines.append(f"    <<: {_merge_value(draw, anchors)}")
        for key in draw(st.lists(st.sampled_from(KEYS + ["nested"]), max_size=3, unique=True)):
            value = f"*{draw(st.sampled_from(anchors))}" if key == "nested" else _scalar(draw(scalars))
            lines.append(f"    {key}: {value}")
    return "\n".join(lines) + "\n"


def _merge_value(draw, anchors: list[str]) -> str:
    if draw(st.booleans()):
        return f"*{draw(st.sampled_from(anchors))}"
    chosen = draw(st.lists(st.sampled_from(anchors), min_size=1, max_size=4))
    return "[" + ", ".join(f"*{a}" for a in chosen) + "]"


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_loader_agrees_with_yaml_on_anchors_aliases_and_merges(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "recipe.yaml"
        path.write_text(text, encoding="utf-8")
        ours, _ = read_yaml(path)
    assert ours == reference_load(text), text


def test_earlier_mapping_of_a_merge_list_wins_and_written_keys_win_over_merged(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(ISSUE_DOCUMENT + "  - <<: [*b, *a]\n    weight: 3.0\n  - <<: *a\n", encoding="utf-8")
    data, lines = read_yaml(path)
    assert data["rewards"] == [
        {"name": "integer", "weight": 2.0},
        {"name": "integer", "weight": 3.0},
        {"name": "correctness", "weight": 1.0},
    ]
    assert lines[("rewards", 0, "name")] == 3 and lines[("rewards", 1, "weight")] == 7  # b's line; the override's


def fails_on_line(tmp_path, text: str, line: int, *words: str) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    first = result.output.strip().splitlines()[0]
    assert first.startswith(f"{path}:{line}:"), first
    for word in words:
        assert word in first, first
    return first


def test_a_python_tag_on_a_key_is_refused_as_a_tag(tmp_path):
    fails_on_line(
        tmp_path, "model:\n  name: x\n? !!python/tuple [a, b]\n: 1\n", 3, "`!!python/tuple` is refused", "without tags"
    )
    fails_on_line(tmp_path, "model:\n  ? !!python/name:os.system\n  : 1\n", 2, "`!!python/name:os.system` is refused")


def test_an_alias_used_as_a_key_is_blamed_on_the_line_that_uses_it(tmp_path):
    text = "model:\n  name: x\n  dtype: &k float32\nrewards: [correctness]\ntraining:\n  *k : 3\n"
    fails_on_line(tmp_path, text, 6, "training.float32")
    text = "model: &m\n  name: x\nrewards: [correctness]\ntraining:\n  *m : 3\n"
    fails_on_line(tmp_path, text, 5, "a mapping is used as a key")


def test_a_merge_of_something_that_is_not_a_mapping_is_one_line(tmp_path):
    fails_on_line(tmp_path, "v: &v 3\nmodel:\n  <<: *v\n  name: x\n", 1, "`<<` merges a mapping")
