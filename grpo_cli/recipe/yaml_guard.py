"""Refusing hostile or malformed recipe files before they cost time or memory: a bounded read, binary and non-UTF-8
content, nesting, alias bombs and recursive aliases, and keys that cannot name a field."""

from __future__ import annotations

from pathlib import Path

import yaml

from grpo_cli.errors import Problem, UserError

# A recipe is a few kilobytes. These bounds refuse hostile files (a huge file, an alias bomb that expands a few
# hundred bytes into billions of nodes, nesting that exhausts the parser's recursion) before they cost memory.
MAX_RECIPE_BYTES = 1 << 20
MAX_NODES = 100_000
MAX_DEPTH = 64
YAML_TAG = "tag:yaml.org,2002:"
PYTHON_TAG = YAML_TAG + "python/"


def read_text(file: Path, source: str) -> str:
    """The recipe as text: a bounded read, and a clear line for binary or non-UTF-8 content."""
    try:
        with open(file, "rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"recipe file not found: {file}", source=None) from None
    except (IsADirectoryError, PermissionError, OSError) as exc:
        raise UserError(f"cannot read recipe: {exc.strerror or exc}", source=source) from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise UserError(
            [
                Problem(
                    f"{file.stat().st_size:,} bytes is not a recipe (recipes are a few KB; the limit is "
                    f"{MAX_RECIPE_BYTES:,}); did you pass a data or model file?",
                    source=source,
                )
            ]
        )
    if b"\0" in raw:
        line = raw.count(b"\n", 0, raw.index(b"\0")) + 1
        raise UserError([Problem("binary content (a NUL byte), not a YAML recipe", line=line, source=source)])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError(
            [Problem(f"byte 0x{raw[exc.start]:02x} is not UTF-8; save the recipe as UTF-8", line=line, source=source)]
        ) from None


_OPEN = (
    yaml.FlowSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.BlockMappingStartToken,
)
_CLOSE = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)


def check_nesting(text: str, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH from the token stream (the scanner does not recurse), stopping early."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:  # aliases can nest deeper than the text does, so check_nesting alone is not enough
                raise UserError(
                    [
                        Problem(
                            f"nested too deeply to be a recipe (over {MAX_DEPTH} levels)",
                            line=token.start_mark.line + 1,
                            source=source,
                        )
                    ]
                )
        elif isinstance(token, _CLOSE):
            depth -= 1


def check_size(root: yaml.Node | None, source: str) -> None:
    """Refuse alias bombs, recursive aliases and deep nesting by walking the node graph with a budget.

    The walk counts nodes as the expanded document would hold them, without building it; it stops at the budget.
    """
    if root is None:
        return
    count = 0
    stack: list[tuple[yaml.Node, int, frozenset[int]]] = [(root, 1, frozenset())]
    while stack:
        node, depth, ancestors = stack.pop()
        count += 1
        line = node.start_mark.line + 1
        if count > MAX_NODES:
            raise UserError(
                [
                    Problem(
                        f"expands to over {MAX_NODES:,} values (aliases repeating aliases?); a recipe is a few dozen",
                        line=line,
                        source=source,
                    )
                ]
            )
        if depth > MAX_DEPTH:
            raise UserError(
                [Problem(f"nested too deeply to be a recipe (over {MAX_DEPTH} levels)", line=line, source=source)]
            )
        if id(node) in ancestors:
            raise UserError(
                [Problem("an alias refers to a node that contains it (a recursive alias)", line=line, source=source)]
            )
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            continue
        inner = ancestors | {id(node)}
        stack.extend((child, depth + 1, inner) for child in children)


def check_keys(root: yaml.Node | None, source: str, key_lines: dict[tuple[int, int], int]) -> None:
    """Keys must be plain scalars: a list or a mapping used as a key cannot name a recipe field, and a Python tag
    is refused on a key as on a value. `key_lines` gives the line where an alias is used as a key."""
    stack, seen = [root] if root is not None else [], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:  # aliases share nodes; check_size already bounded the walk
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for index, (key, value) in enumerate(node.value):
                line = key_lines.get((id(node), index), key.start_mark.line + 1)
                if key.tag.startswith(PYTHON_TAG):
                    raise UserError(
                        [
                            Problem(
                                f"the tag `!!{key.tag.removeprefix(YAML_TAG)}` is refused: a recipe "
                                "holds plain strings, numbers, booleans, lists and mappings, without "
                                "tags",
                                line=line,
                                source=source,
                            )
                        ]
                    )
                if not isinstance(key, yaml.ScalarNode):
                    kind = "list" if isinstance(key, yaml.SequenceNode) else "mapping"
                    raise UserError(
                        [
                            Problem(
                                f"a {kind} is used as a key; keys are plain names such as `model`",
                                line=line,
                                source=source,
                            )
                        ]
                    )
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
