"""The client contract, and the client descriptors that say how to call each tool.

A client is an executable in a client image. The runner calls it with a fixed set of
arguments, always the same:

    <command> --url https://server.quicbed/<path> --resolve server.quicbed:443:<address>
              --cacert <CA file> -n 1 --cpu --timeout <seconds> [the variant's options]

and reads the JSON rows it prints on stdout (columns: quicbed/rowschema.py). Exit status: 0
every measurement succeeded, 1 a row carries an error, 2 usage error, UNSUPPORTED_EXIT a valid
request the tool cannot do (no rows, the reason on stderr).

A client is data: clients/<name>/client.yaml, or stacks/<name>/client.yaml for a QUIC stack that
keeps its client and server in one folder (the format: clients/README.md) says its image,
its command, what the experiment file may ask of it (options, their values and defaults), how a
variant is labelled, which workloads it runs, how its options become arguments and which row
columns carry its versions. QUICBED_CLIENT_DIRS (colon-separated) adds clients from outside
the repository, as QUICBED_SERVER_DIRS does servers. This module is the loader: it checks every
descriptor with the one descriptor engine (quicbed/fields.py) when it is imported. A tool
whose descriptor sets `unavailable` is refused by experiment validation, with that reason.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed import rowschema
from quicbed.fields import (
    IMAGE_FIELDS,
    check_fields,
    check_text,
    check_texts,
    check_unique,
    check_whole,
    image_fields,
    load_descriptor_source,
)
from quicbed.fields import (
    descriptor_files as _descriptor_files,
)
from quicbed.paths import STACKS_DIR, read_versions
from quicbed.perfargs import contract_argv
from quicbed.workloads import ANY_GET, WORKLOADS, one_get_kinds
from quicbed.yamlio import PathKey, Source

ENV_DIRS = "QUICBED_CLIENT_DIRS"
DESCRIPTOR = "client.yaml"
SHIPPED_DIR = Path(__file__).resolve().parent
CLIENT_IMAGE = "quicbed/client:dev"  # images/client: the perf tools (the browsers: images/browser)
BROWSER_COMMAND = "browser_perf"  # clients/browser: every browser client's program
UNSUPPORTED_EXIT = 3  # clients/perf/perf.h: PERF_EXIT_UNSUPPORTED


@dataclass(frozen=True)
class Tool:
    """A client tool: its options (name -> allowed values) and how a variant is labelled."""

    name: str
    options: dict[str, tuple[str, ...]]
    defaults: dict[str, str]
    # label/protocol take the variant's resolved options.
    label: str  # str.format template, e.g. "tls{tls}-h{http}"
    protocol: str  # str.format template, e.g. "tls{tls}"
    # The kinds it runs: its descriptor's `workloads:`, with ANY_GET read as every one-GET kind.
    workloads: tuple[str, ...] = field(default_factory=one_get_kinds)
    # Compact spelling in labels: "1.1" -> "1", so "tls1.2-h1".
    short: dict[str, dict[str, str]] = field(default_factory=dict)
    # option -> the tool's flag, in argv order; options without one only label the variant.
    flags: dict[str, str] = field(default_factory=dict)
    # option -> value -> what the flag is given (default: the value itself).
    values: dict[str, dict[str, str]] = field(default_factory=dict)
    # option -> value -> the arguments it becomes, for an option that sets several flags.
    expand: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    image: str = CLIENT_IMAGE
    unavailable: str = ""  # why experiments may not name it yet ("" = it runs)
    # The executable in the image and any fixed arguments of its own ("" = the tool's name).
    command: tuple[str, ...] = ()
    # Seconds a trial spends starting and ending the tool (docker exec, process start, row):
    # for the dry run's estimate; bench/overhead_bench.py and bench/browser_bench.py measure it.
    start_s: float = 0.1
    # What the tool takes of the workload's arguments (the video's duration; the browser also
    # the player's settings): workloads/base.py WorkloadKind.tool_args.
    workload_flags: tuple[str, ...] = ("--duration",)
    # Whether it plays a stream in real time (a player: a trial lasts the media's duration),
    # rather than downloading it as fast as the path gives it: the dry run's estimate asks.
    plays_streams: bool = False
    # Capture (experiment capture:): the flag that takes a key-log path (SSLKEYLOGFILE format)
    # and the one that takes a qlog path (JSON-SEQ, its QUIC connections'); "" = it cannot,
    # and no_qlog says why a QUIC trial of it writes none (the row's capture_missing).
    keylog_flag: str = "--keylog"
    qlog_flag: str = ""
    no_qlog: str = ""
    # The row columns that carry its versions (e.g. tool_version, library).
    reports: tuple[str, ...] = ()
    dockerfile: str | None = None  # relative to the repository; None: a prebuilt image
    on_demand: bool = False  # built when first needed, not by make images (quicbed/fields.py)
    description: str = ""
    order: int = 100  # position in listings
    file: str = ""  # the descriptor it was read from

    @property
    def browser(self) -> bool:
        """A browser (clients/browser): its web trial is a page load over several connections,
        its downloads carry the browser's start and CPU; a perf tool's is one GET."""
        return self.command[:1] == (BROWSER_COMMAND,)

    def capture_argv(self, keylog: str | None, qlog: str | None) -> list[str]:
        """The flags that make the tool write its key log and qlog to these paths (None: not
        asked for); a path the tool cannot write is left out (see no_qlog)."""
        out: list[str] = []
        for flag, path in ((self.keylog_flag, keylog), (self.qlog_flag, qlog)):
            if flag and path:
                out += [flag, path]
        return out

    def argv(
        self,
        url: str,
        resolve: str,
        cacert: str,
        timeout_s: float,
        options: dict[str, str],
        workload_args: dict[str, str] | None = None,
        *,
        repetitions: int = 1,
        cpu: bool = True,
    ) -> list[str]:
        """The contract's arguments, then the variant's options as the tool's flags, then
        what the workload adds that the tool takes (e.g. the video's duration). A trial is one
        measurement with its CPU samples; a bench or test may ask for several in one process
        (`repetitions`), or none of the samples (`cpu=False`: an untimed warm-up)."""
        argv = contract_argv(
            self.command or (self.name,), url, resolve, cacert, timeout_s, repetitions=repetitions, cpu=cpu
        )
        for option, flag in self.flags.items():
            if options.get(option):
                argv += [flag, self.values.get(option, {}).get(options[option], options[option])]
        for option, table in self.expand.items():
            argv += table.get(options.get(option, ""), ())
        for flag, value in (workload_args or {}).items():
            if flag in self.workload_flags:
                argv += [flag, value]
        return argv

    def variant_label(self, options: dict[str, str]) -> str:
        short = {k: self.short.get(k, {}).get(v, v) for k, v in options.items()}
        return self.label.format(**short)

    def variant_protocol(self, options: dict[str, str]) -> str:
        return self.protocol.format(**options)

    def labels(self) -> list[str]:
        """Every label a variant of this tool can have."""
        names = list(self.options)
        return [
            self.variant_label(dict(zip(names, values, strict=True)))
            for values in itertools.product(*(self.options[n] for n in names))
        ]


_REQUIRED = ("image", "command", "label", "protocol", "options")
_OPTIONAL = (
    *IMAGE_FIELDS[1:],
    "order",
    "description",
    "workloads",
    "workload_flags",
    "plays_streams",
    "start_s",
    "capture",
    "reports",
    "unavailable",
)
_OPTION_FIELDS = ("values", "default", "flag", "give", "expand", "short")
_FLAG_RE = re.compile(r"--[a-z0-9][a-z0-9-]*\Z")
_OPTION_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def _values_map(src: Source, path: PathKey, value: Any, keys: list[str]) -> dict[str, Any]:
    """A mapping from some of the option's values (`keys`) to what each stands for."""
    if not isinstance(value, dict):
        raise src.error(path, "must be a mapping of the option's values")
    for key in value:
        if key not in keys:
            raise src.error(
                (*path, str(key)), f"{key!r} is not one of the option's values ({', '.join(keys)})"
            )
    return value


def _label_text(src: Source, path: PathKey, value: Any) -> str:
    """A label part: a string, "" allowed (the value vanishes from the label)."""
    if not isinstance(value, str) or not value.isprintable():
        raise src.error(path, f'must be a one-line string ("" for none), not {value!r}')
    return value


def _option(src: Source, path: PathKey, value: Any, tool: dict[str, Any]) -> None:
    """One entry of options:, added to `tool`'s options/defaults/flags/values/expand/short."""
    name = str(path[-1])
    o = check_fields(src, path, value, ("values",), _OPTION_FIELDS[1:])
    values = check_texts(src, (*path, "values"), o["values"])
    default = check_text(src, (*path, "default"), o.get("default", values[0]))
    if default not in values:
        raise src.error((*path, "default"), f"{default!r} is not one of {', '.join(values)}")
    tool["options"][name], tool["defaults"][name] = tuple(values), default
    if "flag" in o:
        tool["flags"][name] = check_text(src, (*path, "flag"), o["flag"], _FLAG_RE, "a --long-flag")
    if "give" in o:
        if "flag" not in o:
            raise src.error((*path, "give"), "needs flag: (what the flag is given)")
        give = _values_map(src, (*path, "give"), o["give"], values)
        tool["values"][name] = {v: check_text(src, (*path, "give", v), t) for v, t in give.items()}
    if "expand" in o:
        table = _values_map(src, (*path, "expand"), o["expand"], values)
        tool["expand"][name] = {
            v: tuple(check_texts(src, (*path, "expand", v), args)) for v, args in table.items()
        }
    if "short" in o:
        short = _values_map(src, (*path, "short"), o["short"], values)
        tool["short"][name] = {v: _label_text(src, (*path, "short", v), t) for v, t in short.items()}


def _template(src: Source, key: str, text: str, options: dict[str, tuple[str, ...]]) -> str:
    """label/protocol: a str.format template over the option names, tried on every variant."""
    try:
        for combo in itertools.product(*options.values()):
            text.format(**dict(zip(options, combo, strict=True)))
    except (KeyError, IndexError, ValueError) as exc:
        raise src.error(
            (key,), f"{text!r} is not a template over the options ({', '.join(options)}): {exc}"
        ) from None
    return text


def _capture(src: Source, value: Any, name: str) -> dict[str, str]:
    """capture: {keylog: FLAG, qlog: FLAG} or {keylog: FLAG, no_qlog: why}."""
    if value is None:
        return {"keylog_flag": "", "no_qlog": f"{name}: its descriptor says of no capture"}
    c = check_fields(src, ("capture",), value, (), ("keylog", "qlog", "no_qlog"))
    if ("qlog" in c) == ("no_qlog" in c):
        raise src.error(
            ("capture",), "give qlog (the flag that takes a qlog path) or no_qlog (why it writes none)"
        )
    out = {"keylog_flag": "", "qlog_flag": "", "no_qlog": ""}
    for key, slot in (("keylog", "keylog_flag"), ("qlog", "qlog_flag")):
        if key in c:
            out[slot] = check_text(src, ("capture", key), c[key], _FLAG_RE, "a --long-flag")
    if "no_qlog" in c:
        out["no_qlog"] = check_text(src, ("capture", "no_qlog"), c["no_qlog"])
    return out


def load_descriptor(path: Path | str, versions: dict[str, str] | None = None) -> Tool:
    """The Tool of one client.yaml; its name is its directory's."""
    versions = read_versions() if versions is None else versions
    src, name = load_descriptor_source(path, "client")
    d = check_fields(src, (), src.data, _REQUIRED, _OPTIONAL)
    built = image_fields(src, d, versions)
    if not isinstance(d["options"], dict):
        raise src.error(("options",), "must be a mapping of option name: {values: [...], ...}")
    tool: dict[str, Any] = {k: {} for k in ("options", "defaults", "flags", "values", "expand", "short")}
    for option, spec in d["options"].items():
        if not isinstance(option, str) or not _OPTION_NAME.match(option) or option == "tool":
            raise src.error(
                ("options", str(option)), "an option's name is lowercase letters, digits and '_' (not tool)"
            )
        _option(src, ("options", option), spec, tool)
    label = _template(src, "label", check_text(src, ("label",), d["label"]), tool["options"])
    protocol = _template(src, "protocol", check_text(src, ("protocol",), d["protocol"]), tool["options"])
    for combo in itertools.product(*tool["options"].values()):
        made = protocol.format(**dict(zip(tool["options"], combo, strict=True)))
        if made not in rowschema.PROTOCOLS:
            raise src.error(("protocol",), f"gives {made!r}, not one of {', '.join(rowschema.PROTOCOLS)}")
    reports = (
        tuple(check_texts(src, ("reports",), d["reports"], tuple(rowschema.COLUMNS)))
        if "reports" in d
        else ()
    )
    return Tool(
        name=name,
        options=tool["options"],
        defaults=tool["defaults"],
        label=label,
        protocol=protocol,
        workloads=_workloads(src, d.get("workloads", [ANY_GET])),
        short=tool["short"],
        flags=tool["flags"],
        values=tool["values"],
        expand=tool["expand"],
        image=built.image,
        unavailable=check_text(src, ("unavailable",), d["unavailable"]) if "unavailable" in d else "",
        command=tuple(check_texts(src, ("command",), d["command"])),
        start_s=_seconds(src, d.get("start_s", 0.1)),
        plays_streams=_flag(src, "plays_streams", d.get("plays_streams", False)),
        workload_flags=tuple(check_texts(src, ("workload_flags",), d.get("workload_flags", ["--duration"]))),
        **_capture(src, d.get("capture"), name),
        reports=reports,
        dockerfile=built.dockerfile,
        on_demand=built.on_demand,
        description=check_text(src, ("description",), d["description"]) if "description" in d else "",
        order=check_whole(src, ("order",), d.get("order", 100), 0, 10_000),
        file=str(path),
    )


def _flag(src: Source, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise src.error((key,), f"true or false, not {value!r}")
    return value


def _workloads(src: Source, listed: Any) -> tuple[str, ...]:
    """The kinds a descriptor's `workloads:` names, in its order, ANY_GET read in its place as
    every kind whose trial is one GET (workloads/base.py one_get)."""
    kinds: list[str] = []
    for name in check_texts(src, ("workloads",), listed, (ANY_GET, *WORKLOADS)):
        kinds += [kind for kind in (one_get_kinds() if name == ANY_GET else (name,)) if kind not in kinds]
    return tuple(kinds)


def _seconds(src: Source, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 600:
        raise src.error(("start_s",), f"must be a number of seconds from 0 to 600, not {value!r}")
    return float(value)


def descriptor_files(dirs: str | None = None) -> list[Path]:
    """clients/*/client.yaml, stacks/*/client.yaml, then those of `dirs` (default:
    $QUICBED_CLIENT_DIRS)."""
    return _descriptor_files((SHIPPED_DIR, STACKS_DIR), DESCRIPTOR, ENV_DIRS, dirs)


def load_clients(dirs: str | None = None, versions: dict[str, str] | None = None) -> dict[str, Tool]:
    """Every described client, by name, in `order` (then discovery order)."""
    versions = read_versions() if versions is None else versions
    found = [load_descriptor(file, versions) for file in descriptor_files(dirs)]
    check_unique(((Path(t.file), t.name) for t in found), "client")
    return {t.name: t for t in sorted(found, key=lambda t: t.order)}


TOOLS: dict[str, Tool] = load_clients()


def get_tool(name: str) -> Tool:
    return TOOLS[name]


def tool_argv(
    tool: str,
    path: str,
    address: str,
    *,
    options: dict[str, str] | None = None,
    timeout_s: float = 30,
    workload_args: dict[str, str] | None = None,
    repetitions: int = 1,
    cpu: bool = True,
) -> list[str]:
    """The tool's argv for GETs of `path` from the testbed's server at `address`: its Tool.argv
    with the name, address and CA every client container holds, so the runner, the benches and
    the tests call a tool one way."""
    # The servers' layer is below this one; imported here so that loading the client
    # registry (python -m quicbed.clients list) loads no server descriptor.
    from quicbed.servers.testbed import CLIENT_PKI, SERVER_NAME

    return get_tool(tool).argv(
        f"https://{SERVER_NAME}/{path}",
        f"{SERVER_NAME}:443:{address}",
        f"{CLIENT_PKI}/ca.pem",
        timeout_s,
        options or {},
        workload_args,
        repetitions=repetitions,
        cpu=cpu,
    )


def page_argv(
    tool: str,
    url: str,
    resolves: list[str],
    *,
    options: dict[str, str] | None = None,
    timeout_s: float = 30,
    workload_args: dict[str, str] | None = None,
) -> list[str]:
    """The tool's argv for a recorded page's landing document at `url` (workloads/replay.py):
    the contract's, with the landing origin's --resolve; a browser's then one --resolve per
    other origin of the page, each name it meets so mapped. A perf tool GETs the document
    alone, from the first."""
    from quicbed.servers.testbed import CLIENT_PKI

    spec = get_tool(tool)
    first, *others = resolves
    argv = spec.argv(url, first, f"{CLIENT_PKI}/ca.pem", timeout_s, options or {}, workload_args)
    return argv + [arg for resolve in others for arg in ("--resolve", resolve)] if spec.browser else argv
