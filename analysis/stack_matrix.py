"""The client x server matrix: one cell per profile, client and server, judged by the physics
every stack pair must obey (analysis/physics.py), so that a stack upgrade is a regression check.
Each cell holds one verdict per check (CHECKS), drawn as a column group of its own:

- handshake: the connection time net of the client's CPU, in calibrated RTTs, against the
  protocol's count (QUIC 1, TLS 1.3 2, TLS 1.2 3) within max(+3 %, +1.5 ms): the rows' rule;
- goodput (lossless downloads of 1 MB or more): the TCP model's time for the transfer (setup
  RTTs, request, slow start, the payload at line rate) over the measured one, at least
  GOODPUT_OF_MODEL. QUIC is held to the same arithmetic: a stack that cannot fill the link
  where TCP does is what the matrix is for;
- resumption (a client variant whose `resume` option is "yes": a warm-up connection, then the
  measured one resumes): every trial resumed (where the tool reports it), and the first byte,
  net of the client's CPU, at the RTT count resumption allows (RESUMED_TTFB_RTTS): with early
  data where the rows say 0-RTT bytes went, without where they say none, and the nearer of
  the two where the tool does not say (libcurl's QUIC); "unsupported" for a tool whose
  descriptor has no `resume` option (video_download);
- streams (rows with `streams` > 1, from a client with a `streams` option): every stream
  completed (`streams_completed`) on one connection (`connections`), and the TCP model's time
  for all their bytes over the measured time at least GOODPUT_OF_MODEL; a trial that failed
  (a server that answers a Range request with the whole object) fails it, saying why. The
  variant's label suffix ("quicgo-s30") is dropped: the check sits in its client's cell. The
  check is "unsupported" for every tool whose descriptor has no `streams` option;
- loss (rows of a lossy condition): every trial completed within the timeout; the text is the
  median goodput. No verdict beyond that: model.py has no model of a lossy transfer.

A trial the client answered with exit 3 (error "unsupported: ...") makes its check
"unsupported", not "fail". A cell fails when any check fails on the median; the figure colours
each check so. A pair the server does not speak (an HTTP/3-only server and a TLS-over-TCP
client: servers/pairing.py, from the server's descriptor) ran no trial by design: its cell is
"not spoken", neither a failure nor "n/a".
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from quicbed.clients.tools import TOOLS
from quicbed.servers import SERVERS
from quicbed.servers.pairing import Spoken, speaks

from .loss_response import BROWSER_TOOLS
from .model import is_failed, parse_size
from .physics import GOODPUT_OF_MODEL, HANDSHAKE_RTTS, net_connection_rtts, row_upper_rtts, tcp_download_s
from .stats import Estimate, finite_number, median_ci

PASS, FAIL, NO_DATA, UNSUPPORTED = "pass", "fail", "n/a", "unsupported"
NOT_SPOKEN = "not spoken"  # the server does not speak the client's protocol: no trial by design
MIN_GOODPUT_BYTES = 1 << 20  # smaller downloads are mostly handshake and slow start
KEYS = ["profile", "client", "server"]  # profile: the condition's label (profile and swept values)
CHECKS = ("handshake", "goodput", "resumption", "streams", "loss")
CHECK_TITLES = {
    "handshake": "connection (RTTs, net of client CPU)",
    "goodput": "goodput (model time ÷ measured)",
    "resumption": "resumed: first byte (RTTs, net of client CPU)",
    "streams": "parallel streams on one connection",
    "loss": "loss: goodput (Mbit/s)",
}
RESUME_OPTION, STREAMS_OPTION = "resume", "streams"
UNSUPPORTED_ERROR = "unsupported:"  # the executor's error for a tool's exit 3
# The first byte of a resumed connection, in RTTs from its start: the setup that remains, then
# the request's round trip, which early data folds into the first flight.
RESUMED_TTFB_RTTS = {
    "quic": {"0-RTT": 1, "resumed": 2},  # QUIC resumed without early data: 1 RTT + request
    "tls1.3": {"early data": 2, "resumed": 3},  # TCP 1, then ClientHello + request (or TLS 1, request 1)
    "tls1.2": {"resumed": 3},  # TCP 1, the abbreviated handshake 1, request 1; no early data
}


@dataclass(frozen=True)
class Resumption:
    ttfb: Estimate  # first byte ÷ RTT, net of the client's CPU
    rtt_ms: float
    resumed: float | None  # the share of trials that resumed; None: the tool does not say
    early_bytes: float | None  # median 0-RTT bytes; None: the tool does not say

    def expected(self, protocol: str) -> tuple[str, int] | None:
        """What resumption should take here: (name, RTTs)."""
        allowed = RESUMED_TTFB_RTTS.get(protocol, {})
        if not allowed:
            return None
        if self.early_bytes is not None:
            early = [k for k in allowed if k != "resumed"]
            name = early[0] if self.early_bytes > 0 and early else "resumed"
            return (name, allowed[name]) if name in allowed else None
        return min(allowed.items(), key=lambda kv: abs(kv[1] - self.ttfb.value))

    def verdict(self, protocol: str) -> str:
        expected = self.expected(protocol)
        if expected is None or (self.resumed is not None and self.resumed < 1):
            return FAIL
        rtts = expected[1]
        return PASS if rtts * 0.99 <= self.ttfb.value <= row_upper_rtts(rtts, self.rtt_ms) else FAIL


@dataclass(frozen=True)
class Streams:
    requested: int
    all_completed: bool  # every trial completed every stream
    one_connection: bool  # every trial on one connection
    of_model: Estimate | None  # model time for all the streams' bytes ÷ measured time
    failed: int = 0  # trials that gave an error row (a server that ignores Range, ...)
    error: str = ""  # the first one's error

    @property
    def verdict(self) -> str:
        fast = self.of_model is not None and self.of_model.value >= GOODPUT_OF_MODEL
        return PASS if self.all_completed and self.one_connection and fast and not self.failed else FAIL


@dataclass(frozen=True)
class Loss:
    loss_pct: float
    completed: int
    failed: int  # timed out or broke
    goodput_mbit: Estimate | None

    @property
    def verdict(self) -> str:
        return PASS if self.completed and not self.failed else FAIL


@dataclass(frozen=True)
class Cell:
    profile: str
    client: str
    server: str
    protocol: str
    n: int  # the measured (error-free) trials of every check of the cell
    handshake: Estimate | None = None  # connection ÷ RTT, net of the client's CPU
    handshake_rtts: int | None = None  # what the protocol takes
    handshake_upper: float | None = None  # the most the rows' rule allows, in RTTs
    goodput: Estimate | None = None  # model time ÷ measured time
    resumption: Resumption | None = None
    streams: Streams | None = None
    loss: Loss | None = None
    unsupported: frozenset[str] = field(default_factory=frozenset)  # checks the client cannot do
    spoken: bool = True  # False: the server does not speak the client's protocol (no trials)

    @property
    def checks(self) -> dict[str, str]:
        if not self.spoken:
            return dict.fromkeys(CHECKS, NOT_SPOKEN)
        out = {check: UNSUPPORTED for check in CHECKS if check in self.unsupported}
        if self.handshake and self.handshake.n and self.handshake_rtts and self.handshake_upper:
            low = self.handshake_rtts * 0.99
            out["handshake"] = PASS if low <= self.handshake.value <= self.handshake_upper else FAIL
        if self.goodput and self.goodput.n:
            out["goodput"] = PASS if self.goodput.value >= GOODPUT_OF_MODEL else FAIL
        if self.resumption:
            out["resumption"] = self.resumption.verdict(self.protocol)
        if self.streams:
            out["streams"] = self.streams.verdict
        if self.loss:
            out["loss"] = self.loss.verdict
        return out

    @property
    def verdict(self) -> str:
        if not self.spoken:
            return NOT_SPOKEN
        checks = set(self.checks.values())
        for verdict in (FAIL, PASS, UNSUPPORTED):
            if verdict in checks:
                return verdict
        return NO_DATA

    def text(self, check: str) -> str:
        """The check's medians with their CIs, or why there are none."""
        if not self.spoken:
            return NOT_SPOKEN
        if check in self.unsupported:
            return UNSUPPORTED
        if check == "handshake" and self.handshake and self.handshake.n:
            return _ci(self.handshake, "RTT")
        if check == "goodput" and self.goodput and self.goodput.n:
            return _ci(self.goodput, "of model")
        if check == "resumption" and self.resumption:
            r = self.resumption
            if r.resumed is not None and r.resumed < 1:
                return f"resumed {r.resumed:.0%} of trials; {_ci(r.ttfb, 'RTT')}"
            kind = (r.expected(self.protocol) or ("?", 0))[0]
            return f"{_ci(r.ttfb, 'RTT')}, {kind}"
        if check == "streams" and self.streams:
            s = self.streams
            if s.failed and s.of_model is None:
                return f"{s.requested} streams: {s.failed} failed: {s.error[:120]}"
            parts = [f"{s.failed} failed: {s.error[:120]}"] if s.failed else []
            parts += [] if s.all_completed else [f"not all {s.requested} completed"]
            parts += [] if s.one_connection else ["more than one connection"]
            parts += [_ci(s.of_model, "of model")] if s.of_model else []
            return f"{s.requested} streams: " + "; ".join(parts)
        if check == "loss" and self.loss:
            lo = self.loss
            rate = _ci(lo.goodput_mbit, "Mbit/s") if lo.goodput_mbit else "none completed"
            late = f"; {lo.failed} of {lo.completed + lo.failed} did not complete" if lo.failed else ""
            return f"{lo.loss_pct:g} %: {rate}{late}"
        return NO_DATA


def _ci(e: Estimate, unit: str) -> str:
    return f"{e.value:.2f} {unit} [{e.lo:.2f}, {e.hi:.2f}]"


def _handshake(rows: pd.DataFrame, protocol: str) -> tuple[Estimate | None, int | None, float | None]:
    rtts = HANDSHAKE_RTTS.get(protocol)
    usable = rows[rows["connection_time_ms"].notna() & (rows["calib_rtt_ms"] > 0)]
    if rtts is None or usable.empty:
        return None, rtts, None
    ratios = [
        net_connection_rtts(
            float(r.connection_time_ms), finite_number(r.get("client_cpu_ms")), float(r.calib_rtt_ms)
        )
        for _, r in usable.iterrows()
    ]
    rtt = float(usable["calib_rtt_ms"].median())
    return median_ci(np.array(ratios)), rtts, row_upper_rtts(rtts, rtt)


def _model_share(rows: pd.DataFrame, protocol: str, size_of: str = "object") -> Estimate | None:
    """The TCP model's time for each row's bytes over the measured time (rows of 1 MB or more)."""
    rtts = HANDSHAKE_RTTS.get(protocol)
    if rtts is None or "download_time_ms" not in rows or "rate_down_mbit" not in rows:
        return None
    times = [model_and_measured_s(r, rtts, size_of) for _, r in rows.iterrows()]
    ratios = [model / took for model, took in filter(None, times)]
    return median_ci(np.array(ratios)) if ratios else None


def model_and_measured_s(
    row: pd.Series, setup_rtts: int, size_of: str = "object"
) -> tuple[float, float] | None:
    """(the TCP model's time for the row's bytes, the measured time), in s; None for a row
    under MIN_GOODPUT_BYTES or without a time, a rate or an RTT."""
    size = parse_size(row.get("object")) if size_of == "object" else finite_number(row.get(size_of)) or 0.0
    took, rate, rtt = (
        finite_number(row.get("download_time_ms")),
        finite_number(row.get("rate_down_mbit")),
        finite_number(row.get("calib_rtt_ms")),
    )
    if size < MIN_GOODPUT_BYTES or not (took and rate and rtt):
        return None
    return tcp_download_s(size, rate, rtt, setup_rtts), took / 1000


def _resumption(rows: pd.DataFrame) -> Resumption | None:
    usable = rows[rows["ttfb_ms"].notna() & (rows["calib_rtt_ms"] > 0)] if "ttfb_ms" in rows else rows[:0]
    if usable.empty:
        return None
    ratios = [
        net_connection_rtts(float(r.ttfb_ms), finite_number(r.get("client_cpu_ms")), float(r.calib_rtt_ms))
        for _, r in usable.iterrows()
    ]
    resumed = _known(usable, "resumed")
    early = _known(usable, "early_data_bytes")
    return Resumption(
        median_ci(np.array(ratios)),
        float(usable["calib_rtt_ms"].median()),
        float(resumed.astype(bool).mean()) if resumed is not None else None,
        float(early.median()) if early is not None else None,
    )


def _known(rows: pd.DataFrame, column: str) -> pd.Series | None:
    """The column's values where every row has one; None where the tool does not report it."""
    if column not in rows or rows[column].isna().any():
        return None
    return pd.to_numeric(rows[column].astype(float), errors="coerce")


def _streams(all_rows: pd.DataFrame, protocol: str) -> Streams:
    """The streams check of the measured trials, and of those that failed: a server that
    answers a Range request with the whole object cannot serve one object as ranges."""
    rows, failed = all_rows[~all_rows["_failed"]], all_rows[all_rows["_failed"]]
    requested = int(all_rows["_streams_asked"].max())
    done = pd.to_numeric(rows.get("streams_completed"), errors="coerce")
    conns = pd.to_numeric(rows.get("connections"), errors="coerce")
    return Streams(
        requested,
        bool((done == rows["streams"]).all()) if not rows.empty else False,
        bool((conns == 1).all()) if not rows.empty else False,
        _model_share(rows, protocol, size_of="bytes") if not rows.empty else None,
        len(failed),
        str(failed["error"].iloc[0]) if not failed.empty else "",
    )


def _loss(ok: pd.DataFrame, failed: pd.DataFrame) -> Loss:
    rows = pd.concat([ok, failed])
    goodput = []
    for _, r in ok.iterrows():
        size, took = finite_number(r.get("bytes")), finite_number(r.get("download_time_ms"))
        if size and took:
            goodput.append(size * 8 / (took * 1e3))
    return Loss(
        float(pd.to_numeric(rows["loss_pct"], errors="coerce").max()),
        len(ok),
        len(failed),
        median_ci(np.array(goodput)) if goodput else None,
    )


def _option_suffix(tool: object, option: str, value: str) -> str | None:
    """How the tool's descriptor spells option=value in a label ("-resume"), None if it has no
    such option."""
    described = TOOLS.get(str(tool))
    if described is None or value not in described.options.get(option, ()):
        return None
    return described.short.get(option, {}).get(value, value)


def _streams_variant(tool: object, client: str) -> tuple[str, int]:
    """(the client's label without its streams variant's suffix, the streams it asks for):
    ("quicgo-s30", ...) -> ("quicgo", 30), so the streams check sits in the cell of the client
    it is a variant of; (client, 0) for a label of no streams variant."""
    described = TOOLS.get(str(tool))
    for value in described.options.get(STREAMS_OPTION, ()) if described else ():
        suffix = _option_suffix(tool, STREAMS_OPTION, value)
        if value != "1" and suffix and client.endswith(suffix) and value.isdigit():
            return client[: -len(suffix)], int(value)
    return client, 0


def _check_of(row: pd.Series) -> tuple[str, str, int]:
    """(check, base client label, streams asked) a row measures: a lossy condition's rows the
    loss check; a variant with several streams the streams check (known by its label, so an
    error row too); a variant resuming its session the resumption check of the client without
    it; else the fresh connection's checks (handshake and goodput)."""
    client = str(row["client"])
    if (finite_number(row.get("loss_pct")) or 0) > 0:
        return "loss", client, 0
    base, asked = _streams_variant(row.get("tool"), client)
    reported = int(finite_number(row.get("streams")) or 0)
    if reported > 1 or asked:
        return "streams", base, reported or asked
    suffix = _option_suffix(row.get("tool"), RESUME_OPTION, "yes")
    if suffix and client.endswith(suffix):
        return "resumption", client[: -len(suffix)], 0
    return "fresh", client, 0


def cells(df: pd.DataFrame) -> list[Cell]:
    """The matrix of a run's rows that time a connection (the perf tools and the other stacks'
    clients), per profile, client and server. Failed rows count only where a check needs
    them: the client's exit 3 (unsupported) and the loss check's trials that did not finish."""
    rows = matrix_rows(df)
    if rows.empty:
        return []
    found = [_cell(key, group) for key, group in rows.groupby(KEYS, sort=False)]
    return found + _not_spoken(found, rows)


def fresh_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The measured trials of the fresh connections (the handshake and goodput checks' rows)."""
    rows = matrix_rows(df)
    return rows[(rows["_check"] == "fresh") & ~rows["_failed"]] if not rows.empty else rows


def matrix_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows the matrix is made of, each with the cell it belongs to: `profile` the
    condition's label, `client` the label without a variant's suffix, `_check` what it
    measures, `_failed` and `_unsupported` (the client's exit 3). Empty when there are none."""
    if df.empty or not set(KEYS) <= set(df.columns) or "connection_time_ms" not in df:
        return df.iloc[0:0]
    rows = df.reset_index(drop=True)  # several runs' rows may share index labels
    if "page_load_time_ms" in rows:  # a browser's connection holds its CPU-bound start
        rows = rows[rows["page_load_time_ms"].isna()]
    if "tool" in rows:  # ... and its failed rows have no page load time to say so
        rows = rows[~rows["tool"].isin(BROWSER_TOOLS)]
    error = rows["error"] if "error" in rows else pd.Series(None, index=rows.index, dtype=object)
    failed = error.map(is_failed).astype(bool)
    rows = rows.assign(
        _failed=failed, _unsupported=failed & error.astype(str).str.startswith(UNSUPPORTED_ERROR)
    )
    rows = rows[rows["_failed"] | rows["connection_time_ms"].notna()]
    if rows.empty:
        return rows
    checks = rows.apply(_check_of, axis=1, result_type="expand")
    lossy = checks[0] == "loss"
    # A sweep keeps its profile's name (one matrix per point); a lossy condition is the loss
    # column of its profile's matrix.
    label = rows["condition_label"].fillna(rows["profile"]) if "condition_label" in rows else rows["profile"]
    rows = rows.assign(
        profile=label.where(~lossy, rows["profile"]),
        client=checks[1],
        _check=checks[0],
        _streams_asked=checks[2],
    )
    return rows[~rows["_failed"] | rows["_unsupported"] | rows["_check"].isin(["loss", "streams"])]


def _not_spoken(found: list[Cell], rows: pd.DataFrame) -> list[Cell]:
    """A cell for each profile x client x server of the matrix with no rows because the server
    does not speak the client's protocol (servers/pairing.py); a pair with no rows for another
    reason stays absent ("not run")."""
    have = {(c.profile, c.client, c.server) for c in found}
    servers = list(dict.fromkeys(c.server for c in found))
    out = []
    rows = rows if "tool" in rows else rows.assign(tool="")
    for (client, protocol, tool), _ in rows.groupby(["client", "protocol", "tool"], sort=False):
        variant = Spoken(str(client), str(protocol), _options_of(str(tool), str(client)))
        for profile in dict.fromkeys(c.profile for c in found):
            for server in servers:
                if (profile, client, server) in have or server not in SERVERS:
                    continue
                if not speaks(server, variant):
                    out.append(Cell(profile, str(client), server, str(protocol), 0, spoken=False))
    return out


def _options_of(tool: str, label: str) -> dict[str, str]:
    """The options of the tool's variant with this label ({} when the descriptor has none)."""
    described = TOOLS.get(tool)
    if described is None:
        return {}
    names = list(described.options)
    for values in itertools.product(*(described.options[n] for n in names)):
        options = dict(zip(names, values, strict=True))
        if described.variant_label(options) == label:
            return options
    return {}


def _cell(key: Iterable[object], group: pd.DataFrame) -> Cell:
    profile, client, server = (str(k) for k in key)
    protocol = str(group["protocol"].iloc[0])
    parts = dict(iter(group.groupby("_check", sort=False)))
    gone = {check for check, rows in parts.items() if rows["_unsupported"].all()}
    unsupported = {"handshake", "goodput"} if "fresh" in gone else set()
    unsupported |= gone - {"fresh"}
    tool = str(group["tool"].iloc[0]) if "tool" in group else ""
    for check, option in (("streams", STREAMS_OPTION), ("resumption", RESUME_OPTION)):
        if check not in parts and tool in TOOLS and option not in TOOLS[tool].options:
            unsupported.add(check)  # no trial to run: the descriptor does not offer the option

    def ok(check: str) -> pd.DataFrame:
        rows = parts.get(check)
        return rows[~rows["_failed"]] if rows is not None and check not in gone else group[:0]

    fresh = ok("fresh")
    hs, rtts, upper = _handshake(fresh, protocol) if not fresh.empty else (None, None, None)
    lossless = "loss_pct" not in fresh or not (pd.to_numeric(fresh["loss_pct"], errors="coerce") > 0).any()
    lossy = parts.get("loss")
    return Cell(
        profile,
        client,
        server,
        protocol,
        int((~group["_failed"]).sum()),
        hs,
        rtts,
        upper,
        _model_share(fresh, protocol) if lossless and not fresh.empty else None,
        _resumption(ok("resumption")) if not ok("resumption").empty else None,
        _streams(parts["streams"], protocol) if "streams" in parts and "streams" not in gone else None,
        _loss(ok("loss"), lossy[lossy["_failed"]]) if lossy is not None and "loss" not in gone else None,
        frozenset(unsupported),
    )


def is_matrix(found: list[Cell]) -> bool:
    """Worth a matrix: several clients against several servers."""
    return len({c.client for c in found}) > 1 and len({c.server for c in found}) > 1


def checks_shown(found: list[Cell]) -> list[str]:
    """The checks any cell has a verdict or a measurement for, in CHECKS order; a check every
    cell lacks (e.g. loss without a lossy run) has no column."""
    measured = {check for c in found for check, v in c.checks.items() if v not in (UNSUPPORTED, NOT_SPOKEN)}
    unsupported = {check for c in found for check in c.unsupported}
    return [check for check in CHECKS if check in measured or check in unsupported]


def matrix_table(found: list[Cell]) -> pd.DataFrame:
    shown = checks_shown(found)

    def column(c: Cell, check: str) -> str:
        verdict = c.checks.get(check)
        if verdict is None:
            return "–"
        text = c.text(check)
        return text if verdict in (PASS, UNSUPPORTED, NOT_SPOKEN) else f"{verdict}: {text}"

    return pd.DataFrame(
        [
            {
                "profile": c.profile,
                "client": c.client,
                "server": c.server,
                "n": str(c.n),
                **{CHECK_TITLES[check]: column(c, check) for check in shown},
                "verdict": c.verdict,
            }
            for c in found
        ]
    )
