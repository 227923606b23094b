"""YAML merge keys (`<<: *defaults`, `<<: [*a, *b]`) resolved by YAML's own rule, so a recipe means the same under
every PyYAML: keys written in the mapping win over merged ones, and a mapping earlier in a merge list wins over a
later one (https://yaml.org/type/merge.html). PyYAML 6.0.4 lets the later one win for keys longer than one character
(yaml/pyyaml#953), which would silently turn one reward into another."""

from __future__ import annotations

import yaml

from grpo_cli.errors import Problem, UserError

MERGE_TAG = "tag:yaml.org,2002:merge"


def resolve_merges(root: yaml.Node | None, source: str) -> None:
    """Replace every merge key of the composed graph by the pairs it contributes, in place, so that PyYAML's
    constructor finds no merge key left. The graph is already size-checked and acyclic (yaml_guard.check_size);
    each node is resolved once however many aliases share it."""
    if root is not None:
        _resolve(root, set(), source)


def _resolve(node: yaml.Node, done: set[int], source: str) -> None:
    if id(node) in done:
        return
    done.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _resolve(item, done, source)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    own, sources = [], []
    for key, value in node.value:
        _resolve(value, done, source)  # a merged mapping is resolved before its pairs are read
        if key.tag != MERGE_TAG:
            own.append((key, value))
            continue
        for merged in value.value if isinstance(value, yaml.SequenceNode) else [value]:
            if not isinstance(merged, yaml.MappingNode):
                raise UserError(
                    [
                        Problem(
                            "`<<` merges a mapping or a list of mappings (such as `<<: *defaults`)",
                            line=merged.start_mark.line + 1,
                            source=source,
                        )
                    ]
                )
            sources.append(merged)
    if not sources:
        return
    seen = {_key(k) for k, _ in own}
    inherited = []
    for merged in sources:  # earlier sources first: a key already seen keeps its first value
        for key, value in merged.value:
            if _key(key) not in seen:
                seen.add(_key(key))
                inherited.append((key, value))
    node.value = inherited + own


def _key(node: yaml.Node) -> tuple[str, str]:
    """Keys are plain scalars (yaml_guard.check_keys): equal when their resolved tag and text are."""
    return node.tag, node.value
