"""The one descriptor engine: field checks with located errors, and finding descriptors.

Every YAML file quicbed reads by hand is checked here: experiment files and inline link specs
(experiments/schema.py, links.py), server descriptors (servers/<name>/server.yaml) and client
descriptors (clients/<name>/client.yaml). Each check takes the Source and the field's path,
returns the value as its type, or raises the Source's one-line `file:line: field: message`
error (yamlio.LocatedError), never a traceback.

Descriptors (a directory per server or client, its name the thing's name) are found by
`descriptor_files`: the shipped ones (servers/ or clients/, then the stack folders of stacks/,
each holding a server.yaml, a client.yaml or both), then those of a colon-separated environment
variable (QUICBED_SERVER_DIRS, QUICBED_CLIENT_DIRS; a stack folder may be named in both).
`image_fields` reads the image block both kinds share (image, version_key or version,
dockerfile).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quicbed.errors import InputError
from quicbed.paths import REPO
from quicbed.yamlio import LocatedError, PathKey, Source, load_source


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


# ---------------------------------------------------------------- descriptor fields

NAME = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*\Z")
IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@-]*\Z")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
ENV_KEY = re.compile(r"[A-Z][A-Z0-9_]*\Z")


def kind_word(value: Any) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "empty",
    }.get(type(value), "a value")


def check_fields(
    src: Source, path: PathKey, value: Any, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A mapping of exactly these fields: every required one, any of the optional ones."""
    if not isinstance(value, dict):
        raise src.error(path, f"must be a mapping of fields, not {kind_word(value)}")
    known = (*required, *optional)
    for key in value:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known)}"
            raise src.error((*path, key), f"unknown field; {hint}")
    for key in required:
        if key not in value:
            raise src.error((*path, key), "missing (required)")
    return value


def check_text(
    src: Source, path: PathKey, value: Any, pattern: re.Pattern[str] | None = None, what: str = ""
) -> str:
    """A non-empty one-line string (a YAML number is refused: quote it), matching `pattern`."""
    if not isinstance(value, str):
        hint = "; quote it" if isinstance(value, int | float) and not isinstance(value, bool) else ""
        raise src.error(path, f"must be a string, not {kind_word(value)} ({value!r}){hint}")
    if not value.strip() or not value.isprintable():
        raise src.error(path, "must be a non-empty one-line string")
    if pattern and not pattern.match(value):
        raise src.error(path, f"{value!r} is not {what}")
    return value


def check_texts(src: Source, path: PathKey, value: Any, choices: tuple[str, ...] = ()) -> list[str]:
    """A non-empty list of distinct strings, each one of `choices` if given."""
    if not isinstance(value, list) or not value:
        raise src.error(path, f"must be a non-empty list, not {kind_word(value)}")
    out = [check_text(src, (*path, i), v) for i, v in enumerate(value)]
    for i, v in enumerate(out):
        if choices and v not in choices:
            raise src.error((*path, i), f"{v!r} is not one of {', '.join(choices)}")
        if v in out[:i]:
            raise src.error((*path, i), f"{v!r} is listed twice")
    return out


def check_whole(src: Source, path: PathKey, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise src.error(path, f"must be a whole number from {low} to {high}, not {value!r}")
    return value


def check_text_map(src: Source, path: PathKey, value: Any) -> dict[str, str]:
    """A mapping of name: text."""
    if not isinstance(value, dict):
        raise src.error(path, f"must be a mapping of name: text, not {kind_word(value)}")
    for key, v in value.items():
        check_text(src, (*path, key), v)
    return dict(value)


# ---------------------------------------------------------------- descriptor files


def load_descriptor_source(path: Path | str, what: str, name: str | None = None) -> tuple[Source, str]:
    """A descriptor's Source (a mapping) and its name: `name`, by default the directory's
    (symlinks not followed); `what` ("server", "client") heads file-wide errors."""
    file = str(path)
    name = Path(os.path.abspath(path)).parent.name if name is None else name
    if not NAME.match(name):
        raise LocatedError(
            file,
            1,
            "name",
            f"the directory's name {name!r} is the {what}'s name: "
            "use lowercase letters, digits and single '-' or '_'",
        )
    src = load_source(path)
    if src.data is None:
        raise LocatedError(file, 1, what, "the file is empty")
    if not isinstance(src.data, dict):
        raise LocatedError(file, 1, what, f"must be a mapping of fields, not {kind_word(src.data)}")
    return src, name


def descriptor_files(
    shipped: Iterable[Path], filename: str, env_var: str, dirs: str | None = None
) -> list[Path]:
    """*/filename of each shipped directory in turn, then those of `dirs` (default: $env_var,
    colon-separated; each entry is a descriptor's directory or a directory of them)."""
    files = [file for top in shipped for file in sorted(top.glob(f"*/{filename}"))]
    dirs = os.environ.get(env_var, "") if dirs is None else dirs
    for entry in dirs.split(":"):
        if not entry:
            continue
        d = Path(entry)
        if not d.is_dir():
            raise InputError(f"{env_var}: {entry}: no such directory")
        if (d / filename).is_file():
            files.append(d / filename)
            continue
        found = sorted(d.glob(f"*/{filename}"))
        if not found:
            raise InputError(
                f"{env_var}: {entry}: holds no {filename} (neither "
                f"{entry}/{filename} nor {entry}/*/{filename})"
            )
        files += found
    return files


@dataclass(frozen=True)
class ImageFields:
    """The image block of a descriptor: the tag to run, its version and how it is built."""

    image: str  # repository:tag
    version: str
    version_key: str | None  # the versions.env key `version` comes from
    dockerfile: str | None  # relative to the repository; None: a prebuilt image
    # Built the first time a run or a test needs it, not by `make images`: a stack compiled
    # from source (minutes on 2 cores) that only some experiments use.
    on_demand: bool = False


IMAGE_FIELDS = ("image", "version_key", "version", "dockerfile", "on_demand")


def image_fields(src: Source, d: dict[str, Any], versions: dict[str, str]) -> ImageFields:
    """`image:` (a repository, tagged with the version, or repo:tag as it is), the version
    from `version_key:` (versions.env) or a literal `version:`, and an optional `dockerfile:`
    in the repository (none: a prebuilt image)."""
    image = check_text(src, ("image",), d["image"], IMAGE, "an image name (lowercase)")
    version_key = d.get("version_key")
    if ("version_key" in d) == ("version" in d):
        raise src.error(
            ("version_key",),
            "give version_key (a versions.env key, where the "
            "shipped versions are pinned) or version (a literal), not "
            f"{'both' if 'version' in d else 'neither'}",
        )
    if version_key is not None:
        check_text(src, ("version_key",), version_key, ENV_KEY, "a versions.env key")
        if version_key not in versions:
            raise src.error(
                ("version_key",),
                f"{version_key} is not in versions.env (pin it "
                f"there as {version_key}=..., or give a literal version:)",
            )
        version = versions[version_key]
        where = f"versions.env's {version_key}={version!r}"
    else:
        version = check_text(src, ("version",), d["version"])
        where = f"version {version!r}"
    tagged = any(c in image.rsplit("/", 1)[-1] for c in ":@")
    if not tagged and not TAG.match(version):
        raise src.error(
            ("version_key",) if version_key else ("version",),
            f"{where} cannot be an image tag (letters, digits, '_', '.', '-')",
        )
    dockerfile = d.get("dockerfile")
    if dockerfile is not None:
        check_text(src, ("dockerfile",), dockerfile)
        rel = Path(dockerfile)
        if rel.is_absolute() or ".." in rel.parts or not (REPO / rel).is_file():
            raise src.error(
                ("dockerfile",),
                f"{dockerfile!r} is not a file in the repository "
                "(give a path like images/<name>/Dockerfile, or leave dockerfile out "
                "for a prebuilt image)",
            )
    on_demand = d.get("on_demand", False)
    if not isinstance(on_demand, bool):
        raise src.error(("on_demand",), "true or false")
    if on_demand and dockerfile is None:
        raise src.error(("on_demand",), "only an image built here (with a dockerfile:) is built on demand")
    return ImageFields(image if tagged else f"{image}:{version}", version, version_key, dockerfile, on_demand)


def check_unique(files: Iterable[tuple[Path, str]], what: str) -> None:
    """Two descriptors naming the same thing: the second is refused, naming the first."""
    seen: dict[str, Path] = {}
    for file, name in files:
        if name in seen:
            raise LocatedError(str(file), 1, "name", f"{what} {name!r} is also described by {seen[name]}")
        seen[name] = file


# ---------------------------------------------------------------- listing (python -m ...)


def list_main(prog: str, entries: list[dict[str, Any]], argv: list[str] | None = None) -> int:
    """`python -m quicbed.servers list [--json]` (and clients): what images/build.sh and
    doctor ask instead of reading YAML themselves. Plain: one
    `name<TAB>image<TAB>dockerfile<TAB>on-demand` line each (`-` for a prebuilt image, and for
    an image `make images` builds); --json: every entry's fields."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog=prog, description="list the described " + prog.split(".")[-1])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="every descriptor, shipped ones first")
    listing.add_argument("--json", action="store_true", help="a JSON list of objects")
    args = parser.parse_args(argv)
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    for e in entries:
        print(
            f"{e['name']}\t{e['image']}\t{e['dockerfile'] or '-'}\t{'on-demand' if e['on_demand'] else '-'}"
        )
    return 0
