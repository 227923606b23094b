"""Reading recipe YAML with line numbers, and merging `key.path=value` overrides into it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grpo_cli.errors import Problem, UserError

KeyPath = tuple[str | int, ...]
COMMAND_LINE = "command line"
# A recipe is a few kilobytes. These bounds refuse hostile files (a huge file, an alias bomb that expands a few
# hundred bytes into billions of nodes, nesting that exhausts the parser's recursion) before they cost memory.
MAX_RECIPE_BYTES = 1 << 20
MAX_NODES = 100_000
MAX_DEPTH = 64


def format_path(path: KeyPath) -> str:
    """("rewards", 0, "name") -> "rewards[0].name"."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_yaml(file: Path) -> tuple[dict[str, Any], dict[KeyPath, int]]:
    """Parse a recipe with `yaml.safe_load` semantics; also return the 1-based line of every key path."""
    source = str(file)
    text = _read_text(file, source)
    try:
        _check_nesting(text, source)  # before composing: PyYAML's composer recurses once per level
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise UserError([Problem(f"YAML syntax error: {reason}", line=line, source=source)]) from None
    except RecursionError:
        raise UserError([Problem(f"nested too deeply to be a recipe (over {MAX_DEPTH} levels)", source=source)]) from None
    _check_size(node, source)  # the composed graph shares aliased nodes; expanding it is what must stay bounded
    _check_keys(node, source)
    lines: dict[KeyPath, int] = {}
    duplicates: list[Problem] = []
    _collect_lines(node, (), lines, duplicates, source)  # before construction, which flattens merge keys in place
    if duplicates:
        raise UserError(duplicates)
    data = _construct(node, source)
    if data is None:
        raise UserError([Problem("the recipe is empty; start from `grpo recipes cp demo my.yaml`", source=source)])
    if not isinstance(data, dict):
        line = node.start_mark.line + 1 if node is not None else None
        raise UserError([Problem("the recipe must be a mapping of sections (model:, data:, ...)", line=line, source=source)])
    return data, lines


def _construct(node: yaml.Node | None, source: str) -> Any:
    """Python objects from the already composed (and size-checked) node graph, with safe_load's constructors.

    Tags safe_load cannot build (`!!python/...`, unknown `!tags`) are refused here, never run."""
    if node is None:
        return None
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        reason = getattr(exc, "problem", None) or str(exc)
        raise UserError([Problem(f"cannot build this value ({reason}); a recipe holds plain strings, numbers, "
                                 "booleans, lists and mappings, without tags", line=mark.line + 1 if mark else None,
                                 source=source)]) from None
    finally:
        loader.dispose()


def _check_keys(root: yaml.Node | None, source: str) -> None:
    """Keys must be plain scalars: a list or a mapping used as a key cannot name a recipe field."""
    stack, seen = [root] if root is not None else [], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:  # aliases share nodes; _check_size already bounded the walk
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    kind = "list" if isinstance(key, yaml.SequenceNode) else "mapping"
                    raise UserError([Problem(f"a {kind} is used as a key; keys are plain names such as `model`",
                                             line=key.start_mark.line + 1, source=source)])
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def _read_text(file: Path, source: str) -> str:
    """The recipe as text: a bounded read, and a clear line for binary or non-UTF-8 content."""
    try:
        with open(file, "rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"recipe file not found: {file}", source=None) from None
    except (IsADirectoryError, PermissionError, OSError) as exc:
        raise UserError(f"cannot read recipe: {exc.strerror or exc}", source=source) from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise UserError([Problem(f"{file.stat().st_size:,} bytes is not a recipe (recipes are a few KB; the limit is "
                                 f"{MAX_RECIPE_BYTES:,}); did you pass a data or model file?", source=source)])
    if b"\0" in raw:
        line = raw.count(b"\n", 0, raw.index(b"\0")) + 1
        raise UserError([Problem("binary content (a NUL byte), not a YAML recipe", line=line, source=source)])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError([Problem(f"byte 0x{raw[exc.start]:02x} is not UTF-8; save the recipe as UTF-8", line=line,
                                 source=source)]) from None


_OPEN = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken, yaml.BlockSequenceStartToken,
         yaml.BlockMappingStartToken)
_CLOSE = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)


def _check_nesting(text: str, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH from the token stream (the scanner does not recurse), stopping early."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:  # aliases can nest deeper than the text does, so _check_nesting alone is not enough
                raise UserError([Problem(f"nested too deeply to be a recipe (over {MAX_DEPTH} levels)",
                                         line=token.start_mark.line + 1, source=source)])
        elif isinstance(token, _CLOSE):
            depth -= 1


def _check_size(root: yaml.Node | None, source: str) -> None:
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
            raise UserError([Problem(f"expands to over {MAX_NODES:,} values (aliases repeating aliases?); "
                                     "a recipe is a few dozen", line=line, source=source)])
        if depth > MAX_DEPTH:
            raise UserError([Problem(f"nested too deeply to be a recipe (over {MAX_DEPTH} levels)", line=line,
                                     source=source)])
        if id(node) in ancestors:
            raise UserError([Problem("an alias refers to a node that contains it (a recursive alias)", line=line,
                                     source=source)])
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            continue
        inner = ancestors | {id(node)}
        stack.extend((child, depth + 1, inner) for child in children)


MERGE_TAG = "tag:yaml.org,2002:merge"


def _collect_lines(node: yaml.Node, path: KeyPath, lines: dict, duplicates: list, source: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set = set()
        merged: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:  # `<<: *defaults`: keys written beside it override the merged ones
                merged += value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                continue
            key = key_node.value
            child = (*path, key)
            if key in seen:
                # safe_load silently keeps the last value; a user almost never means that.
                duplicates.append(
                    Problem("duplicate key; it is also set above", format_path(child), key_node.start_mark.line + 1, source)
                )
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _collect_lines(value_node, child, lines, duplicates, source)
        for mapping in merged:  # merged keys are located at the anchor, unless written here too
            found: dict[KeyPath, int] = {}
            _collect_lines(mapping, path, found, [], source)
            for key_path, line in found.items():
                lines.setdefault(key_path, line)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            lines[child] = item.start_mark.line + 1
            _collect_lines(item, child, lines, duplicates, source)


def line_of(lines: dict[KeyPath, int], path: KeyPath) -> int | None:
    """Line of the deepest prefix of `path` written in the file (a missing key points at its parent)."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 1 if path else None  # a missing top-level section belongs to the file as a whole


def parse_override(item: str) -> tuple[KeyPath, Any]:
    """`training.max_steps=20` -> (("training", "max_steps"), 20); values are YAML scalars or flow lists."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(
            [Problem(f"override {item!r} must look like key.path=value, e.g. training.max_steps=20", source=COMMAND_LINE)]
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw  # a plain string such as `a: b` is still a sensible value
    path: KeyPath = tuple(int(p) if p.isdigit() else p for p in key.split("."))
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> set[KeyPath]:
    """Merge overrides into the parsed YAML in place, before validation, so they are checked like the file."""
    written: set[KeyPath] = set()
    for item in overrides:
        path, value = parse_override(item)
        set_at(data, path, value, item)
        written.add(path)
    return written


def apply_options(data: dict[str, Any], options: dict[str, Any]) -> set[KeyPath]:
    """Typed values from command-line flags (`{"eval.limit": 50}`), set as they are: nothing is parsed again.
    None means the flag was not given."""
    written: set[KeyPath] = set()
    for key, value in options.items():
        if value is not None:
            path: KeyPath = tuple(key.split("."))
            set_at(data, path, value, f"{key}={value}")
            written.add(path)
    return written


def set_at(data: dict[str, Any], path: KeyPath, value: Any, item: str) -> None:
    """Set `value` at `path`, creating missing sections; `item` names the override in errors."""
    target: Any = data
    for depth, part in enumerate(path[:-1]):
        nxt = _child(target, part)
        if nxt is None:
            nxt = {}
            _set_child(target, part, nxt, item)
        elif not isinstance(nxt, (dict, list)):
            where = format_path(path[: depth + 1])
            raise UserError([Problem(f"override {item!r}: {where} is a value, not a section", where, source=COMMAND_LINE)])
        target = nxt
    _set_child(target, path[-1], value, item)


def format_override(key: str, value: Any) -> str:
    """`("training.max_steps", 20)` -> `training.max_steps=20`, as a user would type it (YAML booleans)."""
    return f"{key}={str(value).lower() if isinstance(value, bool) else value}"


def _child(container: Any, part: str | int) -> Any:
    if isinstance(container, list):
        return container[part] if isinstance(part, int) and part < len(container) else None
    return container.get(part) if isinstance(container, dict) else None


def _set_child(container: Any, part: str | int, value: Any, item: str) -> None:
    if isinstance(container, list):
        if not isinstance(part, int) or part > len(container):
            raise UserError([Problem(f"override {item!r}: list index {part} is out of range", source=COMMAND_LINE)])
        if part == len(container):
            container.append(value)
        else:
            container[part] = value
    else:
        container[str(part)] = value
