"""Reading recipe YAML with line numbers, and merging `key.path=value` overrides into it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grpo_cli.errors import Problem, UserError
from grpo_cli.recipe.yaml_guard import MAX_DEPTH, check_keys, check_nesting, check_size, read_text
from grpo_cli.recipe.yaml_merge import MERGE_TAG, resolve_merges

KeyPath = tuple[str | int, ...]
COMMAND_LINE = "command line"


class _RecipeLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line where an alias is used as a key: the node it yields is the anchor's,
    whose position is where the anchor was written, not where the user reused it."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.alias_key_lines: dict[tuple[int, int], int] = {}  # (id of the mapping, index of the pair) -> line

    def compose_node(self, parent, index):
        if index is None and isinstance(parent, yaml.MappingNode) and self.check_event(yaml.AliasEvent):
            self.alias_key_lines[(id(parent), len(parent.value))] = self.peek_event().start_mark.line + 1
        return super().compose_node(parent, index)


def format_path(path: KeyPath) -> str:
    """("rewards", 0, "name") -> "rewards[0].name"."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_yaml(file: Path) -> tuple[dict[str, Any], dict[KeyPath, int]]:
    """Parse a recipe with `yaml.safe_load` semantics; also return the 1-based line of every key path."""
    source = str(file)
    text = read_text(file, source)
    try:
        check_nesting(text, source)  # before composing: PyYAML's composer recurses once per level
        loader = _RecipeLoader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise UserError([Problem(f"YAML syntax error: {reason}", line=line, source=source)]) from None
    except RecursionError:
        raise UserError(
            [Problem(f"nested too deeply to be a recipe (over {MAX_DEPTH} levels)", source=source)]
        ) from None
    check_size(node, source)  # the composed graph shares aliased nodes; expanding it is what must stay bounded
    key_lines = loader.alias_key_lines
    check_keys(node, source, key_lines)
    lines: dict[KeyPath, int] = {}
    duplicates: list[Problem] = []
    _collect_lines(node, (), lines, duplicates, source, key_lines)  # while merge keys still say where keys came from
    if duplicates:
        raise UserError(duplicates)
    resolve_merges(node, source)
    data = _construct(node, source)
    if data is None:
        raise UserError([Problem("the recipe is empty; start from `grpo recipes cp demo my.yaml`", source=source)])
    if not isinstance(data, dict):
        line = node.start_mark.line + 1 if node is not None else None
        raise UserError(
            [Problem("the recipe must be a mapping of sections (model:, data:, ...)", line=line, source=source)]
        )
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
        raise UserError(
            [
                Problem(
                    f"cannot build this value ({reason}); a recipe holds plain strings, numbers, "
                    "booleans, lists and mappings, without tags",
                    line=mark.line + 1 if mark else None,
                    source=source,
                )
            ]
        ) from None
    finally:
        loader.dispose()


def _collect_lines(node: yaml.Node, path: KeyPath, lines: dict, duplicates: list, source: str, key_lines: dict) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set = set()
        merged: list[yaml.Node] = []
        for index, (key_node, value_node) in enumerate(node.value):
            if key_node.tag == MERGE_TAG:  # `<<: *defaults`: keys written beside it override the merged ones
                merged += value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                continue
            key = key_node.value
            child = (*path, key)
            line = key_lines.get((id(node), index), key_node.start_mark.line + 1)
            if key in seen:
                # safe_load silently keeps the last value; a user almost never means that.
                duplicates.append(Problem("duplicate key; it is also set above", format_path(child), line, source))
            seen.add(key)
            lines[child] = line
            _collect_lines(value_node, child, lines, duplicates, source, key_lines)
        for mapping in merged:  # merged keys are located at the anchor, unless written here too; the first merge wins
            found: dict[KeyPath, int] = {}
            _collect_lines(mapping, path, found, [], source, key_lines)
            for key_path, line in found.items():
                lines.setdefault(key_path, line)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            lines[child] = item.start_mark.line + 1
            _collect_lines(item, child, lines, duplicates, source, key_lines)


def line_of(lines: dict[KeyPath, int], path: KeyPath) -> int | None:
    """Line of the deepest prefix of `path` written in the file (a missing key points at its parent)."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 1 if path else None  # a missing top-level section belongs to the file as a whole


def parse_override(item: str) -> tuple[KeyPath, Any]:
    """`training.max_steps=20` -> (("training", "max_steps"), 20); values are YAML scalars, flow lists or mappings."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(
            [
                Problem(
                    f"override {item!r} must look like key.path=value, e.g. training.max_steps=20", source=COMMAND_LINE
                )
            ]
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
        # A mapping given for a section the file has changes the keys it names, as `grpo.beta=0.1` would; the
        # file's other keys stay (replacing the section would drop them unseen). `{}` still resets the section.
        for leaf, leaf_value in _merged(path, value, _at(data, path)):
            set_at(data, leaf, leaf_value, item)
            written.add(leaf)
    return written


def _merged(path: KeyPath, value: Any, current: Any):
    """(key path, value) pairs that write `value` at `path` over `current`, mapping into mapping, key by key."""
    if not (isinstance(value, dict) and value and isinstance(current, dict)):
        yield path, value
        return
    for key, sub in value.items():
        key = str(key)
        yield from _merged((*path, key), sub, current.get(key))


def _at(data: Any, path: KeyPath) -> Any:
    for part in path:
        data = _child(data, part)
    return data


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
            raise UserError(
                [Problem(f"override {item!r}: {where} is a value, not a section", where, source=COMMAND_LINE)]
            )
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
