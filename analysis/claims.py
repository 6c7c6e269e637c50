"""Claims checked against a run: the paper's findings (DIRECTIONS) and an experiment's own
`expect:` lines, judged by one engine (`evaluate`) into one kind of Verdict.

A claim (Direction) is a text plus a function over the successful rows returning a Verdict.
To add a paper finding, write a check and append a Direction to DIRECTIONS; an `expect:` line
becomes a Direction through `expectation_claim` (the language: analysis/expectations.py).
The report shows both; `quicbed check` judges expect lines per condition with the same
`expectations.judge`. A claim over transfer rates names the analysis kinds it rests on
(`rates_of`): when some of those rows came from a sender that is not loss-responsive
(analysis/loss_response.py), its verdict's text says so. A browser's loads on a path that
were too often CPU-bound are left out of the paper's findings, which say so
(analysis/cpu_bound.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from quicbed.workloads import transfer_kinds

from . import cpu_bound, decisions, expectations
from .decisions import DEFAULT_ALPHA, TCP, Decide
from .expectations import Expectation, Outcome
from .model import (
    CLOUD_CPU,
    CLOUD_THROUGHPUT,
    CONNECTION,
    DOWNLOAD,
    MB,
    STREAMING,
    TTFB,
    Metric,
    listed,
    near,
    ordered_protocols,
    protocol_label,
    truthy,
)
from .physics import (
    HANDSHAKE_RTTS,
    PATH_TOLERANCE,
    row_connection_within,
    row_upper_rtts,
    tcp_download_s,
    wire_within,
)
from .sequential import direction as sequential_direction
from .stats import MIN_N, Comparison, compare, finite_number, median_ci
from .tables import compare_protocols, flagged_stacks, fmt, fmt_est, lowest_quality, protocol_values

HOLDS, FAILS, NO_DATA = "holds", "does not hold", "not enough data"
NOT_DECIDED = "not decided"  # a sequential comparison that its rounds have not decided yet
SMALL_FILE = 20 * MB  # the paper's split between QUIC's and TLS 1.2's regimes
# The paper compares CPU on a 200 MB download. CPU % is a rate over the transfer, which a
# bulk file's steady state dominates: every file from 50 MB (0.8 s at 500 Mbit/s, slow start
# 6 RTTs of 6 ms of it) judges it, so a 2-core run need not spend 3.4 s a download on 200 MB.
BULK_FILE = 50 * MB
# Where the large-file and CPU findings live: the receiver's CPU (the paper: QUIC's receiver
# spends about 2x TLS 1.2's, "most of that time in recvmsg"; seed 003 sees that limit from
# about 500 Mbit/s). On a slower link both protocols fill it (germany's 100 Mbit/s: QUIC 92.2
# against TLS 1.2 92.0 Mbit/s, issue 64) and a test there measures the link, so these two
# findings read the links of this rate or more (germany-lab: the published reproduction's
# Germany), and the ≤ 20 MB finding, whose mechanism is the handshake and slow start, the
# others: where it was judged before. A link is known by its rate in the rows, not its name.
RECEIVER_CPU_MBIT = 500.0
# An end at this share of one core or more is saturated (experiments/executor.CPU_BOUND_PCT,
# the rows' cpu_bound). On 2 cores the sender (the server) shares the host with the receiver
# (the client): where the sender saturates and the receiver does not, the rate is the
# sender's, and the receiver's CPU decides nothing.
SATURATED_PCT = 90.0
# Both sides at this share of the TCP model of the link or more (their receivers not
# saturated): the link sets both rates, and what still differs between them is framing (QUIC
# carries a little less payload per packet than TCP) and pacing, not the receiver's CPU the
# finding is about. Such a path is not decided, however many rounds would separate the two.
# Fixed before the data it judges (issue 64, 2026-12-07): the last reproduce ran this line
# to its cap on germany-lab with QUIC at 451 and TLS 1.2 at 453 Mbit/s, neither receiver
# above 27 % of a core; the line stops such a path from deciding on framing later.
LINK_FILLED = 0.90
# The paper's CPU ratio ("about 2x": ≈90 % against ≈50 %), shown beside the measured one. The
# finding's line is its direction, fixed in advance (experiments/paper/cloud.yaml says why):
# a line at a multiple chosen after seeing a run would spend the error rate it claims.
PAPER_CPU_RATIO = 2.0
# "Startup delay is similar without loss": the median of QUIC's over TLS/TCP's within 1.2x
# either way. The paper calls a 40 % difference (at 5 % loss) large; half of that is "similar".
STARTUP_SIMILAR_WITHIN = 1.20


@dataclass(frozen=True)
class Verdict:
    status: str
    found: tuple[str, ...]  # one finding per line


@dataclass(frozen=True)
class Direction:
    claim: str
    check: Callable[[pd.DataFrame], Verdict]
    # The analysis kinds whose transfer rates the claim rests on: a claim over them says so
    # when some of those rows came from a sender that is not loss-responsive (its figures
    # then measure that sender's congestion control, not the protocol). () = none.
    rates_of: tuple[str, ...] = ()
    # The analysis kinds whose rows the claim reads (None: every row): a flag on other rows
    # (a CPU-bound page load) bears on no verdict of this claim.
    rests_on: tuple[str, ...] | None = None
    # How the claim is judged, as the report's method names it per finding ("" for an
    # experiment's own expect: line, whose language says it).
    test: str = ""


def verdict(ok: bool, found: list[str]) -> Verdict:
    return Verdict(HOLDS if ok else FAILS, tuple(found))


def judge(c: Comparison, quic_lower: bool) -> str:
    """A single comparison against a claimed direction. Pointing the claimed way without
    significance is not yet evidence either way; pointing the other way is."""
    right = (c.diff.value < 0) == quic_lower
    if c.significant or not right:
        return HOLDS if right and c.significant else FAILS
    return NO_DATA


def combined(statuses: list[str], found: list[str]) -> Verdict:
    """Any failure fails; otherwise any open question leaves it open."""
    for status in (FAILS, NOT_DECIDED, NO_DATA):
        if status in statuses:
            return Verdict(status, tuple(found))
    return Verdict(HOLDS, tuple(found))


def no_data(reason: str) -> Verdict:
    return Verdict(NO_DATA, (reason,))


def by_facet(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [(str(f), rows[rows["facet"] == f]) for f in dict.fromkeys(rows["facet"])]


def enough(c: Comparison | None) -> bool:
    """Both sides have the samples a verdict needs; fewer means "not enough data", not
    "does not hold"."""
    return c is not None and min(c.a.n, c.b.n) >= MIN_N


# --- comparisons decided by the sequential sign test ---------------------------------------
# A finding that compares two protocols is judged on paired rounds: each run's condition,
# server and object pairs A's and B's trials of one repetition, which the interleaved order
# ran side by side. One sequential sign test by betting runs over all of a finding's rounds
# (analysis/sequential.py: valid however often it is looked at, so a run that stopped when
# its own `decide:` lines were decided is judged without bias). Its error rate is DEFAULT_ALPHA.

GROUP_NAMES = {TCP: "TLS/TCP"}
_PAIRING = ["run_id", "condition", "server", "object", "repetition", "protocol", "client", "error"]


def group_name(group: str) -> str:
    return GROUP_NAMES.get(group) or protocol_label(group)


def _runs(rows: pd.DataFrame, column: str) -> list[list[dict]]:
    """Each run's rows as records (NaN as None), the columns pairing needs."""
    keep = rows[[c for c in (*_PAIRING, column) if c in rows]]
    keep = keep.astype(object).where(keep.notna(), None)
    if "run_id" not in keep:
        return [keep.to_dict("records")]
    return [group.to_dict("records") for _, group in keep.groupby("run_id", sort=True)]


def paired(rows: pd.DataFrame, decide: Decide, claimed: str, alpha: float = DEFAULT_ALPHA) -> tuple[str, str]:
    """The finding's status ("A < B", "A > B" or "similar" claimed) and a line saying how its
    pairs decided it: holds, does not hold, not decided (with the pairs a decision would
    need at the observed effect), or not enough data without a paired round."""
    pairs = decisions.pooled(decide, _runs(rows, decide.column))
    above, below = decisions.signs(pairs)
    a, b = group_name(decide.a), decide.scaled_b(group_name(decide.b))
    measured = sum(np.isfinite(x) and np.isfinite(y) for x, y in pairs)
    if not measured:  # the rows are not there: nothing was compared
        return NO_DATA, f"no paired round of {a} and {b}"
    if above + below == 0 and not decide.similar_within:
        # Rows, but every pair tied (no session stalled on either side): no direction yet.
        return NOT_DECIDED, (
            f"{a} and {b} tied in all {measured} pairs (a tie says nothing of the direction): "
            f"not decided; at least {decisions.fewest_rounds(alpha)} pairs that differ would decide"
        )
    v = decisions.judge(decide, pairs, alpha)
    words = {"A < B": f"{a} below {b}", "A > B": f"{a} above {b}"}
    if decide.similar_within:
        ratios = [x / y for x, y in pairs if x > 0 and y > 0 and np.isfinite(x) and np.isfinite(y)]
        told = f"median {a}/{b} ×{fmt(float(np.median(ratios)))} over {len(ratios)} pairs"
        told += f" (similar: within ×{decide.similar_within:g} either way)"
        words |= {"similar": f"similar within ×{decide.similar_within:g}", "different": "different"}
    else:
        told = f"{words[claimed]} in {below if claimed == 'A < B' else above} of {above + below} pairs"
    if not v.decided:
        more = ""
        if not decide.similar_within:
            need = decisions.pairs_needed(above, below, v.rounds, alpha)
            more = f"; about {need} pairs would decide at this effect" if need else ""
        elif v.rounds < (floor := decisions.fewest_rounds(alpha, similar=True)):
            more = f"; a similarity needs at least {floor} pairs"
        return NOT_DECIDED, f"{told}: not decided after {v.rounds} pairs{more}"
    if v.decision == claimed:
        return HOLDS, f"{told}, decided at pair {v.rounds}"
    return FAILS, f"{told}: decided {words[v.decision]} at pair {v.rounds}"


def _medians(rows: pd.DataFrame, column: str, groups: tuple[str, ...], unit: str) -> str:
    """ "QUIC 412 vs TLS/TCP 530 ms (n=20/40)": each group's median, as a reader compares them."""
    parts, ns = [], []
    for group in groups:
        labels = rows["client"] if "client" in rows else rows["protocol"]
        inside = [decisions.member(p, c, group) for p, c in zip(rows["protocol"], labels, strict=True)]
        values = rows[inside][column].dropna()
        parts.append(f"{group_name(group)} {fmt(values.median()) if len(values) else '–'}")
        ns.append(str(len(values)))
    return " vs ".join(parts) + f" {unit} (medians; n={'/'.join(ns)})"


def decided_by_facet(rows: pd.DataFrame, decide: Decide, claimed: str, unit: str, none: str) -> Verdict:
    """One sequential comparison per facet (a path, or a path's server), all of which must hold."""
    found, statuses = [], []
    for facet, in_facet in by_facet(rows):
        status, line = paired(in_facet, decide, claimed)
        if status == NO_DATA:
            continue
        statuses.append(status)
        found.append(f"{facet}: {_medians(in_facet, decide.column, (decide.a, decide.b), unit)}; {line}")
    return combined(statuses, found) if found else no_data(none)


def handshake_rtts(df: pd.DataFrame) -> Verdict:
    """Connection time ÷ calibrated RTT per protocol, judged on the wire where the rows carry
    it (`wire_rtts`: net of the client's and the server's turns as both ends' captures saw
    them; analysis/wire.py): within 1 % of 1/2/3 RTT (physics.wire_within), each server's
    median turn beside it, since a server's own time is not the path's. Rows without it
    are judged net of the client's own CPU (`client_cpu_ms`): within max(+3 %, +1.5 ms)
    (physics.row_connection_within). The raw ratio stands beside both."""
    rows = CONNECTION.rows(df)
    rows = rows[rows["rtt_ref_ms"].notna()]
    found, ok = [], True
    for facet, in_facet in by_facet(rows):
        parts = []
        for protocol, expected in HANDSHAKE_RTTS.items():
            mine = in_facet[in_facet["protocol"] == protocol]
            wired = _on_the_wire(mine)
            judged = [(_wire_part, mine[wired])] if wired.sum() >= MIN_N else []
            rest = mine[~wired] if judged else mine
            judged += [(_net_of_client_part, rest)] if len(rest) >= MIN_N else []
            for part, judged_rows in judged:
                holds, text = part(protocol_label(protocol), expected, judged_rows)
                ok &= holds
                parts.append(text)
        if parts:
            found.append(f"{facet}: " + ", ".join(parts))
    if not found:
        return no_data(f"no condition with ≥{MIN_N} handshakes per protocol " "and a calibrated RTT ≥ 1 ms")
    return verdict(ok, found)


def _on_the_wire(rows: pd.DataFrame) -> pd.Series:
    """The rows whose handshake their captures split (older runs have no such column)."""
    if "wire_rtts" not in rows:
        return pd.Series(False, index=rows.index)
    return pd.to_numeric(rows["wire_rtts"], errors="coerce").notna()


def _wire_part(label: str, expected: int, rows: pd.DataFrame) -> tuple[bool, str]:
    """Judged on the wire: the path's RTTs, with both ends' median turns and the raw ratio."""
    wire = median_ci(rows["wire_rtts"].astype(float))
    raw = median_ci(rows["connection_time_ms"] / rows["rtt_ref_ms"])
    client = float(rows["client_turn_ms"].astype(float).median())
    servers = ", ".join(
        f"{server} {float(turns.median()):.2f} ms"
        for server, turns in rows.groupby("server")["server_turn_ms"]
    )
    low, high = expected * (1 - PATH_TOLERANCE), expected * (1 + PATH_TOLERANCE)
    holds = wire_within(expected, wire.value)
    # Short: a reproduce has a dozen such cells in one verdict; the range (the method's line)
    # is spelled only where it is missed.
    outside = "" if holds else f", outside {low:.3g} to {high:.3g}"
    text = (
        f"{label} {fmt(wire.value)} RTT on the wire{outside} (raw {fmt(raw.value)}; turns: "
        f"{servers}, client {client:.2f} ms; n={wire.n})"
    )
    return holds, text


def _net_of_client_part(label: str, expected: int, rows: pd.DataFrame) -> tuple[bool, str]:
    """Rows without captures: net of the client's CPU only, the server's time still in."""
    raw = median_ci(rows["connection_time_ms"] / rows["rtt_ref_ms"])
    own = rows["client_cpu_ms"].astype(float).fillna(0.0)
    net = median_ci((rows["connection_time_ms"] - own) / rows["rtt_ref_ms"])
    rtt = float(rows["rtt_ref_ms"].median())
    holds = row_connection_within(expected, net.value, rtt)
    outside = "" if holds else f", outside {expected} to {row_upper_rtts(expected, rtt):.3g}"
    text = f"{label} {fmt(net.value)} RTT net of client time{outside} (raw {fmt(raw.value)}; n={net.n})"
    return holds, text


def connection_order(df: pd.DataFrame) -> Verdict:
    """QUIC below TLS 1.3 below TLS 1.2, each neighbour pair decided in every facet."""
    order = ["quic", "tls1.3", "tls1.2"]
    found, statuses = [], []
    for facet, rows in by_facet(CONNECTION.rows(df)):
        present = [p for p in order if (rows["protocol"] == p).any()]
        if len(present) < 2:
            continue
        lines = []
        for a, b in zip(present, present[1:], strict=False):
            status, line = paired(rows, Decide("connection_time", a, b), "A < B")
            statuses.append(status)
            lines.append(line)
        medians = _medians(rows, CONNECTION.column, tuple(present), "ms")
        ordered = medians.replace(" vs ", " < ", len(present) - 1)
        found.append(f"{facet}: {ordered}; " + "; ".join(lines))
    if not found:
        return no_data("no condition with trials of two protocols")
    return combined(statuses, found)


def longest_and_shortest(rows: pd.DataFrame) -> tuple[str, str] | None:
    """The profiles with the longest and the shortest configured RTT (the paper's India and
    Germany paths), from the rows themselves: no profile is known by name."""
    rtts = rows.groupby("profile")["rtt_ms"].median().dropna()
    if len(rtts) < 2 or rtts.max() <= rtts.min():
        return None
    return str(rtts.idxmax()), str(rtts.idxmin())


def handshake_gap(rows: pd.DataFrame, baseline: str) -> Comparison | None:
    # baseline − QUIC: how much sooner QUIC's connection is up (positive = QUIC faster).
    return compare_protocols(rows, CONNECTION, baseline, "quic")


def long_path_gap(df: pd.DataFrame) -> Verdict:
    rows = CONNECTION.rows(df)
    pair = longest_and_shortest(rows)
    found, ok = [], True
    for baseline in ("tls1.2", "tls1.3") if pair is not None else ():
        assert pair is not None  # for mypy: the loop runs only with a pair
        long_rows, short_rows = (rows[rows["profile"] == name] for name in pair)
        gl, gs = handshake_gap(long_rows, baseline), handshake_gap(short_rows, baseline)
        if gl is None or gs is None or min(gl.a.n, gl.b.n, gs.a.n, gs.b.n) < MIN_N:
            continue
        # Holds only if the CIs don't overlap, not merely the point estimates.
        ok &= gl.diff.lo > gs.diff.hi
        found.append(
            f"QUIC faster than {protocol_label(baseline)} by {fmt_est(gl.diff)} ms on "
            f"{pair[0]} against {fmt_est(gs.diff)} ms on {pair[1]}"
        )
    if not found:
        return no_data(
            f"needs ≥{MIN_N} connection times from two profiles of different RTT, "
            "for QUIC and a TLS baseline"
        )
    return verdict(ok, found)


def relative_gain(rows: pd.DataFrame, metric: Metric, baseline: str) -> float:
    c = compare_protocols(rows, metric, "quic", baseline)
    return np.nan if c is None or not c.significant else -c.relative


def gain_shrinks(df: pd.DataFrame) -> Verdict:
    web = df[df["workload"] == "web"]
    found, ok = [], True
    for facet, rows in by_facet(web):
        for baseline in ("tls1.2", "tls1.3"):
            gains = [relative_gain(rows, m, baseline) for m in (CONNECTION, TTFB, DOWNLOAD)]
            if not np.isfinite(gains).any():
                continue
            # NaN (no significant difference) means QUIC did not win there.
            ok &= bool(np.all(np.nan_to_num(gains) > 0) and gains[0] >= gains[1] >= gains[2])
            found.append(
                f"{facet}, vs {protocol_label(baseline)}: QUIC's median gain "
                + " → ".join("n.s." if not np.isfinite(g) else f"{100 * g:.0f}%" for g in gains)
                + " (connection → TTFB → download; n="
                + "/".join(str(len(protocol_values(rows, TTFB, p))) for p in ("quic", baseline))
                + ")"
            )
    if not found:
        return no_data(f"needs web rows of QUIC and a TLS baseline (≥{MIN_N} each)")
    return verdict(ok, found)


FAST_LINKS = f"on a link of {RECEIVER_CPU_MBIT:g} Mbit/s or more (germany-lab)"
SLOW_LINKS = f"on a link below {RECEIVER_CPU_MBIT:g} Mbit/s"
RECEIVER_REGIME = (
    f"judged only on links of {RECEIVER_CPU_MBIT:g} Mbit/s or more (germany-lab), where on this "
    "host the receiver's CPU decides it: the client is the receiver, the server the sender, and "
    "the two share the host's cores; where the sender saturates a core and the receiver does "
    "not, the path is not decided"
)
# A rate's finding only (link_limits): CPU per byte is the receiver's whatever sets the rate.
LINK_REGIME = (
    f"; nor is a rate's where both sides reach {LINK_FILLED:.2f} of the TCP model of the link "
    "with their receivers unsaturated: the link sets the rate there"
)
# The report's method for those two findings (Direction.test), after the test's own words.
RECEIVER_TEST = (
    f"; on the links of {RECEIVER_CPU_MBIT:g} Mbit/s or more only (the receiver's CPU decides it "
    f"there); a path where the server saturated a core ({SATURATED_PCT:g} %) and the client did "
    f"not in over {100 * cpu_bound.CPU_BOUND_SHARE_MAX:g} % of a protocol's trials is not decided"
)
LINK_TEST = (
    f", and so is a path where both protocols reach {LINK_FILLED:.2f} of the TCP model of the "
    "link with their receivers unsaturated (the link limits there)"
)


def _numbers(rows: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats, NaN where a row (or the whole table) has none."""
    if column not in rows:
        return pd.Series(np.nan, index=rows.index, dtype=float)
    return pd.to_numeric(rows[column], errors="coerce").astype(float)


def on_fast_link(rows: pd.DataFrame) -> pd.Series:
    """The rows of links of RECEIVER_CPU_MBIT or more, by their configured down rate (a row
    without one counts as a slower link's)."""
    return _numbers(rows, "rate_down_mbit") >= RECEIVER_CPU_MBIT


def in_regime(rows: pd.DataFrame, small: bool) -> pd.DataFrame:
    """A throughput finding's rows: files ≤ 20 MB on the links below RECEIVER_CPU_MBIT (the
    handshake's and slow start's regime), files > 20 MB on the links of it or more (the
    receiver's CPU's)."""
    # "≤ 20 MB" includes a 20 MB file however its megabytes were counted.
    small_rows = (rows["object_bytes"] <= SMALL_FILE) | near(rows["object_bytes"], SMALL_FILE)
    return rows[(small_rows == small) & (on_fast_link(rows) != small)]


def throughput_direction(small: bool) -> Callable[[pd.DataFrame], Verdict]:
    """QUIC's cloud throughput against TLS 1.2's, every file of the regime's sizes paired
    round by round (one test per path); QUIC higher for small files, TLS 1.2 for large,
    which the receiver's CPU decides (receiver_decided)."""

    def check(df: pd.DataFrame) -> Verdict:
        rows = in_regime(CLOUD_THROUGHPUT.rows(df), small)
        decide = Decide("throughput", "quic", "tls1.2")
        if small:
            none = f"no cloud file ≤ 20 MB over QUIC and TLS 1.2 {SLOW_LINKS}"
            return decided_by_facet(rows, decide, "A > B", "Mbit/s", none)
        none = f"no cloud file > 20 MB over QUIC and TLS 1.2 {FAST_LINKS}"
        return receiver_decided(rows, decide, "A < B", "Mbit/s", none, link_bound=True)

    return check


def receiver_decided(
    rows: pd.DataFrame, decide: Decide, claimed: str, unit: str, none: str, link_bound: bool = False
) -> Verdict:
    """decided_by_facet for a finding the receiver's CPU decides: each facet (a path's
    server) by its test, but not decided where the sender limits (sender_limits, the test's
    line beside it), nor, for a rate (`link_bound`), where the link does (link_limits: CPU
    per byte is the receiver's whatever sets the rate); both ends' CPU and the CPU-bound
    trials beside each, and the regime."""
    found, statuses = [], []
    for facet, in_facet in by_facet(rows):
        status, line = paired(in_facet, decide, claimed)
        if status == NO_DATA:
            continue
        limit = sender_limits(in_facet, decide) or (link_limits(in_facet, decide) if link_bound else None)
        if limit is not None:
            status, line = NOT_DECIDED, f"{limit}; the test alone: {line}"
        statuses.append(status)
        medians = _medians(in_facet, decide.column, (decide.a, decide.b), unit)
        found += [f"{facet}: {medians}; {line}", f"{facet}, {ends_cpu(in_facet, decide)}"]
    regime = RECEIVER_REGIME + (LINK_REGIME if link_bound else "")
    return combined(statuses, [*found, regime]) if found else no_data(none)


def _in_group(rows: pd.DataFrame, group: str) -> pd.Series:
    """Which rows are a decide line's side (a protocol, a client label, or TCP)."""
    labels = rows["client"] if "client" in rows else rows["protocol"]
    inside = [decisions.member(p, c, group) for p, c in zip(rows["protocol"], labels, strict=True)]
    return pd.Series(inside, index=rows.index, dtype=bool)


def _receiver_cpu(rows: pd.DataFrame) -> pd.Series:
    """The client's CPU over the transfer (a browser's over its download: analysis/load.py),
    the container's where the rows were not loaded through it."""
    return _numbers(rows, CLOUD_CPU.column if CLOUD_CPU.column in rows else "cpu_client_pct")


def sender_limits(rows: pd.DataFrame, decide: Decide) -> str | None:
    """Why a path is not decided when its sender, not its receiver, set the rate: more than
    cpu_bound.CPU_BOUND_SHARE_MAX of a side's trials (the share past which a median is the
    slow trials', analysis/cpu_bound.py) had the server at SATURATED_PCT of a core or more
    and the client below it. None where no side did, or the server's CPU was not measured."""
    saturated = (_numbers(rows, "cpu_server_pct") >= SATURATED_PCT) & (_receiver_cpu(rows) < SATURATED_PCT)
    sides = []
    for group in (decide.a, decide.b):
        side = _in_group(rows, group)
        n, k = int(side.sum()), int((saturated & side).sum())
        if n and k > cpu_bound.CPU_BOUND_SHARE_MAX * n:
            sides.append(
                f"{group_name(group)}'s server at ≥ {SATURATED_PCT:g} % of a core, its client "
                f"below, in {k} of {n} trials"
            )
    if not sides:
        return None
    return f"{NOT_DECIDED}: the sender, not the receiver, limits here ({'; '.join(sides)})"


def link_limits(rows: pd.DataFrame, decide: Decide) -> str | None:
    """Why a path is not decided when the link, not the receiver, set both sides' rate:
    each side's median goodput is LINK_FILLED of the TCP model of the link or more
    (physics.tcp_download_s, its own handshake's RTTs) and its receiver stayed below
    SATURATED_PCT in all but cpu_bound.CPU_BOUND_SHARE_MAX of its trials. None otherwise,
    or where a row lacks what the model needs."""
    shares = []
    for group in (decide.a, decide.b):
        side = rows[_in_group(rows, group)]
        filled = _median_model_share(side)
        saturated = int((_receiver_cpu(side) >= SATURATED_PCT).sum())
        if filled is None or filled < LINK_FILLED or saturated > cpu_bound.CPU_BOUND_SHARE_MAX * len(side):
            return None
        shares.append(f"{group_name(group)} at {filled:.2f}")
    return (
        f"{NOT_DECIDED}: the link, not the receiver, limits here ({' and '.join(shares)} of the "
        f"TCP model of the link, each receiver below {SATURATED_PCT:g} % of a core)"
    )


def _median_model_share(rows: pd.DataFrame) -> float | None:
    """The median over the rows of each one's goodput over the TCP model's for its file on
    its link; rows without a goodput (a failed trial), a size, a rate or an RTT are left out,
    and None when none is left."""
    shares = []
    for row in rows.to_dict("records"):
        size, rate = finite_number(row.get("object_bytes")), finite_number(row.get("rate_down_mbit"))
        rtt = finite_number(row.get("calib_rtt_ms")) or finite_number(row.get("rtt_ms"))
        mbit, setup = (
            finite_number(row.get(CLOUD_THROUGHPUT.column)),
            HANDSHAKE_RTTS.get(str(row.get("protocol"))),
        )
        if size and rate and rtt and mbit and setup is not None:
            shares.append(mbit / (size * 8 / tcp_download_s(size, rate, rtt, setup) / 1e6))
    return float(np.median(shares)) if shares else None


def ends_cpu(rows: pd.DataFrame, decide: Decide) -> str:
    """Both ends' CPU per side, and the trials flagged CPU-bound (the rows' cpu_bound: either
    end at SATURATED_PCT of a core, experiments/executor.py): "the ends' CPU (medians, % of
    one core): receiver (client) QUIC 18.0 vs TLS 1.2 9.00, sender (server) ...; CPU-bound
    trials QUIC 0 of 12, TLS 1.2 0 of 12"."""
    groups = [(group_name(g), _in_group(rows, g)) for g in (decide.a, decide.b)]
    bound = truthy(rows["cpu_bound"]) if "cpu_bound" in rows else pd.Series(False, index=rows.index)

    def medians(values: pd.Series) -> str:
        return " vs ".join(f"{name} {fmt(values[side].dropna().median())}" for name, side in groups)

    counts = ", ".join(f"{name} {int((bound & side).sum())} of {int(side.sum())}" for name, side in groups)
    return (
        f"the ends' CPU (medians, % of one core): receiver (client) {medians(_receiver_cpu(rows))}, "
        f"sender (server) {medians(_numbers(rows, 'cpu_server_pct'))}; CPU-bound trials {counts}"
    )


def cpu_ratio(df: pd.DataFrame) -> Verdict:
    """QUIC's client CPU above TLS 1.2's on bulk downloads, paired by round: the direction,
    fixed in advance. The magnitude is the median of the pairs' ratios with its CI, shown
    beside the paper's 2x and not tested against a line. Judged where the receiver's CPU
    decides it (links of RECEIVER_CPU_MBIT or more: receiver_decided), both ends' CPU beside."""
    rows = CLOUD_CPU.rows(df)
    # The client's CPU over the transfer (a browser's over its download: analysis/load.py).
    rows = rows.assign(cpu_client_pct=rows[CLOUD_CPU.column])
    bulk_file = (rows["object_bytes"] >= BULK_FILE) | near(rows["object_bytes"], BULK_FILE)
    bulk = rows[bulk_file & on_fast_link(rows)]
    decide = Decide("cpu_client", "quic", "tls1.2")
    v = receiver_decided(
        bulk,
        decide,
        "A > B",
        "% CPU",
        f"needs client CPU of cloud downloads of 50 MB or more over QUIC and TLS 1.2 {FAST_LINKS}",
    )
    ratios = [
        f"{facet}: {line}" for facet, in_facet in by_facet(bulk) if (line := cpu_ratio_line(in_facet, decide))
    ]
    return Verdict(v.status, (*v.found, *ratios))


def cpu_ratio_line(rows: pd.DataFrame, decide: Decide) -> str | None:
    """The median of the paired rounds' A/B ratios with its 95 % bootstrap CI, beside the
    paper's CPU ratio; None without a pair of two positive values."""
    pairs = decisions.pooled(decide, _runs(rows, decide.column))
    ratios = [x / y for x, y in pairs if x > 0 and y > 0 and np.isfinite(x) and np.isfinite(y)]
    if not ratios:
        return None
    a, b = group_name(decide.a), group_name(decide.b)
    return (
        f"{a}/{b} ×{fmt_est(median_ci(ratios))} over {len(ratios)} pairs (median ratio, 95% CI), "
        f"beside the paper's ×{PAPER_CPU_RATIO:g}: reported, not tested"
    )


def quic_vs_tcp(rows: pd.DataFrame, column: str) -> tuple[Comparison, str] | None:
    """QUIC against TLS/TCP pooled (video and streaming compare transports, as the paper)."""
    quic, tcp = rows[rows["protocol"] == "quic"], rows[rows["protocol"] != "quic"]
    xa, xb = quic[column].dropna(), tcp[column].dropna()
    if xa.empty or xb.empty:
        return None
    names = "/".join(protocol_label(p) for p in sorted(tcp["protocol"].unique()))
    return compare(xa, xb), f"TLS/TCP ({names})"


def video_direction(metric: str, quic_lower: bool, unit: str) -> Callable[[pd.DataFrame], Verdict]:
    """QUIC against TLS/TCP (the paper pools TLS 1.2 and 1.3 for video), paired by round."""

    def check(df: pd.DataFrame) -> Verdict:
        decide = Decide(metric, "quic", TCP)
        video = df[(df["workload"] == "video") & df[decide.column].notna()]
        claimed = "A < B" if quic_lower else "A > B"
        return decided_by_facet(video, decide, claimed, unit, "needs video rows over QUIC and TLS/TCP")

    return check


def streaming_by_loss(df: pd.DataFrame, column: str) -> list[tuple[float, Comparison, str]]:
    """Per loss rate, QUIC against TLS/TCP: every rate both transports played at, however few
    the sessions (the verdict asks `enough`; the numbers are shown either way)."""
    rows = df[(df["workload"] == STREAMING) & df[column].notna()]
    out = []
    for loss, group in sorted(rows.groupby(rows["loss_pct"].fillna(0)), key=lambda g: g[0]):
        result = quic_vs_tcp(group, column)
        if result is not None:
            out.append((float(loss), *result))
    return out


def too_few(found: list[str]) -> Verdict:
    """The numbers so far, without a verdict: fewer sessions than a verdict needs."""
    return Verdict(NO_DATA, (*found, f"fewer than {MIN_N} sessions a side: no verdict"))


def startup_line(loss: float, c: Comparison, tcp: str) -> str:
    return (
        f"{loss:g}% loss: QUIC {fmt(c.a.value)} vs {tcp} {fmt(c.b.value)} ms "
        f"({fmt(100 * c.relative)}%, n={c.a.n}/{c.b.n})"
    )


def first_rendition_lines(rows: pd.DataFrame) -> list[str]:
    """Per cell (condition × server), the rounds whose QUIC and TLS/TCP sessions started at
    different renditions: "caddy: QUIC started at 480p, TLS 1.3 at 360p in 4 of 10 sessions".
    dash.js chooses its start as deployed (issue 64: nothing pins it), and a higher first
    rendition costs a larger first segment, so beside such rounds a startup verdict may be
    the player's choice as much as the protocol's. [] where every round agreed."""
    if "first_rendition" not in rows:
        return []
    rows = rows[rows["first_rendition"].notna()]
    lines = []
    for _, cell in rows.groupby(["condition", "loss_pct", "server"], sort=True, dropna=False):
        apart = [text for other in decisions.TCP_PROTOCOLS if (text := _renditions_apart(cell, other))]
        if apart:
            lines.append(f"{_cell_name(rows, cell)}: " + "; ".join(apart))
    return lines


def _cell_name(rows: pd.DataFrame, cell: pd.DataFrame) -> str:
    """A cell as the verdict names it: its server, after its path and loss where the rows hold
    several ("india · 10% loss · caddy")."""
    parts = []
    if "profile" in rows and rows["profile"].nunique() > 1:
        parts.append(str(cell["profile"].iloc[0]))
    if rows["loss_pct"].nunique() > 1:
        parts.append(f"{float(cell['loss_pct'].iloc[0]):g}% loss")
    return " · ".join([*parts, str(cell["server"].iloc[0])])


def _first_by_round(cell: pd.DataFrame, protocol: str) -> dict[tuple, str]:
    """A protocol's first rendition in each of the cell's rounds (run, object, repetition)."""
    mine = cell[cell["protocol"] == protocol]
    keys = [c for c in ("run_id", "object", "repetition") if c in mine]
    rounds = mine[keys].itertuples(index=False, name=None)
    return dict(zip(rounds, mine["first_rendition"].astype(str), strict=True))


def _renditions_apart(cell: pd.DataFrame, other: str) -> str:
    """Each way QUIC's and `other`'s sessions of a round started apart, with how often ("QUIC
    started at 480p, TLS 1.3 at 360p in 4 of 10 sessions"); "" when they all started alike."""
    quic, theirs = _first_by_round(cell, "quic"), _first_by_round(cell, other)
    rounds = quic.keys() & theirs.keys()
    apart = Counter((quic[r], theirs[r]) for r in rounds if quic[r] != theirs[r])
    return "; ".join(
        f"QUIC started at {q}, {protocol_label(other)} at {t} in {n} of {len(rounds)} sessions"
        for (q, t), n in sorted(apart.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def startup_no_loss(df: pd.DataFrame) -> Verdict:
    """Similar: QUIC's startup over TLS/TCP's within STARTUP_SIMILAR_WITHIN either way, by an
    equivalence test (two one-sided sign tests), not by the absence of a difference."""
    cells = [cell for cell in streaming_by_loss(df, "startup_delay_ms") if cell[0] == 0]
    if not cells:
        return no_data("needs streaming sessions without loss over both transports")
    rows = df[(df["workload"] == STREAMING) & (df["loss_pct"].fillna(0) == 0)]
    decide = Decide("startup_delay", "quic", TCP, similar_within=STARTUP_SIMILAR_WITHIN)
    status, line = paired(rows, decide, "similar")
    return Verdict(status, (startup_line(*cells[0]), line, *first_rendition_lines(rows)))


# The loss rates the paper states its streaming findings at: a finding judged at others says so.
PAPER_STARTUP_LOSS = 5.0  # "≈40 % at 5 % loss"
PAPER_STALL_LOSS = 10.0  # "up to 50 % at 10 %"


def judged_at_loss(losses: list[float], paper: float) -> list[str]:
    """A line saying the finding was judged at other loss rates than the paper states ([]
    when it was judged at the paper's alone)."""
    if all(np.isclose(loss, paper) for loss in losses):
        return []
    return [f"judged at {'/'.join(f'{loss:g}' for loss in losses)}% loss, where the paper states {paper:g}%"]


def startup_with_loss(df: pd.DataFrame) -> Verdict:
    """QUIC starts sooner under loss: every lossy rate's sessions paired by round in one test."""
    cells = [cell for cell in streaming_by_loss(df, "startup_delay_ms") if cell[0] > 0]
    if not cells:
        return no_data("needs streaming sessions under loss over both transports")
    rows = df[(df["workload"] == STREAMING) & (df["loss_pct"].fillna(0) > 0)]
    status, line = paired(rows, Decide("startup_delay", "quic", TCP), "A < B")
    where = judged_at_loss([cell[0] for cell in cells], PAPER_STARTUP_LOSS)
    starts = first_rendition_lines(rows)
    return Verdict(status, (*(startup_line(*cell) for cell in cells), line, *starts, *where))


def stall_rows(df: pd.DataFrame) -> pd.DataFrame:
    """One row per stall (loss, protocol, duration), from the sessions' duration lists."""
    rows = df[df["workload"] == STREAMING][["loss_pct", "protocol", "stall_durations_ms"]]
    rows = rows.assign(stall_durations_ms=rows["stall_durations_ms"].map(listed))
    rows = rows.explode("stall_durations_ms").dropna(subset=["stall_durations_ms"])
    return rows.rename(columns={"stall_durations_ms": "stall_ms"}).astype({"stall_ms": float})


def stalls_longer(df: pd.DataFrame) -> Verdict:
    """TLS/TCP stalls longer at the highest loss: each round's sessions paired on the time
    they spent stalled (a session without a stall counts 0 ms; rounds where both sides had
    none say nothing of the direction and drop out), in one sequential sign test over the
    servers. A QUIC session often has no stall to compare stall by stall, so the stalls'
    own medians are shown beside it, not judged."""
    rows = df[(df["workload"] == STREAMING) & df["stall_total_ms"].notna()]
    highest = rows["loss_pct"].fillna(0).max() if len(rows) else 0
    if highest <= 0:
        return no_data("needs streaming sessions under loss over both transports")
    rows = rows[rows["loss_pct"].fillna(0) == highest]
    found = [f"{highest:g}% loss: " + _medians(rows, "stall_total_ms", ("quic", TCP), "ms stalled a session")]
    stalls = stall_rows(rows)
    result = quic_vs_tcp(stalls, "stall_ms") if len(stalls) else None
    if result is not None:
        c, tcp = result
        found.append(
            f"median stall {tcp} {fmt(c.b.value)} ms vs QUIC {fmt(c.a.value)} ms (stalls n={c.b.n}/{c.a.n})"
        )
    status, line = paired(rows, Decide("stall_total", "quic", TCP), "A < B")
    return Verdict(status, (*found, line, *judged_at_loss([float(highest)], PAPER_STALL_LOSS)))


# Quality switches (issue 64, decision 4), registered before the data: per protocol, each
# session's switches at the highest loss against the session of its round at 0 % (same
# server and path), all of a protocol's pairs in round order in one sign test by betting,
# valid however many rounds the startup lines' stopping ran. One-sided at α: `direction`
# runs each side at α/2, so it is given 2α, and "switches rise" (holds) and "they fall"
# (does not hold) are each shown at an error of at most α.
SWITCHES = "quality_switches"
# Where a session ran, its loss rate aside: the sessions a pair joins share all of it.
SESSION_PLACE = ("run_id", "profile", "server", "client", "object")


def switches_rise(df: pd.DataFrame, alpha: float = DEFAULT_ALPHA) -> Verdict:
    """Switches per session rise from 0 % to the highest loss, for every protocol."""
    rows = df[(df["workload"] == STREAMING) & df[SWITCHES].notna()]
    if "error" in rows:
        rows = rows[rows["error"].fillna("") == ""]
    loss = rows["loss_pct"].fillna(0)
    highest = float(loss.max()) if len(rows) else 0.0
    if highest <= 0 or not (loss == 0).any():
        return no_data("needs quality switches of streaming sessions at 0% loss and under loss")
    found: list[str] = []
    statuses: list[str] = []
    for protocol in ordered_protocols(rows["protocol"]):
        mine, name = rows[rows["protocol"] == protocol], protocol_label(protocol)
        status, line = switch_test(name, loss_pairs(mine, SWITCHES, highest), highest, alpha)
        statuses.append(status)
        found += [switch_counts(mine, name, highest), line]
    return combined(statuses, found)


def loss_pairs(rows: pd.DataFrame, column: str, high: float) -> list[tuple[float, float]]:
    """(the value at `high` loss, the value at 0 %) of the sessions of one round at one place,
    in round order: round 0 of every place, then round 1, ... A round that ran at one of the
    two rates only (its condition stopped sooner) has no pair."""
    if "repetition" not in rows:
        return []  # no rounds to pair
    place = [c for c in SESSION_PLACE if c in rows]
    # As text, so that a place column the rows leave empty still joins its sessions.
    keyed = rows.assign(**{c: rows[c].astype(str) for c in place})
    loss = rows["loss_pct"].fillna(0).to_numpy(dtype=float)
    sides = {
        side: keyed[at].groupby([*place, "repetition"])[column].median()
        for side, at in (("high", np.isclose(loss, high)), ("zero", loss == 0))
    }
    both = pd.concat(sides, axis=1).dropna().reset_index()
    both = both.sort_values(["repetition", *place], kind="stable")
    return list(zip(both["high"].astype(float), both["zero"].astype(float), strict=True))


def switch_test(name: str, pairs: list[tuple[float, float]], high: float, alpha: float) -> tuple[str, str]:
    """A protocol's switches at `high` loss against 0 %, one-sided at alpha each way (see
    SWITCHES), and a line saying how its pairs decided it."""
    if not pairs:
        return NO_DATA, f"{name}: no round played at both {high:g}% and 0% loss"
    one_sided = 2 * alpha  # `direction` tests each side at its alpha / 2
    more, fewer = decisions.signs(pairs)
    if more + fewer == 0:
        return NOT_DECIDED, (
            f"{name}: as many switches at {high:g}% as at 0% loss in all {len(pairs)} pairs: not "
            f"decided; at least {decisions.fewest_rounds(one_sided)} pairs that differ would decide"
        )
    v = sequential_direction(pairs, one_sided)
    told = f"{name}: more switches at {high:g}% than at 0% loss in {more} of {more + fewer} pairs"
    if not v.decided:
        need = decisions.pairs_needed(more, fewer, v.rounds, one_sided)
        tail = f"; about {need} pairs would decide at this effect" if need else ""
        return NOT_DECIDED, f"{told}: not decided after {v.rounds} pairs{tail}"
    if v.decision == "A > B":
        return HOLDS, f"{told}, decided at pair {v.rounds}"
    return FAILS, f"{told}: decided fewer switches at {high:g}% at pair {v.rounds}"


def switch_counts(rows: pd.DataFrame, name: str, high: float) -> str:
    """A protocol's switches a session at 0 % and at `high` loss (means, as counts add up),
    down and up beside them where the rows split them."""
    loss = rows["loss_pct"].fillna(0).to_numpy(dtype=float)
    at = (rows[loss == 0], rows[np.isclose(loss, high)])

    def means(column: str) -> str:
        return " → ".join(fmt(side[column].mean()) for side in at)

    line = (
        f"{name}: switches a session {means(SWITCHES)} from 0% to {high:g}% loss "
        f"(means; n={len(at[0])}/{len(at[1])})"
    )
    split = ("switches_down", "switches_up")
    if all(c in rows and side[c].notna().all() for c in split for side in at):
        return f"{line}, down {means('switches_down')}, up {means('switches_up')}"
    return f"{line}, total switches only: the rows do not split them into down and up"


def lowest_144p(df: pd.DataFrame) -> Verdict:
    rows = df[(df["workload"] == STREAMING) & (df["loss_pct"] >= 5)]
    rows = rows[rows["lowest_quality"].notna()]
    if rows.empty:
        return no_data("needs streaming sessions at 5% loss or more")
    groups = dict(iter(rows.groupby("protocol")))
    lowest = {protocol_label(p): lowest_quality(g["lowest_quality"]) for p, g in groups.items()}
    found = [
        "lowest quality at ≥5% loss: "
        + ", ".join(
            f"{protocol_label(p)} {lowest[protocol_label(p)]} (n={len(g)})" for p, g in groups.items()
        )
    ]
    reached = all(q == "144p" for q in lowest.values())
    # A minimum only falls with more sessions: 144p everywhere holds at any n, but a protocol
    # that never fell that far may yet, so "does not hold" needs the sessions of a verdict.
    if not reached and min(len(g) for g in groups.values()) < MIN_N:
        return too_few(found)
    return verdict(reached, found)


# What a handshake finding reads: every transfer tool's rows (a handshake is a handshake
# whatever is fetched after it), as CONNECTION.rows selects them.
TRANSFERS = transfer_kinds()

# How each finding is judged: the report's method names it beside the finding.
PAIRED = "a sequential sign test by betting over its paired rounds at α 0.01, one per condition and server"
NO_TEST = "no test: "
# dash.js starts where it chooses (issue 64), so the startup findings name the rounds whose
# protocols started at different renditions.
FIRST_RENDITIONS = (
    "; rounds whose QUIC and TLS/TCP sessions started at different renditions are named, per server"
)

DIRECTIONS: list[Direction] = [
    Direction(
        "Handshake arithmetic (first connection): QUIC 1 RTT, TLS 1.3 2 RTT, " "TLS 1.2 3 RTT",
        handshake_rtts,
        rests_on=TRANSFERS,
        test=NO_TEST + "each protocol's median handshake in RTTs within the tolerance of "
        "analysis/physics.py of 1, 2 and 3 RTT (≥ 10 handshakes a protocol): on the wire, net of "
        "both ends' turns, within 1 %; without captures, net of the client's CPU, within "
        "max(+3 %, +1.5 ms)",
    ),
    Direction(
        "Connection time: QUIC < TLS 1.3 < TLS 1.2",
        connection_order,
        rests_on=TRANSFERS,
        test=PAIRED + ", for each neighbouring pair of protocols",
    ),
    Direction(
        "The connection-time gap is much larger on the longest-RTT path than on the "
        "shortest (paper: QUIC faster by 445/409 ms vs TLS 1.2/1.3 from India, 270/300 ms "
        "from Germany)",
        long_path_gap,
        rests_on=TRANSFERS,
        test=NO_TEST + "the 95% bootstrap CIs of QUIC's lead (Δ median) on the longest and the "
        "shortest path must not overlap (≥ 10 trials a side)",
    ),
    Direction(
        "TTFB and download time of small pages: QUIC still wins, but the relative "
        "gain shrinks as the connection proceeds",
        gain_shrinks,
        rates_of=("web",),
        rests_on=("web",),
        test="Welch's t-test and Mann–Whitney U on each of connection time, TTFB and download "
        "time (a gain counts when both give p < 0.01 with ≥ 10 trials a side); the gains must "
        "fall in that order",
    ),
    Direction(
        "Cloud storage: QUIC has the higher throughput for files ≤ 20 MB",
        throughput_direction(small=True),
        rates_of=("cloud",),
        rests_on=("cloud",),
        test=PAIRED + f", every file of the regime's sizes, on the links below {RECEIVER_CPU_MBIT:g} Mbit/s",
    ),
    Direction(
        "Cloud storage: TLS 1.2 has the higher throughput for files > 20 MB",
        throughput_direction(small=False),
        rates_of=("cloud",),
        rests_on=("cloud",),
        test=PAIRED + ", every file of the regime's sizes" + RECEIVER_TEST + LINK_TEST,
    ),
    Direction(
        "QUIC's client uses more CPU than TLS 1.2's on a bulk download (paper: about 2×, ≈90% vs "
        "≈50% on 200 MB; judged on files of 50 MB or more, the ratio shown beside the paper's)",
        cpu_ratio,
        rates_of=("cloud",),
        rests_on=("cloud",),
        test=PAIRED + ", on the direction fixed in advance (QUIC above TLS 1.2); the ratio's 95% "
        "bootstrap CI is reported beside the paper's 2×, not tested" + RECEIVER_TEST,
    ),
    Direction(
        "Video: handshakes to the media servers are faster over QUIC "
        "(534 ms from India, 406 ms from Germany)",
        video_direction("connection_time", quic_lower=True, unit="ms"),
        rests_on=("video",),
        test=PAIRED + ", TLS 1.2 and 1.3 pooled as TLS/TCP",
    ),
    Direction(
        "Video: the overall download rate is higher over TLS/TCP",
        video_direction("throughput", quic_lower=True, unit="Mbit/s"),
        rates_of=("video",),
        rests_on=("video",),
        test=PAIRED + ", TLS 1.2 and 1.3 pooled as TLS/TCP",
    ),
    Direction(
        "Streaming: startup delay is similar without loss",
        startup_no_loss,
        rests_on=(STREAMING,),
        test=f"an equivalence test: two one-sided sequential sign tests at α 0.01 against "
        f"×{STARTUP_SIMILAR_WITHIN:g} either way, over the paired rounds at 0% loss" + FIRST_RENDITIONS,
    ),
    Direction(
        "Streaming: with loss QUIC starts faster (≈40% at 5% loss)",
        startup_with_loss,
        rates_of=(STREAMING,),
        rests_on=(STREAMING,),
        test=PAIRED.removesuffix(", one per condition and server")
        + ", every lossy rate's sessions in one test"
        + FIRST_RENDITIONS,
    ),
    Direction(
        "Streaming: TLS/TCP stalls last longer at high loss (up to 50% at 10%; judged on each "
        "session's time stalled)",
        stalls_longer,
        rates_of=(STREAMING,),
        rests_on=(STREAMING,),
        test=PAIRED.removesuffix(", one per condition and server") + " on each session's time stalled at "
        "the highest loss, over the servers (pairs where neither side stalled are ties)",
    ),
    Direction(
        "Streaming: quality switches rise with loss for both protocols",
        switches_rise,
        rates_of=(STREAMING,),
        rests_on=(STREAMING,),
        test="a sequential sign test by betting, one-sided at α 0.01 (a rise holds it, a fall "
        "decides it does not hold), per protocol: each session's switches at the highest loss "
        "paired with its round's session at 0% (same server and path), all pairs in round "
        "order; down- and up-switches shown beside it",
    ),
    Direction(
        "Streaming: the lowest quality falls to 144p at 5–10% loss",
        lowest_144p,
        rates_of=(STREAMING,),
        rests_on=(STREAMING,),
        test=NO_TEST + 'the lowest rendition played at ≥ 5% loss, per protocol ("does not hold" '
        "needs ≥ 10 sessions a side)",
    ),
]


def condition_outcomes(exp: Expectation, ok: pd.DataFrame) -> list[tuple[str, Outcome]]:
    """One outcome per condition with successful rows, against its configured link (the
    rows carry it) and its calibrated RTT."""
    out = []
    for condition, rows in ok.groupby("condition", sort=True):
        label = rows["condition_label"].dropna()
        name = f"{condition} {label.iloc[0]}" if len(label) else str(condition)
        rtt = float(pd.to_numeric(rows["rtt_ms"], errors="coerce").median())
        rate = float(pd.to_numeric(rows["rate_down_mbit"], errors="coerce").median())
        out.append((name, expectations.judge(exp, rows, rtt, rate)))
    return out


def expectation_claim(exp: Expectation) -> Direction:
    """An experiment's `expect:` line as a claim: it holds if it passes in every condition."""

    def check(ok: pd.DataFrame) -> Verdict:
        outcomes = condition_outcomes(exp, ok)
        if not outcomes:
            return no_data("no successful trials")
        return verdict(
            all(o.passed for _, o in outcomes),
            [f"{name}: {o.detail}" + ("" if o.passed else " (fails)") for name, o in outcomes],
        )

    return Direction(f"expect: {exp.text}", check)


def resting_on_flagged(ok: pd.DataFrame, kinds: tuple[str, ...]) -> str | None:
    """'rests on nginx's QUIC (12 of 40 trials), not loss-responsive', when rows of these kinds
    include trials flagged by analysis/loss_response.py; else None."""
    if not kinds or "loss_response" not in ok:
        return None
    stacks = flagged_stacks(ok[ok["workload"].isin(kinds)])
    if not stacks:
        return None
    return f"rests on {' and '.join(stacks)}, not loss-responsive (see Congestion response)"


def with_caveat(ok: pd.DataFrame, d: Direction, v: Verdict) -> Verdict:
    caveat = resting_on_flagged(ok, d.rates_of)
    return v if caveat is None else Verdict(v.status, (*v.found, caveat))


def without_cpu_bound(ok: pd.DataFrame, d: Direction) -> Verdict:
    """A paper finding judged without a browser's loads on a path that were too often
    CPU-bound (analysis/cpu_bound.py): its verdict says which and what it rests on instead,
    and shows their own figures beside it, flagged as not judged."""
    kept, apart, said = cpu_bound.set_apart(ok, d.rests_on)
    v = with_caveat(kept, d, d.check(kept))
    if apart.empty:
        return v
    figures = d.check(apart)
    shown = cpu_bound.flagged(figures.found) if figures.status != NO_DATA else ()
    return Verdict(v.status, (*v.found, *said, *shown))


def evaluate(ok: pd.DataFrame, claims: list[Direction] | None = None) -> list[tuple[Direction, Verdict]]:
    """Every claim against the successful rows (default: the paper's findings); a claim whose
    rates rest on a sender that is not loss-responsive says so in its verdict's text. The
    paper's findings leave out CPU-bound browser loads (without_cpu_bound); an experiment's own
    `expect:` lines judge the clients they name, as `quicbed check` does."""
    if claims is None:
        return [(d, without_cpu_bound(ok, d)) for d in DIRECTIONS]
    return [(d, with_caveat(ok, d, d.check(ok))) for d in claims]
