"""One direction of an emulated link, and the tc commands that make it.

A direction is two stages: netem (delay, jitter, loss) on the router's egress, then the
bottleneck (htb rate over a queue: drop-tail, or the AQM named by `aqm`) on the port toward
the receiving host. The netem
stage runs in the router namespace's kernel (netem backend) or inside the User-Mode Linux
router (no sch_netem on the host); the same argument lists either way.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from quicbed.errors import InputError
from quicbed.paths import REPO
from quicbed.topology.traces import Trace, load_trace, resolve_trace

FRAME_BYTES = 1514  # an MTU-sized Ethernet frame, which is what htb and netem count
JITTER_DISTRIBUTIONS = ("normal", "pareto", "paretonormal", "uniform")

# The bottleneck's queue disciplines (`aqm`), and the parameters each qdisc takes: a key the
# qdisc has no knob for is refused, not ignored. cake takes no packet limit (its limit is
# memory) and no target (tc derives it from rtt: 5 % of it); fq has no AQM, so no ecn.
AQM_PARAMS: dict[str, tuple[str, ...]] = {
    "droptail": (),
    "fq_codel": ("target_ms", "interval_ms", "limit_packets", "ecn"),
    "codel": ("target_ms", "interval_ms", "limit_packets", "ecn"),
    "cake": ("interval_ms", "ecn"),
    "pie": ("target_ms", "limit_packets", "ecn"),
    "fq": ("limit_packets",),
}
AQM_KINDS = tuple(AQM_PARAMS)
# The qdiscs' own defaults (tc-fq_codel(8), tc-codel(8), tc-pie(8), tc-cake(8): rtt 100 ms,
# target 5 % of it; tc-fq(8): flow_limit): what the queue aims at when the spec names none.
AQM_DEFAULT_TARGET_MS = {"fq_codel": 5.0, "codel": 5.0, "pie": 15.0, "cake": 5.0}
AQM_DEFAULT_INTERVAL_MS = 100.0
CAKE_TARGET_SHARE = 0.05
FQ_FLOW_LIMIT = 100


@dataclass(frozen=True)
class Aqm:
    """The bottleneck's queue discipline: `droptail` (pfifo) or an AQM, and the parameters
    given for it (None: the qdisc's own default)."""

    kind: str = "droptail"
    target_ms: float | None = None
    interval_ms: float | None = None
    limit_packets: int | None = None
    ecn: bool | None = None

    @property
    def module(self) -> str:
        """The kernel module the qdisc lives in (pfifo is built in)."""
        return "sch_fifo" if self.kind == "droptail" else f"sch_{self.kind}"

    @property
    def qdisc(self) -> str:
        """The qdisc's kind as `tc qdisc show` prints it."""
        return "pfifo" if self.kind == "droptail" else self.kind

    def params(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "kind" and v is not None}

    def to_value(self) -> str | dict[str, Any]:
        """As a link spec writes it: the kind alone, or a mapping with its parameters."""
        params = self.params()
        return {"kind": self.kind, **params} if params else self.kind

    def target(self) -> float | None:
        """The queue delay the AQM aims at (ms); None for drop-tail and fq (no AQM)."""
        if self.kind == "cake":
            interval = self.interval_ms or AQM_DEFAULT_INTERVAL_MS
            return interval * CAKE_TARGET_SHARE
        if self.kind in AQM_DEFAULT_TARGET_MS:
            return self.target_ms or AQM_DEFAULT_TARGET_MS[self.kind]
        return None


@dataclass(frozen=True)
class GilbertElliott:
    """netem's gemodel, all in %: p = P(good→bad), r = P(bad→good), and the loss
    probability in the bad state (netem's 1-h) and in the good state (netem's 1-k)."""

    p: float
    r: float
    loss_bad: float = 100.0
    loss_good: float = 0.0

    def mean_loss_pct(self) -> float:
        if self.p + self.r == 0:
            return self.loss_good
        bad = self.p / (self.p + self.r)
        return bad * self.loss_bad + (1 - bad) * self.loss_good


@dataclass(frozen=True)
class LinkSpec:
    """What one direction of the bottleneck does to packets."""

    rate_mbit: float
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    jitter_distribution: str = "normal"
    loss_pct: float = 0.0
    gemodel: GilbertElliott | None = None
    queue_packets: int | None = None  # drop-tail queue beyond the delay line
    queue_ms: float | None = None  # the same, as time at the link rate
    reorder_pct: float = 0.0
    duplicate_pct: float = 0.0
    aqm: Aqm = Aqm()  # the bottleneck's queue discipline
    # A Mahimahi trace (absolute path) the rate follows instead of a fixed rate; rate_mbit is
    # then the trace's mean (topology/traces.py). Only the delay line replays traces.
    trace: str | None = None

    def rate_text(self) -> str:
        """The rate as people read it: a number, or the trace and its mean (Mbit/s)."""
        return f"{Path(self.trace).name} (mean {self.rate_mbit:.3g})" if self.trace else f"{self.rate_mbit:g}"

    def loaded_trace(self) -> Trace | None:
        return trace_at(self.trace) if self.trace else None

    @property
    def expected_loss_pct(self) -> float:
        return self.gemodel.mean_loss_pct() if self.gemodel else self.loss_pct

    def delay_line_limit(self) -> int:
        """netem's limit: its delay line full of minimum-size frames at the link rate, and a
        margin (the delay line must never drop; the queue is the rate stage's)."""
        in_flight = self.rate_mbit * 1e6 * (self.delay_ms + 3 * self.jitter_ms) / 1e3 / (64 * 8)
        return math.ceil(in_flight) + 1000

    def queue_size_packets(self, rtt_ms: float) -> int:
        """The drop-tail queue: explicit, or from queue_ms, or one bandwidth-delay product."""
        if self.queue_packets is not None:
            return self.queue_packets
        window_ms = self.queue_ms if self.queue_ms is not None else rtt_ms
        return max(10, math.ceil(self.rate_mbit * 1e6 * window_ms / 1e3 / (FRAME_BYTES * 8)))

    def queue_limit_packets(self, rtt_ms: float) -> int:
        """The bottleneck's buffer: the AQM's own limit_packets, else the link's queue size
        (queue_packets, queue_ms or one BDP): the AQM decides what to drop within it."""
        if self.aqm.limit_packets is not None:
            return self.aqm.limit_packets
        return self.queue_size_packets(rtt_ms)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        # Drop-tail is every link before `aqm` existed: left out, so their records read alike.
        if self.aqm.kind == "droptail" and not self.aqm.params():
            del out["aqm"]
        else:
            out["aqm"] = self.aqm.to_value()
        trace = self.loaded_trace()
        if trace is None:
            del out["trace"]  # fixed-rate links' records read as before traces existed
        else:
            out["trace_sha256"] = trace.sha256
        return out


@functools.lru_cache(maxsize=32)
def _trace_cached(path: str, mtime_ns: int, size: int) -> Trace:
    return load_trace(Path(path))


def trace_at(path: str) -> Trace:
    """A trace by its absolute path, loaded once per content (a link spec is rebuilt often)."""
    try:
        st = os.stat(path)
    except OSError:
        return load_trace(Path(path))  # its error names the path
    return _trace_cached(path, st.st_mtime_ns, st.st_size)


def droptail_qdisc(super_frames: bool) -> str:
    """Drop-tail's qdisc: pfifo, or bfifo where GSO super-frames reach the bottleneck (a
    path's `Testbed.super_frames`): pfifo counts a 64 KB super-frame as one packet, so it
    would hold up to 44 times the queue; bfifo counts each wire packet's bytes."""
    return "bfifo" if super_frames else "pfifo"


def queue_commands(
    dev: str, parent: str, spec: LinkSpec, rtt_ms: float, super_frames: bool = False
) -> list[list[str]]:
    """The bottleneck's leaf queue under `parent` (the rate stage's class): drop-tail pfifo of
    the link's queue size (bfifo of as many MTU-sized frames with `super_frames`), or the
    spec's AQM with only the parameters it was given (the rest are the qdisc's defaults). A
    backend whose kernel has the qdisc runs these where it runs its bottleneck."""
    aqm = spec.aqm
    leaf = ["tc", "qdisc", "add", "dev", dev, "parent", parent, "handle", "10:"]
    limit = str(spec.queue_limit_packets(rtt_ms))
    if aqm.kind == "droptail" and super_frames:
        return [[*leaf, "bfifo", "limit", str(spec.queue_limit_packets(rtt_ms) * FRAME_BYTES)]]
    if aqm.kind == "droptail":
        return [[*leaf, "pfifo", "limit", limit]]
    if aqm.kind == "cake":
        # htb above it shapes: cake's own shaper stays off (`unlimited`). cake marks
        # ECN-capable packets always (tc has no noecn for it), so `ecn` is only ever true here.
        interval = ["rtt", _ms(aqm.interval_ms)] if aqm.interval_ms is not None else []
        return [[*leaf, "cake", "unlimited", *interval]]
    args = [aqm.kind, "limit", limit]
    if aqm.target_ms is not None:
        args += ["target", _ms(aqm.target_ms)]
    if aqm.interval_ms is not None:
        args += ["interval", _ms(aqm.interval_ms)]
    if aqm.ecn is not None:
        args.append("ecn" if aqm.ecn else "noecn")
    return [[*leaf, *args]]


def _ms(value: float) -> str:
    return f"{value:g}ms"


def rate_commands(
    dev: str, spec: LinkSpec, rtt_ms: float, under_netem: bool = False, super_frames: bool = False
) -> list[list[str]]:
    """The bottleneck: htb at the link rate over the spec's queue (queue_commands).

    Runs in the host kernel on the router's port toward the receiving host, after the netem
    stage: the host kernel's htb is exact, where a UML kernel's timers are not. With
    `under_netem`, it is the child of the netem qdisc (handle 1:) on the same device instead:
    the QEMU router's own kernel, which has the AQMs this host's may lack, delays and then
    queues at the rate (netem hands a packet to its child when its delay is over).

    htb charges a GSO super-frame (`super_frames`) as its wire packets (qdisc_pkt_len: each
    one's headers counted) and lets one through past a burst smaller than it, then waits out
    the debt, so the rate holds; TCP sizes its super-frames to about 1 ms at its pacing rate
    (tcp_tso_autosize), which the burst below already allows.
    """
    rate_kbit = str(max(1, round(spec.rate_mbit * 1000)))
    # A few frames at low rates, ~1 ms worth at high rates, so htb keeps up with timer
    # granularity without letting big bursts through.
    burst = str(max(4 * FRAME_BYTES, math.ceil(spec.rate_mbit * 1e6 / 8 / 1000)))
    htb, place = ("2", ["parent", "1:1"]) if under_netem else ("1", ["root"])
    qdisc = ["tc", "qdisc", "add", "dev", dev, *place, "handle", f"{htb}:", "htb", "default", "1"]
    return [
        *([] if under_netem else [["tc", "qdisc", "del", "dev", dev, "root"]]),
        qdisc,
        htb_class("add", dev, htb, rate_kbit, burst, quantum=str(FRAME_BYTES * 10)),
        *queue_commands(dev, f"{htb}:1", spec, rtt_ms, super_frames),
    ]


def htb_class(verb: str, dev: str, htb: str, rate_kbit: str, burst: str, quantum: str = "") -> list[str]:
    """`tc class add|change` of the bottleneck's one htb class (`htb`:1, under handle `htb`:),
    at `rate_kbit` with the same ceiling and burst: rate_commands adds it, a stepped trace
    (bench/trace_bench.py) changes its rate."""
    rate = f"{rate_kbit}kbit"
    command = ["tc", "class", verb, "dev", dev, "parent", f"{htb}:", "classid", f"{htb}:1", "htb"]
    command += ["rate", rate, "ceil", rate, "burst", burst, "cburst", burst]
    return command + (["quantum", quantum] if quantum else [])


def netem_commands(dev: str, spec: LinkSpec, delay_ms: float | None = None) -> list[list[str]]:
    """Delay, jitter, loss, reordering, duplication: netem on the router's egress.

    `delay_ms` overrides the spec's delay (the backend subtracts its own forwarding latency).
    netem's limit only has to hold its delay line, which `delay_line_limit` sizes for
    minimum-size packets so that netem never drops: queueing is the rate stage's job.
    """
    delay = spec.delay_ms if delay_ms is None else delay_ms
    netem = [
        "tc",
        "qdisc",
        "add",
        "dev",
        dev,
        "root",
        "handle",
        "1:",
        "netem",
        "limit",
        str(spec.delay_line_limit()),
        "delay",
        f"{delay:.3f}ms",
    ]
    if spec.jitter_ms > 0:
        netem.append(f"{spec.jitter_ms:.3f}ms")
        # netem draws uniformly when it is given no table; tc has no "uniform" table.
        if spec.jitter_distribution != "uniform":
            netem += ["distribution", spec.jitter_distribution]
    if spec.gemodel:
        g = spec.gemodel
        netem += ["loss", "gemodel", f"{g.p:g}%", f"{g.r:g}%", f"{g.loss_bad:g}%", f"{g.loss_good:g}%"]
    elif spec.loss_pct > 0:
        netem += ["loss", "random", f"{spec.loss_pct:g}%"]
    if spec.reorder_pct > 0:
        netem += ["reorder", f"{spec.reorder_pct:g}%"]
    if spec.duplicate_pct > 0:
        netem += ["duplicate", f"{spec.duplicate_pct:g}%"]
    return [["tc", "qdisc", "del", "dev", dev, "root"], netem]


_FIELDS: dict[str, type] = {
    "rate_mbit": float,
    "delay_ms": float,
    "jitter_ms": float,
    "jitter_distribution": str,
    "loss_pct": float,
    "gemodel": dict,
    "queue_packets": int,
    "queue_ms": float,
    "reorder_pct": float,
    "duplicate_pct": float,
    "aqm": object,  # a kind, or a mapping with its parameters: parse_aqm
    "trace": str,  # a Mahimahi trace file, instead of rate_mbit
}


LineOf = Callable[..., int | None]  # line(*keys below this spec) -> line in the file


def parse_linkspec(data: Any, file: str, field_path: str, line: LineOf = lambda *_: None) -> LinkSpec:
    """Validate one direction from YAML; every problem names file, line and field."""
    if not isinstance(data, dict):
        raise InputError("must be a mapping of link parameters", file, line(), field_path)
    values: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{field_path}.{key}"
        if key not in _FIELDS:
            known = ", ".join(sorted(_FIELDS))
            raise InputError(f"unknown key (known: {known})", file, line(key), where)
        values[key] = _coerce(value, _FIELDS[key], file, line(key), where)
    if "trace" in values:
        if "rate_mbit" in values:
            raise InputError(
                "give rate_mbit or trace, not both (a trace sets the rate)",
                file,
                line("trace"),
                f"{field_path}.trace",
            )
        trace = _parse_trace(values["trace"], file, line("trace"), f"{field_path}.trace")
        values["trace"], values["rate_mbit"] = str(trace.path), round(trace.mean_rate_mbit(), 6)
    if "rate_mbit" not in values:
        raise InputError(
            "missing (the bottleneck rate in Mbit/s, or a trace)", file, line(), f"{field_path}.rate_mbit"
        )
    if "aqm" in values:
        values["aqm"] = parse_aqm(data["aqm"], file, f"{field_path}.aqm", lambda *keys: line("aqm", *keys))
    if "gemodel" in values:
        values["gemodel"] = _parse_gemodel(
            data["gemodel"], file, f"{field_path}.gemodel", lambda *keys: line("gemodel", *keys)
        )
    spec = LinkSpec(**values)
    check_linkspec(spec, file, line, field_path)
    return spec


def check_linkspec(spec: LinkSpec, file: str, line: Any, field_path: str) -> None:
    """Reject values no link can have. `line(key)` gives the line of a key, or None."""

    def bad(key: str, message: str) -> InputError:
        return InputError(message, file, line(key), f"{field_path}.{key}")

    # YAML's .nan and .inf (and --set's "nan") are floats that pass every comparison below.
    for key in ("rate_mbit", "delay_ms", "jitter_ms", "loss_pct", "queue_ms", "reorder_pct", "duplicate_pct"):
        value = getattr(spec, key)
        if value is not None and not math.isfinite(value):
            raise bad(key, f"must be a finite number, got {value}")
    if spec.rate_mbit <= 0:
        raise bad("rate_mbit", f"must be > 0 Mbit/s, got {spec.rate_mbit:g}")
    if spec.rate_mbit > 10000:
        raise bad("rate_mbit", f"{spec.rate_mbit:g} Mbit/s is beyond what this testbed emulates")
    for key in ("delay_ms", "jitter_ms"):
        if getattr(spec, key) < 0:
            raise bad(key, f"must be >= 0 ms, got {getattr(spec, key):g}")
    for key in ("loss_pct", "reorder_pct", "duplicate_pct"):
        value = getattr(spec, key)
        if not 0 <= value <= 100:
            raise bad(key, f"must be within [0, 100] %, got {value:g}")
    if spec.jitter_distribution not in JITTER_DISTRIBUTIONS:
        raise bad("jitter_distribution", f"must be one of {', '.join(JITTER_DISTRIBUTIONS)}")
    if spec.queue_packets is not None and spec.queue_packets < 1:
        raise bad("queue_packets", "must be >= 1 packet")
    if spec.queue_ms is not None and spec.queue_ms <= 0:
        raise bad("queue_ms", "must be > 0 ms")
    if spec.reorder_pct and spec.delay_ms == 0:
        raise bad(
            "reorder_pct",
            "needs a delay: netem reorders by sending some packets " "ahead of the delayed ones",
        )
    if spec.gemodel and spec.loss_pct:
        raise bad("loss_pct", "give either loss_pct or gemodel, not both")
    if spec.trace:
        _check_traced(spec, bad)


def _check_traced(spec: LinkSpec, bad: Callable[[str, str], InputError]) -> None:
    """A trace sets the rate, and its queue is the delay line's drop-tail one."""
    assert spec.trace
    mean = round(trace_at(spec.trace).mean_rate_mbit(), 6)
    if abs(spec.rate_mbit - mean) > 1e-6:
        raise bad("rate_mbit", f"the link follows a trace (mean {mean:g} Mbit/s): give rate_mbit or trace")
    if spec.aqm.kind != "droptail":
        raise bad("aqm", "a trace-driven link queues in the delay line, which has drop-tail only")


def _parse_trace(name: str, file: str, line: int | None, where: str) -> Trace:
    """A trace named relative to the file that names it, or to the repository (traces/)."""
    bases = [Path(file).parent] if file and Path(file).exists() else [Path.cwd()]
    return load_trace(resolve_trace(name, [*bases, REPO]), file, line, where, shown=name)


def _coerce(value: Any, kind: type, file: str, line: int | None, where: str) -> Any:
    if kind is object:
        return value
    if kind is bool and isinstance(value, bool):
        return value
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind in (str, dict) and isinstance(value, kind):
        return value
    names = {
        float: "a number",
        int: "a whole number",
        str: "a string",
        dict: "a mapping",
        bool: "true or false",
    }
    raise InputError(f"must be {names[kind]}, got {value!r}", file, line, where)


def _parse_gemodel(data: Any, file: str, where: str, line: LineOf) -> GilbertElliott:
    if not isinstance(data, dict):
        raise InputError("must be a mapping {p, r, loss_bad, loss_good} in %", file, line(), where)
    params: dict[str, float] = {}
    for key, value in data.items():
        if key not in ("p", "r", "loss_bad", "loss_good"):
            raise InputError(
                "unknown key (known: p, r, loss_bad, loss_good)", file, line(key), f"{where}.{key}"
            )
        number = _coerce(value, float, file, line(key), f"{where}.{key}")
        if not 0 <= number <= 100:
            raise InputError(f"must be within [0, 100] %, got {number:g}", file, line(key), f"{where}.{key}")
        params[key] = number
    if "p" not in params or "r" not in params:
        raise InputError("needs at least p and r", file, line(), where)
    return GilbertElliott(**params)


_AQM_TYPES: dict[str, type] = {"target_ms": float, "interval_ms": float, "limit_packets": int, "ecn": bool}


def parse_aqm(data: Any, file: str, where: str, line: LineOf = lambda *_: None) -> Aqm:
    """`aqm: fq_codel`, or `aqm: {kind: fq_codel, target_ms: 5, ...}` with only the
    parameters that qdisc takes (AQM_PARAMS)."""
    kinds = ", ".join(AQM_KINDS)
    if isinstance(data, str):
        if data not in AQM_PARAMS:
            raise InputError(f"must be one of {kinds}, got {data!r}", file, line(), where)
        return Aqm(data)
    if not isinstance(data, dict):
        raise InputError(f"must be a queue kind ({kinds}) or a mapping with kind", file, line(), where)
    kind = data.get("kind")
    if kind not in AQM_PARAMS:
        got = "missing" if kind is None else repr(kind)
        raise InputError(f"kind must be one of {kinds}, got {got}", file, line("kind"), f"{where}.kind")
    params: dict[str, Any] = {}
    for key, value in data.items():
        if key == "kind":
            continue
        if key not in AQM_PARAMS[kind]:
            takes = ", ".join(AQM_PARAMS[kind]) or "no parameters"
            raise InputError(f"{kind} has no {key} (it takes: {takes})", file, line(key), f"{where}.{key}")
        params[key] = _aqm_value(kind, key, value, file, line(key), f"{where}.{key}")
    return Aqm(kind, **params)


def _aqm_value(kind: str, key: str, value: Any, file: str, line: int | None, where: str) -> Any:
    number = _coerce(value, _AQM_TYPES[key], file, line, where)
    if key == "ecn":
        if kind == "cake" and not number:
            raise InputError(
                "cake always marks ECN-capable packets (tc has no noecn for it)", file, line, where
            )
        return number
    if key == "limit_packets":
        if number < 1:
            raise InputError("must be >= 1 packet", file, line, where)
        return number
    if not math.isfinite(number) or number <= 0:
        raise InputError(f"must be a finite number > 0 ms, got {number:g}", file, line, where)
    return number


def field_names() -> tuple[str, ...]:
    return tuple(_FIELDS)


__all__ = [
    "AQM_KINDS",
    "AQM_PARAMS",
    "Aqm",
    "GilbertElliott",
    "LinkSpec",
    "rate_commands",
    "queue_commands",
    "droptail_qdisc",
    "netem_commands",
    "parse_aqm",
    "parse_linkspec",
    "check_linkspec",
    "field_names",
]
