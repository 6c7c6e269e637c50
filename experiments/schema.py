"""The experiment file format (see experiments/README.md), validated with located errors.

`load_experiment(path)` returns an `Experiment` or raises `ExperimentError` whose str() is one
line `file:line: field: message`. Validation is exhaustive but stops at the first problem.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quicbed import limits, rowschema
from quicbed.analysis.decisions import (
    DEFAULT_ALPHA,
    PER,
    PER_CELL,
    TCP,
    WHERE_AXES,
    AutoRepetitions,
    Decide,
    axis_value,
    floor_rounds,
    member,
)
from quicbed.analysis.expectations import Expectation, client_labels, compile_expectation
from quicbed.fields import (
    check_choice,
    check_int,
    check_list,
    check_mapping,
    check_number,
    check_str,
)
from quicbed.rowschema import CAPTURE_KINDS
from quicbed.servers import pairing
from quicbed.workloads import WORKLOADS, Setting, recorded, replay
from quicbed.workloads.har import HarError
from quicbed.yamlio import LocatedError as ExperimentError
from quicbed.yamlio import PathKey, Source, load_source, parse_source

from . import links
from .cross import CrossFlow, parse_cross
from .links import Link
from .registry import PARAM_AXES, SERVERS, TOOLS

ORDERS = ("interleaved", "blocked", "shuffled")
# A run id is the name, its UTC time and suffixes (-shard12of16, -merged, -2): within 128.
MAX_NAME_CHARS = 80
VIDEO_TIMEOUT_MARGIN_S = 60.0  # a video trial's default timeout: what it plays, plus this
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
    "capture",
    "cross",
    "decide",
    "parallel",
}
_REQUIRED = {"name", "profiles", "servers", "clients", "workload"}


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
    # The workload's client settings (video: the player's), (name, value) pairs in file order.
    settings: tuple[tuple[str, Any], ...] = ()
    # Recorded pages replayed (`pages: [{har: FILE}]`); then `objects` are their names.
    pages: tuple[recorded.RecordedPage, ...] = ()

    def page(self, name: str) -> recorded.RecordedPage | None:
        """The recorded page an object names (None for the testbed's content). From the
        experiment itself, not the process's registry: a cluster's worker gets it pickled."""
        return next((page for page in self.pages if page.name == name), None)


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
    # What each trial captures beside its row (rowschema.CAPTURE_KINDS): qlog, pcap, keys.
    capture: tuple[str, ...] = ()
    # Competing flows on each trial's bottleneck (experiments/cross.py).
    cross: tuple[CrossFlow, ...] = ()
    # Comparisons decided as the run goes (analysis/decisions.py), and with `auto`, the rounds
    # run until they are: `repetitions` is then its max.
    decide: tuple[Decide, ...] = ()
    auto: AutoRepetitions | None = None
    # Paths at once when the command does not say (--parallel): "1", a number, or "auto"
    # (from the workload's measured CPU and the host's cores: experiments/parallel.py).
    parallel: str = "1"

    def matrix_hash(self) -> str:
        """Identifies what the matrix contains, so --resume refuses an edited experiment.
        Capture is left out: it changes what is kept of a trial, not which trials run."""
        skip = ("file", "text", "expect", "capture", "parallel")
        parts = {k: v for k, v in asdict(self).items() if k not in skip}
        # Left out when unused, so a run started before they existed still resumes.
        for key in ("decide", "auto"):
            if not parts[key]:
                del parts[key]
        if not parts["workload"]["pages"]:
            del parts["workload"]["pages"]
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
    if len(name) > MAX_NAME_CHARS or rowschema.run_id_problem(name):  # run ids: rowschema.RUN_ID_PATTERN
        raise src.error(
            ("name",),
            f"start with an ASCII letter or digit, without '..', at most {MAX_NAME_CHARS} "
            "characters (it names run dirs)",
        )
    workload = _workload(src, d["workload"])
    profiles = _profiles(src, d["profiles"])
    indexed = _clients(src, d["clients"], workload.kind)
    clients = [v for _, v in indexed]
    _check_settings_are_taken(src, workload, clients)
    server_names = check_list(src, ("servers",), d["servers"], lambda p, v: _server(src, p, v, workload))
    _check_one_site(src, server_names, workload)
    _check_spoken(src, server_names, indexed)
    exp = Experiment(
        name=name,
        file=src.file,
        text=text,
        profiles=profiles,
        sweep=_sweep(src, d.get("sweep", {}), profiles),
        servers=server_names,
        clients=clients,
        workload=workload,
        description=str(d.get("description") or ""),
    )
    if isinstance(d.get("repetitions"), dict):
        exp.auto = _auto(src, d["repetitions"])
        exp.repetitions = exp.auto.max
    elif "repetitions" in d:
        exp.repetitions = check_int(src, ("repetitions",), d["repetitions"], 1, 100_000)
    if "order" in d:
        exp.order = check_choice(src, ("order",), d["order"], ORDERS, "order")
    if "decide" in d:
        exp.decide = tuple(
            check_list(src, ("decide",), d["decide"], lambda p, v: _decide(src, p, v, clients, workload, exp))
        )
    _check_sequential(src, exp)
    if "seed" in d:
        exp.seed = check_int(src, ("seed",), d["seed"], 0, 2**63)
    if "parallel" in d:
        exp.parallel = _parallel(src, d["parallel"])
    if "timeout_s" in d:
        exp.timeout_s = check_number(src, ("timeout_s",), d["timeout_s"], 0.1, 86_400)
    played = workload.duration_s
    if played and "timeout_s" not in d:
        exp.timeout_s = played + VIDEO_TIMEOUT_MARGIN_S
    elif played and exp.timeout_s <= played:
        raise src.error(
            ("timeout_s",),
            f"{exp.timeout_s:g} s is not longer than the "
            f"{played:g} s of video each trial plays (workload.duration_s)",
        )
    _check_trials(src, exp)
    if "capture" in d:
        exp.capture = _capture(src, d["capture"])
    if "cross" in d:
        exp.cross = parse_cross(src, d["cross"], _max_down_mbit(exp), exp.timeout_s)
        _check_cross_spoken(src, exp)
    exp.expect = check_list(
        src, ("expect",), d.get("expect", []), lambda p, v: _expect(src, p, v), allow_empty=True
    )
    return exp


def _auto(src: Source, value: dict[str, Any]) -> AutoRepetitions:
    check_mapping(src, ("repetitions",), value, {"auto"}, {"auto"})
    path: PathKey = ("repetitions", "auto")
    auto = value["auto"]
    check_mapping(src, path, auto, {"min", "max", "alpha", "per"}, {"min", "max"})
    low = check_int(src, (*path, "min"), auto["min"], 1, 100_000)
    high = check_int(src, (*path, "max"), auto["max"], low, 100_000)
    alpha = DEFAULT_ALPHA
    if "alpha" in auto:
        alpha = check_number(src, (*path, "alpha"), auto["alpha"], 1e-6, 0.2)
    per = PER_CELL
    if "per" in auto:
        per = check_choice(src, (*path, "per"), auto["per"], PER, "per")
    return AutoRepetitions(low, high, alpha, per)


def _decide(
    src: Source, path: PathKey, value: Any, clients: list[ClientVariant], workload: Workload, exp: Experiment
) -> Decide:
    keys = {"metric", "a", "b", "similar_within", "b_times", "objects", "where"}
    check_mapping(src, path, value, keys, {"metric", "a", "b"})
    metric = check_choice(src, (*path, "metric"), value["metric"], rowschema.DECIDABLE, "metric")
    groups = [*rowschema.PROTOCOLS, TCP, *client_labels()]
    a = check_choice(src, (*path, "a"), value["a"], groups, "group (a protocol or a client label)")
    b = check_choice(src, (*path, "b"), value["b"], groups, "group (a protocol or a client label)")
    if a == b:
        raise src.error((*path, "b"), f"compares {a} with itself")
    for side, group in (("a", a), ("b", b)):
        if not any(member(c.protocol, c.label, group) for c in clients):
            raise src.error(
                (*path, side),
                f"no client of this experiment is {group}, so nothing would be compared "
                f"(its clients: {', '.join(c.label for c in clients)})",
            )
    both = [c.label for c in clients if member(c.protocol, c.label, a) and member(c.protocol, c.label, b)]
    if both:
        raise src.error((*path, "b"), f"{both[0]} is both {a} and {b}: the sides must not overlap")
    margin = None
    if "similar_within" in value:
        margin = check_number(src, (*path, "similar_within"), value["similar_within"], 1.001, 10.0)
    times = 1.0
    if "b_times" in value:
        times = check_number(src, (*path, "b_times"), value["b_times"], 0.01, 100.0)
    objects: tuple[str, ...] = ()
    if "objects" in value:
        what = f"object of the workload ({', '.join(workload.objects)})"
        objects = tuple(
            check_list(
                src,
                (*path, "objects"),
                value["objects"],
                lambda p, v: check_choice(src, p, v, workload.objects, what),
            )
        )
    where = _where(src, (*path, "where"), value["where"], exp) if "where" in value else ()
    return Decide(metric, a, b, margin, times, objects, where)


def _parallel(src: Source, value: Any) -> str:
    """`parallel: auto` or a number of paths: what the run does unless --parallel says."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 64):
        return str(value)
    raise src.error(("parallel",), f"expected auto or a number of paths (1 to 64), got {value!r}")


def _where(
    src: Source, path: PathKey, value: Any, exp: Experiment
) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """A decide line's conditions: axis -> some of the values this experiment runs (the
    profiles, or a sweep axis that rows carry)."""
    ran = {"profile": [p.name for p in exp.profiles]} | {
        axis: values for axis, values in exp.sweep.items() if axis in WHERE_AXES
    }
    check_mapping(src, path, value, set(ran), set())
    if not value:
        raise src.error(path, f"names no condition (axes: {', '.join(ran)})")

    def one_of(axis: str) -> Callable[[PathKey, Any], Any]:
        def check(at: PathKey, v: Any) -> Any:
            if isinstance(v, bool) or v not in ran[axis]:
                shown = ", ".join(map(axis_value, ran[axis]))
                raise src.error(at, f"{v!r} is not a {axis} this experiment runs ({shown})")
            return v

        return check

    return tuple((axis, tuple(check_list(src, (*path, axis), v, one_of(axis)))) for axis, v in value.items())


def _check_sequential(src: Source, exp: Experiment) -> None:
    """Nothing is accepted that cannot run: rounds need both sides measured side by side,
    something to decide, and a cap at which the test could decide at all."""
    if exp.auto is None:
        return
    if not exp.decide:
        raise src.error(
            ("repetitions", "auto"),
            "auto repetitions stop when the `decide:` lines are decided; this experiment has none",
        )
    if exp.order == "blocked":
        raise src.error(
            ("order",),
            "auto repetitions pair both sides of each round, which blocked order runs far "
            "apart; use interleaved or shuffled",
        )
    floor = floor_rounds(exp.decide, exp.auto, len(exp.servers), len(exp.workload.objects))
    if exp.auto.max < floor:
        raise src.error(
            ("repetitions", "auto", "max"),
            f"{exp.auto.max} rounds cannot decide at alpha {exp.auto.alpha:g}: the sign test "
            f"needs at least {floor} rounds even when every round agrees",
        )


def _check_cross_spoken(src: Source, exp: Experiment) -> None:
    """A cross flow fetched from the trial's server (QUIC, or a web flow's curl over TCP:
    TLS 1.3, h2) runs beside every trial, so every server must speak it (iperf3's bulk TCP
    needs no server)."""
    for i, flow in enumerate(exp.cross):
        if not flow.in_sidecar:
            continue
        need = pairing.Spoken(f"cross flow {flow.name}", "quic" if flow.protocol == "quic" else "tls1.3")
        deaf = [s for s in exp.servers if not pairing.speaks(s, need)]
        if deaf:
            raise src.error(
                ("cross", i, "protocol"),
                f"a {flow.kind} {flow.protocol} cross flow fetches from each trial's server with "
                f"{pairing.need_text(need)}; {'; '.join(pairing.speaks_text(s) for s in deaf)}",
            )


def _max_down_mbit(exp: Experiment) -> float:
    """The fastest down rate any condition may have: its profiles' and its rate sweeps'."""
    rates = [p.down.rate_mbit for p in exp.profiles]
    for axis in ("rate_mbit", "down.rate_mbit"):
        rates += [float(v) for v in exp.sweep.get(axis, []) if isinstance(v, int | float)]
    return max(rates)


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


def _check_conditions(src: Source, value: dict[str, Any], profiles: int) -> None:
    """The conditions counted from the axes' lengths, before any value is checked or any
    product is built: three axes of 1,600 values would be 4e9 conditions."""
    count = profiles
    for values in value.values():
        count *= len(values) if isinstance(values, list) else 1
    if count > limits.MAX_CONDITIONS:
        raise src.error(
            ("sweep",),
            f"{count:,} conditions ({profiles} profile(s) x the sweep's axes); "
            f"an experiment may have at most {limits.MAX_CONDITIONS:,}",
        )


def _check_trials(src: Source, exp: Experiment) -> None:
    """Conditions x trials per condition, refused over the bound before a trial list exists;
    located at the key that multiplies most directly (repetitions, else the sweep)."""
    per_condition = len(pairing.spoken_pairs(exp.servers, exp.clients)) * len(exp.workload.objects)
    conditions = len(exp.profiles) * math.prod(len(v) for v in exp.sweep.values())
    total = conditions * per_condition * exp.repetitions
    if total > limits.MAX_TRIALS:
        key = "repetitions" if "repetitions" in src.data else "sweep" if exp.sweep else "clients"
        raise src.error(
            (key,),
            f"{total:,} trials ({conditions:,} condition(s) x {per_condition} server/client/object "
            f"cell(s) x {exp.repetitions} repetition(s)); an experiment may have at most "
            f"{limits.MAX_TRIALS:,}",
        )


def _sweep(src: Source, value: Any, profiles: list[Link]) -> dict[str, list[Any]]:
    check_mapping(src, ("sweep",), value, None, set())
    _check_conditions(src, value, len(profiles))
    out = {}
    for axis, values in value.items():
        path = ("sweep", axis)
        param = links.axis_param(axis)
        if param is None and axis not in PARAM_AXES:
            raise src.error(
                path,
                f"unknown sweep axis (link parameters: {', '.join(links.LINK_AXES)}, "
                f"optionally with down./up.; or {', '.join(PARAM_AXES)})",
            )
        if param:
            out[axis] = check_list(
                src,
                path,
                values,
                lambda p, v, a=axis: links.check_sweep_value(src, p, a, v, profiles),
            )
        else:
            out[axis] = check_list(src, path, values, lambda p, v: check_str(src, p, v))
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


def _server(src: Source, path: PathKey, value: Any, workload: Workload) -> str:
    name = check_choice(src, path, value, SERVERS, "server")
    refused = pairing.content_refusal(name, replays_pages=bool(workload.pages))
    if refused:
        raise src.error(path, refused)
    return name


def _check_one_site(src: Source, names: list[str], workload: Workload) -> None:
    """A page's origins take their addresses on the server LAN once: one server replays it."""
    if workload.pages and len(names) > 1:
        raise src.error(
            ("servers", 1),
            "a recorded page is replayed by one server (its origins' addresses are that "
            "server's): run each replay server in an experiment of its own",
        )


def _recorded_pages(src: Source, path: PathKey, value: Any) -> tuple[recorded.RecordedPage, ...]:
    """Each `{har: FILE}` (or its one-origin twin, `one_origin: true`) read and validated now
    (a refused HAR names its entry); FILE is relative to the experiment's folder. The pages
    are served at once: no two share a host, and their hosts fit the server LAN."""
    folder = Path(src.file).parent if not src.file.startswith("<") else Path.cwd()

    def one(at: PathKey, entry: Any) -> recorded.RecordedPage:
        check_mapping(src, at, entry, {"har", "one_origin"}, {"har"})
        given = check_str(src, (*at, "har"), entry["har"])
        twin = entry.get("one_origin", False)
        if not isinstance(twin, bool):
            raise src.error((*at, "one_origin"), f"expected true or false, got {twin!r}")
        try:
            return recorded.load_recorded(folder / given, twin)
        except HarError as exc:
            raise src.error((*at, "har"), str(exc)) from None

    pages = tuple(check_list(src, path, value, one))
    if len(pages) > recorded.MAX_PAGES:
        raise src.error(
            (*path, recorded.MAX_PAGES),
            f"at most {recorded.MAX_PAGES} recorded pages per experiment (they are served at once)",
        )
    owner: dict[str, int] = {}
    for i, page in enumerate(pages):
        for host in page.hosts:
            first = owner.setdefault(host, i)
            if first != i:
                raise src.error(
                    (*path, i),
                    f"{host} is an origin of pages[{first}] too: a name answers one page's "
                    "responses (the pages are served at once)",
                )
    if len(owner) > replay.LAST_HOST - replay.FIRST_HOST + 1:
        raise src.error(
            path,
            f"{len(owner)} origins in all: the server LAN has addresses for "
            f"{replay.LAST_HOST - replay.FIRST_HOST + 1}",
        )
    return pages


def _clients(src: Source, value: Any, kind: str) -> list[tuple[int, ClientVariant]]:
    """Every variant with the index of the `clients:` entry it came from."""
    entries = check_list(src, ("clients",), value, lambda p, v: _client_entry(src, p, v, kind))
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        for v in entry:
            if v.label in seen:
                raise src.error(("clients", i), f"client variant '{v.label}' appears twice")
            seen.add(v.label)
    return [(i, v) for i, entry in enumerate(entries) for v in entry]


def _check_spoken(src: Source, servers: list[str], clients: list[tuple[int, ClientVariant]]) -> None:
    """Nothing is accepted that cannot run: a variant that none of the servers speaks
    (experiments/pairing.py) would have no trial. A pair merely not spoken is skipped."""
    for i, variant in clients:
        if not any(pairing.speaks(s, variant) for s in servers):
            raise src.error(("clients", i), pairing.unserved_message(variant, servers))


def _client_entry(src: Source, path: PathKey, value: Any, kind: str) -> tuple[ClientVariant, ...]:
    """One `clients:` entry; list-valued options expand into one variant per combination."""
    if isinstance(value, str):  # `- quic_perf` is short for `- {tool: quic_perf}`
        value = {"tool": value}
    check_mapping(src, path, value, None, {"tool"})
    name = check_choice(src, (*path, "tool"), value["tool"], TOOLS, "client tool")
    tool = TOOLS[name]
    if tool.unavailable:
        raise src.error((*path, "tool"), f"client tool '{name}' is {tool.unavailable}")
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
    return ClientVariant(tool_name, options, tool.variant_label(options), tool.variant_protocol(options))


def _workload(src: Source, value: Any) -> Workload:
    path = ("workload",)
    check_mapping(src, path, value, None, {"kind"})
    name = check_choice(src, (*path, "kind"), value["kind"], WORKLOADS, "workload kind")
    kind = WORKLOADS[name]
    if kind.unavailable:
        raise src.error((*path, "kind"), f"workload kind '{name}' is {kind.unavailable}")
    keys = {"kind", kind.list_key, *kind.extra_keys, *([kind.settings_key] * bool(kind.settings))}
    keys |= {kind.recorded_key} - {""}
    pages: tuple[recorded.RecordedPage, ...] = ()
    if kind.recorded_key and kind.recorded_key in value:
        check_mapping(src, path, value, keys, set())
        if kind.list_key in value:
            raise src.error(
                (*path, kind.recorded_key),
                f"recorded pages beside {kind.list_key}: a run replays pages or fetches the "
                f"testbed's own {kind.what}s, not both",
            )
        pages = _recorded_pages(src, (*path, kind.recorded_key), value[kind.recorded_key])
        objects = [page.name for page in pages]
    else:
        check_mapping(src, path, value, keys, set() if kind.default else {kind.list_key})
        objects = check_list(
            src,
            (*path, kind.list_key),
            value.get(kind.list_key, list(kind.default)),
            lambda p, v: check_choice(src, p, v, kind.choices(), kind.what),
        )
    extra = {
        key: check_number(src, (*path, key), value.get(key, default), low, high)
        for key, (default, low, high) in kind.extra_keys.items()
    }
    settings = (
        _settings(src, (*path, kind.settings_key), value[kind.settings_key], kind.settings)
        if kind.settings_key in value
        else ()
    )
    return Workload(name, tuple(objects), extra.get("duration_s"), settings, pages)


def _check_settings_are_taken(src: Source, workload: Workload, clients: list[ClientVariant]) -> None:
    """Settings no client of the experiment takes would do nothing: refused, not ignored."""
    kind = WORKLOADS[workload.kind]
    if workload.settings and not any(kind.settings_flag in TOOLS[c.tool].workload_flags for c in clients):
        takers = sorted(t.name for t in TOOLS.values() if kind.settings_flag in t.workload_flags)
        raise src.error(
            ("workload", kind.settings_key),
            f"no client of this experiment takes them (only {', '.join(takers)})",
        )


def _settings(
    src: Source, path: PathKey, value: Any, table: dict[str, Setting]
) -> tuple[tuple[str, Any], ...]:
    check_mapping(src, path, value, set(table), set())
    out: list[tuple[str, Any]] = []
    for name, given in value.items():
        setting, where = table[name], (*path, name)
        if setting.kind == "number":
            out.append((name, check_number(src, where, given, setting.low, setting.high)))
        elif setting.kind == "bool":
            if not isinstance(given, bool):
                raise src.error(where, f"expected true or false, got {given!r}")
            out.append((name, given))
        else:  # rules: the ones that decide (the video player's ABR rules), every other one off
            rules = check_list(
                src, where, given, lambda p, v, s=setting: check_choice(src, p, v, s.choices, s.what)
            )
            out.append((name, tuple(rules)))
    return tuple(out)


def _capture(src: Source, value: Any) -> tuple[str, ...]:
    kinds = check_list(
        src,
        ("capture",),
        value if value is not None else [],
        lambda p, v: check_choice(src, p, v, CAPTURE_KINDS, "capture"),
        allow_empty=True,
    )
    return tuple(sorted(kinds))


def parse_capture(text: str) -> tuple[str, ...]:
    """`--capture qlog,pcap,keys` (or "none"); ValueError names the first unknown kind."""
    kinds = [k.strip() for k in text.split(",") if k.strip() and k.strip() != "none"]
    for kind in kinds:
        if kind not in CAPTURE_KINDS:
            raise ValueError(f"unknown capture {kind!r} (known: {', '.join(CAPTURE_KINDS)})")
    return tuple(sorted(set(kinds)))


def _expect(src: Source, path: PathKey, value: Any) -> Expectation:
    text = check_str(src, path, value)
    try:
        return compile_expectation(text, src.line(path))
    except ValueError as exc:
        raise src.error(path, str(exc)) from None


__all__ = ["Experiment", "ExperimentError", "load_experiment", "parse_capture", "parse_experiment"]
