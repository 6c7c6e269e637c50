"""What every workload kind shares: the class a kind subclasses (`WorkloadKind`), the registry
it joins by being defined, and the data it describes its rows and report with (`Metric`,
`ReportSection`) and its client settings (`Setting`).

Rows are grouped by *analysis kind*: the workload's own name for the rows of the transfer tools
(tls_perf, quic_perf), and a derived kind for rows a browser measured (`pageload` for page
loads, `streaming` for playback), which must never be pooled with a transfer tool's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the data frames analysis passes in; importing pandas here costs every CLI
    import pandas as pd

# Every workload kind, by name: a subclass of WorkloadKind with a `kind` registers an instance
# of itself here when its module is imported (workloads/__init__.py imports every module of
# the package, and those QUICBED_WORKLOAD_MODULES names).
REGISTRY: dict[str, WorkloadKind] = {}

# A client descriptor's `workloads:` entry for every kind whose trial is one GET of the object's
# URL (`WorkloadKind.one_get`): the perf tools name it, so a new kind of that shape is run by
# them with no line of its own in their descriptors (as a test case of the Interop Runner
# names what it needs, not who runs it). Never a kind's name.
ANY_GET = "get"


def transfer_kinds() -> tuple[str, ...]:
    """The kinds' own names, in report order: the analysis kinds of the transfer tools' rows."""
    return tuple(REGISTRY)


def one_get_kinds() -> tuple[str, ...]:
    """The kinds a client whose `workloads:` names ANY_GET runs, in report order."""
    return tuple(name for name, workload in REGISTRY.items() if workload.one_get)


@dataclass(frozen=True)
class Metric:
    column: str
    label: str
    unit: str
    # Analysis kinds whose rows measure this metric; None = every transfer tool's rows (a
    # handshake is a handshake whatever is fetched after it).
    workloads: tuple[str, ...] | None = None
    # Whether dividing by the RTT is meaningful (times are, rates are not).
    per_rtt: bool = True

    def rows(self, df: pd.DataFrame) -> pd.DataFrame:
        selected = df[df["workload"].isin(self.workloads or transfer_kinds())]
        return selected[selected[self.column].notna()]


CONNECTION = Metric("connection_time_ms", "Connection time", "ms")


@dataclass(frozen=True)
class ReportSection:
    """One section of the report: medians of `metrics` per `keys`, QUIC against TLS on
    `compared` (None: all of `metrics`), with the figures analysis/figures.py files under
    `figures`. `table` names a section table of its own (analysis/tables.py) instead."""

    title: str
    kinds: tuple[str, ...] | None  # the analysis kinds whose successful rows it shows; None: every kind's own
    intro: str
    metrics: tuple[Metric, ...] = ()
    keys: tuple[str, ...] = ("facet", "protocol")
    compared: tuple[Metric, ...] | None = None
    figures: str = ""  # the figures' section name (their file names carry it)
    cdfs: tuple[Metric, ...] = ()  # drawn as CDFs in the metric's unit
    cdfs_in_rtts: bool = False  # and, for metrics with per_rtt, divided by the RTT
    plots: tuple[str, ...] = ()  # figures of their own, by builder name (analysis/figures.py)
    table: str = ""  # a table of its own, by builder name (analysis/report.py's TABLES)
    table_caption: str = ""
    # Analysis kinds whose rows its own figures and table see beside its kinds' (the perf
    # tools' download of the page a browser loaded), never in its medians.
    beside: tuple[str, ...] = ()

    def rows(self, df: pd.DataFrame) -> pd.DataFrame:
        """The rows of the section's analysis kinds: its medians and comparisons."""
        return df[df["workload"].isin(self.kinds or transfer_kinds())]

    def own_rows(self, df: pd.DataFrame) -> pd.DataFrame:
        """The rows its figures of their own (`plots`) and its `table` are drawn from."""
        return df[df["workload"].isin((*(self.kinds or transfer_kinds()), *self.beside))]


@dataclass(frozen=True)
class Setting:
    """One setting of the client that plays a workload, which an experiment may set (e.g.
    `workload: {player: {NAME: value}}`): where it goes in the client's settings, and what it
    takes. kind: "number" (low..high, in the name's unit), "bool", or "rules" (a list of
    `choices`, each called `what` in messages: those on, every other one off)."""

    path: tuple[str, ...]
    kind: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple[str, ...] = ()
    what: str = ""


# A connection's first flight: the initial window of 10 segments (RFC 6928).
INIT_WINDOW_BYTES = 10 * 1460


@dataclass(frozen=True)
class TrialPath:
    """What the dry run knows of one trial before it runs: the path, the client tool and the
    protocol (experiments/plan.py makes it); a kind's `trial_seconds` reads it."""

    rtt_s: float
    rate_mbit: float  # the sender's: the link's, or under random loss the Mathis rate
    shared: bool  # cross traffic runs beside it: half the link at best
    handshake_rtts: int  # the protocol's round trips before the request
    start_s: float  # the tool's own start and end (clients/<name>/client.yaml start_s)
    plays_streams: bool  # the tool plays a stream in real time (client.yaml plays_streams)

    def transfer_seconds(self, size: float) -> float:
        """Handshake + request + slow-start rounds + serialisation + the tool's start-up."""
        slow_start_rounds = math.log2(size / INIT_WINDOW_BYTES + 1)
        transfer = size * 8 / (self.rate_mbit * 1e6) * (2 if self.shared else 1)
        rounds = self.handshake_rtts + 1 + slow_start_rounds
        return rounds * self.rtt_s + transfer + self.start_s


# CPU one trial keeps busy (cores: client + server container) of a tool or workload not
# measured yet (WorkloadKind.cpu_cores): assume a perf tool's.
PERF_TOOL_CPU_CORES = 0.15


class WorkloadKind:
    """One workload kind. Everything the rest of quicbed needs to know of a kind is a member
    here: its `workload:` keys, the objects it fetches, their URLs and sizes, its content, what
    it adds to a client's arguments, its rows' analysis kinds, its report sections and its
    plan cost. Adding a kind is adding a module with one subclass (and its tests)."""

    kind: ClassVar[str] = ""
    order: ClassVar[int] = 100  # its place in the report (the shipped kinds: 1, 2, 3)
    list_key: ClassVar[str] = ""  # the workload section's key listing what to fetch
    what: ClassVar[str] = ""  # what one entry is called in messages
    default: ClassVar[tuple[str, ...]] = ()  # when the list is left out (empty: required)
    # The workload section's key listing recorded pages to replay instead (`pages: [{har:
    # FILE}]`: workloads/recorded.py), "" where the kind replays none.
    recorded_key: ClassVar[str] = ""
    extra_keys: ClassVar[dict[str, tuple[float, float, float]]] = {}  # key -> (default, low, high)
    # A mapping of named settings for the client that plays the workload (the video player's
    # buffer and ABR): its key in the workload section, and what each setting takes.
    settings_key: ClassVar[str] = ""
    settings: ClassVar[dict[str, Setting]] = {}
    settings_flag: ClassVar[str] = ""  # the client flag that takes them (Tool.workload_flags)
    unavailable: ClassVar[str] = ""  # why experiments may not name it yet ("" = it runs)
    # Rows a browser measured form analysis kinds of their own, never pooled with the transfer
    # tools' rows: derived kind -> the columns whose presence marks such a row.
    derived: ClassVar[dict[str, tuple[str, ...]]] = {}
    # Analysis kinds (its own name or derived ones) whose rate is set by what the workload
    # asks for, not by the path (a player's playout, a page's few kilobytes).
    demand_limited: ClassVar[tuple[str, ...]] = ()
    sections: ClassVar[tuple[ReportSection, ...]] = ()  # the report's sections on its rows
    # Cores one trial keeps busy (client + server container), per client tool, for --parallel
    # auto (experiments/plan.py); a tool not listed costs PERF_TOOL_CPU_CORES.
    cpu_cores: ClassVar[dict[str, float]] = {}
    # Whether a trial is one GET of url_path(name), through the clients' contract
    # (clients/tools.py) and nothing of the kind's own: then every client naming ANY_GET runs
    # it. A kind that needs more (a player, a page of several objects) leaves it False and is
    # named by the clients that run it.
    one_get: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            if cls.kind == ANY_GET:
                raise TypeError(f"{ANY_GET!r} names the one-GET kinds in client descriptors, not a kind")
            if cls.kind in REGISTRY:
                raise TypeError(f"workload kind {cls.kind!r} is defined twice ({cls.__module__})")
            REGISTRY[cls.kind] = cls()
            ordered = sorted(REGISTRY.values(), key=lambda workload: workload.order)
            REGISTRY.clear()
            REGISTRY.update((workload.kind, workload) for workload in ordered)

    def choices(self) -> tuple[str, ...]:
        """Every object an experiment may list."""
        raise NotImplementedError

    def url_path(self, name: str) -> str:
        """The object's path on the servers (below their content root)."""
        raise NotImplementedError

    def object_bytes(self, name: str) -> int:
        """Bytes one trial fetches (a page counts all its files)."""
        raise NotImplementedError

    def make_content(self, root: Path) -> None:
        """Make the kind's standing content under root (idempotent; cached across runs)."""

    def prepare_content(self, root: Path, objects: tuple[str, ...]) -> None:
        """Make what the servers serve for a run of these objects."""
        self.make_content(root)

    def tool_args(self, duration_s: float | None, settings: dict[str, Any]) -> dict[str, str]:
        """What the workload adds to a client's arguments (after the contract's), flag ->
        value; each tool takes the flags it knows (clients/tools.py: Tool.workload_flags)."""
        return {}

    def trial_seconds(self, name: str, duration_s: float | None, path: TrialPath) -> float:
        """A rough lower bound of one trial's time (the dry run's estimate): by default the
        object fetched once at the path's rate."""
        return path.transfer_seconds(self.object_bytes(name))

    def trial_cpu_cores(self, tool: str) -> float:
        return self.cpu_cores.get(tool, PERF_TOOL_CPU_CORES)
