"""YAML loading that remembers where every key and value stood, for file:line: field: errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from quicbed.errors import InputError


class Located(dict):
    """A mapping that also knows the line of each key (1-based) and of itself."""

    line: int = 0
    key_lines: dict[str, int]


class LocatedList(list):
    line: int = 0
    item_lines: list[int]


class _LineLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Located:
        mapping = Located()
        mapping.line = node.start_mark.line + 1
        mapping.key_lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in mapping:
                raise InputError(f"duplicate key {key!r}", line=key_node.start_mark.line + 1)
            mapping[key] = self.construct_object(value_node, deep=True)
            mapping.key_lines[str(key)] = key_node.start_mark.line + 1
        return mapping

    def construct_sequence(self, node: yaml.SequenceNode, deep: bool = False) -> LocatedList:
        seq = LocatedList(self.construct_object(child, deep=True) for child in node.value)
        seq.line = node.start_mark.line + 1
        seq.item_lines = [child.start_mark.line + 1 for child in node.value]
        return seq


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                            _LineLoader.construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG,
                            _LineLoader.construct_sequence)


def load_yaml(path: Path) -> Any:
    """Load a YAML file; syntax errors become InputError with file and line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=str(path)) from None
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except InputError as exc:
        raise InputError(exc.detail, file=str(path), line=exc.line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise InputError(f"YAML syntax: {exc.problem or exc}", file=str(path), line=line) from None


def line_of(mapping: Any, key: str) -> int | None:
    """The line of a key in a Located mapping (or of the mapping itself)."""
    if isinstance(mapping, Located):
        return mapping.key_lines.get(key, mapping.line)
    return None
