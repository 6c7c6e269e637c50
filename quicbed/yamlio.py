"""YAML with line numbers: every error in a profile or experiment file points at its line.

PyYAML's safe_load drops positions, so we compose the node tree ourselves and record the line of
every key and value by its path, e.g. ("clients", 1, "tls") -> 7.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from quicbed.errors import InputError

PathKey = tuple[str | int, ...]


class LocatedError(InputError):
    """One problem in a YAML file, rendered as `file:line: field: message` (exit 2)."""

    def __init__(self, file: str, line: int, field: str, message: str):
        super().__init__(message, file, line, field)
        self.message = message


def field_name(path: PathKey) -> str:
    """("clients", 1, "tls") -> "clients[1].tls"."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "experiment"


class Source:
    """The parsed file plus where each path came from, so validators can raise located errors."""

    def __init__(self, file: str, text: str, data: Any, lines: dict[PathKey, int], moved: str = ""):
        self.file, self.text, self.data, self.lines = file, text, data, lines
        # Top-level keys overlaid from the section `moved` (e.g. "quick") report under it.
        self.moved = moved
        self.overlaid: set[str] = set()

    def overlay(self, section: str) -> Source:
        """This file with `data[section]`'s keys replacing the top-level ones."""
        src = Source(self.file, self.text, dict(self.data), self.lines, section)
        src.data.update(self.data[section])
        src.overlaid = set(self.data[section])
        return src

    def real_path(self, path: PathKey) -> PathKey:
        if path and path[0] in self.overlaid:
            return (self.moved, *path)
        return path

    def line(self, path: PathKey) -> int:
        path = self.real_path(path)
        # Nearest recorded ancestor: a missing key is reported at its parent mapping.
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path, 1)

    def error(self, path: PathKey, message: str) -> LocatedError:
        return LocatedError(
            self.file, self.line(path), field_name(self.real_path(path)), message
        )


class _Loader(yaml.SafeLoader):
    pass


def load_source(path: Path | str) -> Source:
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise LocatedError(file, 1, "file", f"cannot read: {reason}") from None
    return parse_source(text, file)


def parse_source(text: str, file: str = "<string>") -> Source:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        lines: dict[PathKey, int] = {}
        data = _convert(loader, node, (), lines) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise LocatedError(file, line, "yaml", _yaml_message(exc)) from None
    except yaml.YAMLError as exc:  # e.g. a reader error on control characters
        raise LocatedError(file, 1, "yaml", str(exc).splitlines()[0]) from None
    finally:
        loader.dispose()
    return Source(file, text, data, lines)


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    parts = [p for p in (exc.context, exc.problem) if p]
    return "; ".join(parts) or "invalid YAML"


def _convert(loader: _Loader, node: yaml.Node, path: PathKey, lines: dict[PathKey, int]) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves `<<: *anchor` merge keys
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if not isinstance(key, str):
                raise yaml.MarkedYAMLError(
                    problem=f"keys must be strings, not {key!r}", problem_mark=key_node.start_mark
                )
            if key in out:
                raise yaml.MarkedYAMLError(
                    problem=f"duplicate key '{key}'", problem_mark=key_node.start_mark
                )
            # The key's line wins: "unknown key" and "wrong value" both point where the key is.
            lines[(*path, key)] = key_node.start_mark.line + 1
            out[key] = _convert(loader, value_node, (*path, key), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(loader, n, (*path, i), lines) for i, n in enumerate(node.value)]
    return loader.construct_object(node, deep=True)
