"""YAML with line numbers: every error in a profile or experiment file points at its line.

PyYAML's safe_load drops positions, so we compose the node tree ourselves and record the line of
every key and value by its path, e.g. ("clients", 1, "tls") -> 7.

Every file is also bounded (size, line length, nesting, values after alias expansion, value
length, encoding): a hostile file, such as an alias bomb that expands exponentially, is refused
with a located error in milliseconds instead of spinning PyYAML's pure-Python parser or
exhausting memory.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

import yaml

from quicbed.errors import InputError

PathKey = tuple[str | int, ...]

# Profiles and experiment files are about 1 KB written by hand; every bound below is far above
# what such a file needs and low enough that refusing a hostile file takes well under a second.
# PyYAML's pure-Python scanner takes about 2 µs per character even for comments, so 1 MiB of
# them would take 2 s: 128 KiB (100 times the biggest shipped file) keeps that near 0.25 s. Only
# this much is read, so /dev/zero or a huge file never lands in memory.
MAX_FILE_BYTES = 128 * 1024
# A hand-written line is under 200 characters; a generated flow list of a few hundred sweep
# values still fits. Longer lines are generated garbage (a minified dump, 10 000 `[` in a
# row), refused here before PyYAML scans them.
MAX_LINE_CHARS = 4096
# Real files nest 4 levels. PyYAML's composer (and our conversion) recurse per level, so
# 10 000 nested `[` would exceed Python's recursion limit; 32 levels stay far below it.
MAX_DEPTH = 32
# Nodes composed, and nodes made with every alias expanded: the shipped files have under 100,
# a generous sweep a few hundred. An alias bomb (9 levels of 9 aliases: 9^9 nodes from 700
# bytes) stops here within 10 ms; composing 5 000 nodes of a flat list takes about 0.15 s.
MAX_NODES = 5_000
# Descriptions and expectations are a few hundred characters; a 10 000-character value is
# garbage, and would make every error message quoting it unreadable.
MAX_SCALAR_CHARS = 10_000
# Error messages quote the file's keys and values: keep each message one readable line.
MAX_SHOWN_CHARS = 500

_MERGE_TAG, _VALUE_TAG = "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"
_TOO_BIG = f"larger than {MAX_FILE_BYTES // 1024} KiB (profile and experiment files are a few KB)"


def one_line(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` with control characters escaped and cut to `limit`: a message stays one line."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LocatedError(InputError):
    """One problem in a YAML file, rendered as `file:line: field: message` (exit 2)."""

    def __init__(self, file: str, line: int, field: str, message: str):
        message, field = one_line(message), one_line(field)
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
        return LocatedError(self.file, self.line(path), field_name(self.real_path(path)), message)


_Entry = tuple[yaml.MappingNode, yaml.Node, yaml.Node]  # (mapping, key, value)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _problem(line: int, message: str) -> yaml.MarkedYAMLError:
    return yaml.MarkedYAMLError(problem=message, problem_mark=yaml.Mark("", 0, line - 1, 0, None, None))


def _slot(owner: yaml.Node, slot: int | yaml.Node) -> tuple[int, int]:
    """(owner, position or key node) as a dict key: nodes compare by identity."""
    return id(owner), slot if isinstance(slot, int) else id(slot)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer stops at MAX_DEPTH levels and MAX_NODES nodes, before PyYAML
    recurses too deep or composes a huge tree."""

    def __init__(self, text: str):
        super().__init__(text)
        self.depth = self.composed = 0
        # (parent, position or key node) -> line of an alias there: PyYAML returns the anchored
        # node itself, and with it the anchor's line.
        self.alias_sites: dict[tuple[int, int], int] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        line = event.start_mark.line + 1
        self.composed += 1
        if self.composed > MAX_NODES:
            raise _problem(line, f"more than {MAX_NODES} values")
        if self.depth >= MAX_DEPTH:
            raise _problem(line, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(event, yaml.AliasEvent) and parent is not None and index is not None:
            self.alias_sites[_slot(parent, index)] = line
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def load_source(path: Path | str) -> Source:
    file = str(path)
    try:
        with open(path, "rb") as f:
            # One byte more than allowed tells "too big" without reading all of it.
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise LocatedError(file, 1, "file", f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise LocatedError(file, 1, "file", _TOO_BIG)
    return parse_source(decode(data, file), file)


def decode(data: bytes, file: str) -> str:
    """UTF-8 text (a UTF-8 BOM is dropped); anything else is refused with the line it is on."""
    for bom, name in (
        (codecs.BOM_UTF32_LE, "UTF-32"),
        (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"),
        (codecs.BOM_UTF16_BE, "UTF-16"),
    ):
        if data.startswith(bom):
            raise LocatedError(file, 1, "file", f"{name} text; save the file as UTF-8")
    nul = data.find(b"\0")
    if nul >= 0:
        # UTF-16 without a BOM: ASCII characters alternate with NUL bytes.
        head = data[:64]
        if any(not head[i::2].strip(b"\0") and b"\0" not in head[1 - i :: 2] for i in (0, 1)):
            raise LocatedError(
                file,
                1,
                "file",
                "looks like UTF-16 text (NUL bytes between " "characters); save the file as UTF-8",
            )
        raise LocatedError(
            file, data.count(b"\n", 0, nul) + 1, "file", "binary content (a NUL byte), not YAML text"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise LocatedError(
            file, line, "file", f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as UTF-8"
        ) from None


def parse_source(text: str, file: str = "<string>") -> Source:
    _check_text(text, file)
    try:
        data, lines = _parse(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise LocatedError(file, line, "yaml", _yaml_message(exc)) from None
    except yaml.reader.ReaderError as exc:  # control characters: position is a text index
        line = text.count("\n", 0, exc.position) + 1
        raise LocatedError(file, line, "yaml", str(exc).splitlines()[0]) from None
    except yaml.YAMLError as exc:
        raise LocatedError(file, 1, "yaml", str(exc).splitlines()[0]) from None
    return Source(file, text, data, lines)


def _parse(text: str) -> tuple[Any, dict[PathKey, int]]:
    loader = _Loader(text)  # checks for control characters already
    try:
        node = loader.get_single_node()
        converter = _Converter(loader)
        return (converter.convert(node, ()) if node is not None else None), converter.lines
    finally:
        loader.dispose()


def _check_text(text: str, file: str) -> None:
    """The bounds that need no parsing: size, binary content, line length."""
    if len(text) > MAX_FILE_BYTES:
        raise LocatedError(file, 1, "file", _TOO_BIG)
    nul = text.find("\0")
    if nul >= 0:
        raise LocatedError(
            file, text.count("\n", 0, nul) + 1, "file", "binary content (a NUL byte), not YAML text"
        )
    for number, line in enumerate(text.split("\n"), start=1):
        if len(line) > MAX_LINE_CHARS:
            raise LocatedError(
                file, number, "yaml", f"line is {len(line)} characters long (limit {MAX_LINE_CHARS})"
            )


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    parts = [p for p in (exc.context, exc.problem) if p]
    return "; ".join(parts) or "invalid YAML"


class _Converter:
    """Node tree -> Python data plus the line of every path, counting every node it makes:
    an alias expands its anchor again each time, which is where an alias bomb explodes."""

    def __init__(self, loader: _Loader):
        self.loader = loader
        self.lines: dict[PathKey, int] = {}
        self.nodes = 0
        self.expanding: int | None = None  # the line of the outermost alias being expanded

    def count(self, node: yaml.Node, path: PathKey, n: int = 1) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise _problem(
                self.expanding or _line(node),
                f"more than {MAX_NODES} values once " "aliases are expanded (an alias bomb?)",
            )
        # Depth again: an alias can put a deep anchor deep down, or inside itself.
        if len(path) > MAX_DEPTH:
            raise _problem(
                self.expanding or _line(node),
                f"nested deeper than {MAX_DEPTH} " "levels once aliases are expanded",
            )

    def child(self, owner: yaml.Node, slot: int | yaml.Node, node: yaml.Node, path: PathKey) -> Any:
        """`node` at position `slot` of `owner`: where it is an alias, its line is the
        alias's, not the anchor's."""
        site = self.loader.alias_sites.get(_slot(owner, slot))
        if site is None or self.expanding is not None:
            return self.convert(node, path)
        self.lines.setdefault(path, site)
        self.expanding = site
        try:
            return self.convert(node, path)
        finally:
            self.expanding = None

    def convert(self, node: yaml.Node, path: PathKey) -> Any:
        self.count(node, path)
        self.lines.setdefault(path, _line(node))
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.child(node, i, n, (*path, i)) for i, n in enumerate(node.value)]
        return self.scalar(node)

    def mapping(self, node: yaml.MappingNode, path: PathKey) -> dict[str, Any]:
        own, merged = self.entries(node, path)
        out: dict[str, Any] = {}
        for entry in own:
            key = self.key(entry[1])
            if key in out:
                raise _problem(_line(entry[1]), f"duplicate key '{key}'")
            out[key] = self.value(entry, key, path)
        # `<<: *anchor` merge keys: the mapping's own keys win, then earlier merges.
        for entry in merged:
            key = self.key(entry[1])
            if key not in out:
                out[key] = self.value(entry, key, path)
        return out

    def value(self, entry: _Entry, key: str, path: PathKey) -> Any:
        owner, key_node, value_node = entry
        # The key's line wins: "unknown key" and "wrong value" both point where the key is.
        self.lines[(*path, key)] = _line(key_node)
        return self.child(owner, key_node, value_node, (*path, key))

    def entries(
        self, node: yaml.MappingNode, path: PathKey, merge: yaml.Node | None = None
    ) -> tuple[list[_Entry], list[_Entry]]:
        """The mapping's own (owner, key, value) nodes, and those merged in by `<<` in
        precedence order. PyYAML's flatten_mapping would lose which keys are the mapping's own.
        `merge` is the outermost `<<` key: merges of merges grow exponentially too."""
        own: list[_Entry] = []
        merged: list[_Entry] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                own.append((node, key_node, value_node))
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise _problem(_line(source), "expected a mapping or list of mappings for merging")
                self.count(merge or key_node, (*path, "<<"), len(source.value))
                source_own, source_merged = self.entries(source, (*path, "<<"), merge or key_node)
                merged += source_own + source_merged
        return own, merged

    def key(self, node: yaml.Node) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise _problem(_line(node), f"keys must be strings, not a {node.id}")
        if node.tag == _VALUE_TAG:  # the `=` key, which PyYAML reads as a string
            return node.value
        key = self.scalar(node)
        if not isinstance(key, str):
            raise _problem(_line(node), f"keys must be strings, not {key!r}")
        return key

    def scalar(self, node: yaml.Node) -> Any:
        if len(node.value) > MAX_SCALAR_CHARS:
            raise _problem(
                _line(node), f"a value of {len(node.value)} characters " f"(limit {MAX_SCALAR_CHARS})"
            )
        try:
            return self.loader.construct_object(node, deep=True)
        except (ValueError, OverflowError) as exc:  # 2024-13-01, a 5000-digit integer
            raise _problem(_line(node), f"cannot read {node.value[:40]!r}: {exc}") from None
