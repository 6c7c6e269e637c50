"""Field checks with located errors, for the experiment schema and inline link specs.

Each takes the Source and the field's path, returns the value as its type, or raises the
Source's one-line `file:line: field: message` error.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from quicbed.yamlio import PathKey, Source


def check_mapping(
    src: Source, path: PathKey, value: Any, allowed: set[str] | None, required: set[str]
) -> None:
    """A mapping with only `allowed` keys (None: any) and all `required` ones."""
    if not isinstance(value, dict):
        raise src.error(path, f"expected a mapping, got {_kind(value)}")
    for key in value:
        if allowed is not None and key not in allowed:
            raise src.error((*path, key), f"unknown key{_suggest(key, sorted(allowed))}")
    missing = sorted(required - set(value))
    if missing:
        raise src.error(path, f"missing required key '{missing[0]}'")


def check_str(src: Source, path: PathKey, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise src.error(path, f"expected a non-empty string, got {_kind(value)}")
    return value


def check_int(src: Source, path: PathKey, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise src.error(path, f"expected an integer, got {_kind(value)}")
    if not low <= value <= high:
        raise src.error(path, f"{value} is out of range [{low}, {high}]")
    return value


def check_number(src: Source, path: PathKey, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise src.error(path, f"expected a number, got {_kind(value)}")
    if not low <= value <= high:
        raise src.error(path, f"{value} is out of range [{low:g}, {high:g}]")
    return float(value)


def check_choice(src: Source, path: PathKey, value: Any, choices, what: str) -> str:
    # YAML reads `tls: 1.3` as a float and `http: 2` as an int; accept them as their spelling.
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    if not isinstance(text, str) or text not in choices:
        shown = repr(text) if isinstance(text, str) else _kind(value)
        raise src.error(path, f"unknown {what} {shown}{_suggest(str(text), choices)}")
    return text


def check_list(src: Source, path: PathKey, value: Any, item, allow_empty: bool = False) -> list:
    """A list (a lone scalar counts as a list of one), checked item by item, no duplicates."""
    items = value if isinstance(value, list) else [value]
    if isinstance(value, dict) or value is None:
        raise src.error(path, f"expected a list, got {_kind(value)}")
    if not items and not allow_empty:
        raise src.error(path, "must not be empty")
    paths = [(*path, i) for i in range(len(items))] if isinstance(value, list) else [path]
    out = [item(p, v) for p, v in zip(paths, items, strict=True)]
    for i, v in enumerate(out):
        if v in out[:i]:
            raise src.error(paths[i], f"duplicate value {items[i]!r}")
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict | list):
        return "a mapping" if isinstance(value, dict) else "a list"
    return f"{type(value).__name__} {value!r}"


def _suggest(word: str, choices: Iterable[str]) -> str:
    """A short list is shown whole; a long one only as its closest match, if any."""
    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=1) if len(choices) > 8 else []
    return f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(choices) or 'none'})"
