"""The experiment file format (see experiments/README.md), validated with located errors.

`load_experiment(path)` returns an `Experiment` or raises `ExperimentError` whose str() is one
line `file:line: field: message`. Validation is exhaustive but stops at the first problem.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quicbed.yamlio import LocatedError as ExperimentError
from quicbed.yamlio import PathKey, Source, load_source, parse_source

from . import links
from .expectations import Expectation, compile_expectation
from .links import Link
from .registry import (
    CLOUD_FILES,
    PASSTHROUGH_PREFIXES,
    SERVERS,
    TOOLS,
    VIDEO_MODES,
    WEB_OBJECTS,
    variant_label,
    variant_protocol,
)

ORDERS = ("interleaved", "blocked", "shuffled")
_TOP_KEYS = {
    "name",
    "description",
    "profiles",
    "sweep",
    "servers",
    "clients",
    "workload",
    "repetitions",
    "order",
    "seed",
    "timeout_s",
    "expect",
    "quick",
}
_REQUIRED = {"name", "profiles", "servers", "clients", "workload"}
# kind -> (key listing what to fetch, the registry it names, what it is called, default or None)
_WORKLOADS: dict[str, tuple[str, Any, str, list[str] | None]] = {
    "web": ("objects", WEB_OBJECTS, "object", ["index.html"]),
    "cloud": ("files", CLOUD_FILES, "file", None),
    "video": ("modes", VIDEO_MODES, "video mode", ["progressive"]),
}


@dataclass(frozen=True)
class ClientVariant:
    tool: str
    options: dict[str, str]
    label: str  # e.g. "tls1.3-h2", "quic-h3"
    protocol: str  # "tls1.2" | "tls1.3" | "quic"


@dataclass(frozen=True)
class Workload:
    kind: str  # web | cloud | video
    objects: tuple[str, ...]  # web objects, cloud file sizes, or video modes
    duration_s: float | None = None  # video only


@dataclass
class Experiment:
    name: str
    file: str
    text: str  # the file's content, for the manifest
    profiles: list[Link]  # the topology's Profile objects, validated
    sweep: dict[str, list[Any]]
    servers: list[str]
    clients: list[ClientVariant]
    workload: Workload
    repetitions: int = 20
    order: str = "interleaved"
    seed: int = 1
    timeout_s: float = 120.0
    expect: list[Expectation] = field(default_factory=list)
    description: str = ""
    quick: bool = False

    def matrix_hash(self) -> str:
        """Identifies what the matrix contains, so --resume refuses an edited experiment."""
        parts = {k: v for k, v in asdict(self).items() if k not in ("file", "text", "expect")}
        blob = json.dumps(parts, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_experiment(path: Path | str, quick: bool = False) -> Experiment:
    return from_source(load_source(path), quick)


def parse_experiment(text: str, file: str = "<string>", quick: bool = False) -> Experiment:
    return from_source(parse_source(text, file), quick)


def from_source(src: Source, quick: bool = False) -> Experiment:
    text = src.text
    if src.data is None:
        raise src.error((), "the file is empty")
    check_mapping(src, (), src.data, _TOP_KEYS, _REQUIRED)
    exp = _build(src, text)  # validates the plain experiment even when --quick is asked for
    if "quick" in src.data:
        check_mapping(src, ("quick",), src.data["quick"], _TOP_KEYS - {"name", "quick"}, set())
        quick_exp = _build(src.overlay("quick"), text)
        if quick:
            quick_exp.quick = True
            return quick_exp
    return exp


def _build(src: Source, text: str) -> Experiment:
    d = src.data
    name = check_str(src, ("name",), d["name"])
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise src.error(("name",), "use letters, digits, '-', '_' and '.' (it names run dirs)")
    workload = _workload(src, d["workload"])
    profiles = _profiles(src, d["profiles"])
    exp = Experiment(
        name=name,
        file=src.file,
        text=text,
        profiles=profiles,
        sweep=_sweep(src, d.get("sweep", {}), profiles),
        servers=check_list(src, ("servers",), d["servers"], lambda p, v: _server(src, p, v)),
        clients=_clients(src, d["clients"], workload.kind),
        workload=workload,
        description=str(d.get("description") or ""),
    )
    if "repetitions" in d:
        exp.repetitions = check_int(src, ("repetitions",), d["repetitions"], 1, 100_000)
    if "order" in d:
        exp.order = check_choice(src, ("order",), d["order"], ORDERS, "order")
    if "seed" in d:
        exp.seed = check_int(src, ("seed",), d["seed"], 0, 2**63)
    if "timeout_s" in d:
        exp.timeout_s = check_number(src, ("timeout_s",), d["timeout_s"], 0.1, 86_400)
    exp.expect = check_list(
        src, ("expect",), d.get("expect", []), lambda p, v: _expect(src, p, v), allow_empty=True
    )
    return exp


# --- generic checks, shared with links.py ----------------------------------------------------


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
    return (
        f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(choices) or 'none'})"
    )


# --- sections -----------------------------------------------------------------------------------


def _profiles(src: Source, value: Any) -> list[Link]:
    def one(path: PathKey, spec: Any) -> Link:
        if isinstance(spec, dict):
            return links.parse_link(src, path, spec)
        name = check_choice(src, path, spec, links.available_profiles(), "profile")
        return links.resolve_profile(name)

    profiles = check_list(src, ("profiles",), value, one)
    names = [p.name for p in profiles]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise src.error(("profiles", i), f"duplicate profile name '{name}'")
    return profiles


def _sweep(src: Source, value: Any, profiles: list[Link]) -> dict[str, list[Any]]:
    check_mapping(src, ("sweep",), value, None, set())
    out = {}
    for axis, values in value.items():
        path = ("sweep", axis)
        param = links.axis_param(axis)
        if param is None and not axis.startswith(PASSTHROUGH_PREFIXES):
            raise src.error(
                path,
                f"unknown sweep axis (link parameters: {', '.join(links.LINK_AXES)}, "
                "optionally with down./up.; or server.<name> / client.<name>)",
            )
        if param:
            out[axis] = check_list(
                src,
                path,
                values,
                lambda p, v, a=axis: links.check_sweep_value(src, p, a, v, profiles),
            )
        else:
            out[axis] = check_list(src, path, values, lambda p, v: _scalar(src, p, v))
    _check_sweep_overlap(src, list(out))
    return out


def _check_sweep_overlap(src: Source, axes: list[str]) -> None:
    """Two axes must not set the same parameter (loss_pct and down.loss_pct; rtt_ms and
    delay_ms): the condition would depend on key order."""
    owner: dict[tuple[str, str], str] = {}
    for axis in axes:
        param = links.axis_param(axis)
        if param is None:
            continue
        param = "delay_ms" if param == "rtt_ms" else param
        for direction in [axis.split(".")[0]] if "." in axis else ["down", "up"]:
            if (direction, param) in owner:
                raise src.error(
                    ("sweep", axis),
                    f"sets the {direction} {param}, as {owner[direction, param]} already does",
                )
            owner[direction, param] = axis


def _scalar(src: Source, path: PathKey, value: Any) -> Any:
    if isinstance(value, dict | list) or value is None:
        raise src.error(path, f"expected a plain value, got {_kind(value)}")
    return value


def _server(src: Source, path: PathKey, value: Any) -> str:
    return check_choice(src, path, value, SERVERS, "server")


def _clients(src: Source, value: Any, kind: str) -> list[ClientVariant]:
    entries = check_list(src, ("clients",), value, lambda p, v: _client_entry(src, p, v, kind))
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        for v in entry:
            if v.label in seen:
                raise src.error(("clients", i), f"client variant '{v.label}' appears twice")
            seen.add(v.label)
    return [v for entry in entries for v in entry]


def _client_entry(src: Source, path: PathKey, value: Any, kind: str) -> tuple[ClientVariant, ...]:
    """One `clients:` entry; list-valued options expand into one variant per combination."""
    if isinstance(value, str):  # `- quic_perf` is short for `- {tool: quic_perf}`
        value = {"tool": value}
    check_mapping(src, path, value, None, {"tool"})
    name = check_choice(src, (*path, "tool"), value["tool"], TOOLS, "client tool")
    tool = TOOLS[name]
    check_mapping(src, path, value, {"tool", *tool.options}, set())
    if kind not in tool.workloads:
        raise src.error(
            (*path, "tool"),
            f"{name} cannot run the {kind} workload " f"(it runs: {', '.join(tool.workloads)})",
        )
    choices = {
        opt: check_list(
            src,
            (*path, opt),
            value.get(opt, tool.defaults[opt]),
            lambda p, v, o=opt: check_choice(src, p, v, tool.options[o], o),
        )
        for opt in tool.options
    }
    combos = itertools.product(*choices.values())
    return tuple(_variant(name, dict(zip(choices, c, strict=True))) for c in combos)


def _variant(tool_name: str, options: dict[str, str]) -> ClientVariant:
    tool = TOOLS[tool_name]
    return ClientVariant(
        tool_name, options, variant_label(tool, options), variant_protocol(tool, options)
    )


def _workload(src: Source, value: Any) -> Workload:
    path = ("workload",)
    check_mapping(src, path, value, None, {"kind"})
    kind = check_choice(src, (*path, "kind"), value["kind"], _WORKLOADS, "workload kind")
    key, choices, what, default = _WORKLOADS[kind]
    check_mapping(
        src,
        path,
        value,
        {"kind", key} | ({"duration_s"} if kind == "video" else set()),
        set() if default else {key},
    )
    objects = check_list(
        src,
        (*path, key),
        value.get(key, default),
        lambda p, v: check_choice(src, p, v, choices, what),
    )
    duration = None
    if kind == "video":
        duration = check_number(src, (*path, "duration_s"), value.get("duration_s", 180), 1, 86_400)
    return Workload(kind, tuple(objects), duration)


def _expect(src: Source, path: PathKey, value: Any) -> Expectation:
    text = check_str(src, path, value)
    try:
        return compile_expectation(text, src.line(path))
    except ValueError as exc:
        raise src.error(path, str(exc)) from None


__all__ = ["Experiment", "ExperimentError", "load_experiment", "parse_experiment"]
