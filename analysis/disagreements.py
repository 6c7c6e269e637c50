"""Where the stacks disagree about a physical fact (issue 32): per profile, a server (or client)
stack whose goodput of the TCP model or whose handshake RTTs differ from the other stacks'
beyond the statistics, said in one line with its numbers and why, from measured evidence only.

The comparison: each stack's trials are pooled over its partners (a server's over the clients,
a client's over the servers) within one kind of transfer: goodput per transport (QUIC against
QUIC, TCP against TCP: the model's share already nets out TLS 1.2's extra round trip), the
handshake per protocol (TLS 1.2 takes 3 RTTs where TLS 1.3 takes 2, so they cannot pool). A
stack disagrees when (a) the 95 % CI of its median does not overlap the CI of the median of all
the other stacks' trials pooled, and (b) the medians are at least MATERIAL apart: with dozens of
trials the CIs separate on differences far below what any check of the matrix judges by.

Why, for goodput: the measured initial windows (stacks.measured_windows) put into the model's
slow start (physics.slow_start_deficit_s) say how much of the download-time gap the window
difference accounts for; without captures the line says the reason is not measured. For the
handshake: the rows net out the client's CPU only, so what remains is named, not attributed.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .model import protocol_label
from .physics import (
    HANDSHAKE_RTTS,
    TCP_PAYLOAD,
    net_connection_rtts,
    slow_start_deficit_s,
    slow_start_rounds,
)
from .stack_matrix import fresh_rows, model_and_measured_s
from .stacks import StackWindow, transport
from .stats import Estimate, finite_number, median_ci

# Half the matrix's 3 % bands (GOODPUT_OF_MODEL 0.97, CONNECTION_EXCESS 3 %): a smaller gap
# could not move a cell across a verdict, however tight its CIs.
MATERIAL = 0.015
# A stack needs three trials: the bootstrap CI of a median of fewer collapses onto one value.
MIN_TRIALS = 3
# "The others" must be at least two stacks, or which of a disagreeing pair is the odd one out
# is a coin toss: the comparison is symmetric.
MIN_STACKS = 3
ROLES = ("server", "client")
CAPTURE_HOW = "run with `--capture pcap,keys` and report again"


@dataclass(frozen=True)
class Disagreement:
    profile: str
    role: str  # "server" or "client": whose stack is pooled over the other's
    stack: str
    metric: str  # "goodput" (of the TCP model) or "handshake" (RTTs net of the client's CPU)
    group: str  # goodput: "QUIC" or "TCP"; handshake: the protocol's label
    own: Estimate
    others: Estimate  # every other stack's trials, pooled
    other_medians: tuple[float, ...]  # each other stack's own median
    others_names: tuple[str, ...]
    why: str

    def line(self) -> str:
        low, high = min(self.other_medians), max(self.other_medians)
        spread = f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}–{high:.2f}"
        unit = "of the model" if self.metric == "goodput" else "RTT"
        pooled = f"all their trials: {_ci(self.others, unit)}"
        if self.metric == "goodput":
            return (
                f"{self.profile}: {self._subject()} reaches {_ci(self.own, unit)} where "
                f"{self._peers()} reach {spread} ({pooled}). Why: {self.why}"
            )
        return (
            f"{self.profile}: {self._subject()} handshake takes {_ci(self.own, unit)}, net of the "
            f"client's CPU, where {self._peers()} take {spread} ({pooled}). Why: {self.why}"
        )

    def _subject(self) -> str:
        if self.role == "server":
            return f"{self.stack}'s {self.group}"
        return f"the client {self.stack}'s {self.group}"

    def _peers(self) -> str:
        return (
            f"the other servers' {self.group}" if self.role == "server" else f"the other {self.group} clients"
        )


def _ci(e: Estimate, unit: str) -> str:
    return f"{e.value:.2f} {unit} [{e.lo:.2f}, {e.hi:.2f}]"


def lines(df: pd.DataFrame, windows: Sequence[StackWindow] = ()) -> list[str]:
    """The report's lines: one per disagreeing stack, none when every stack agrees."""
    return [d.line() for d in find(df, windows)]


def find(df: pd.DataFrame, windows: Sequence[StackWindow] = ()) -> list[Disagreement]:
    samples = trial_samples(fresh_rows(df))
    if samples.empty:
        return []
    out: list[Disagreement] = []
    for (profile, metric, group), rows in samples.groupby(["profile", "metric", "group"], sort=False):
        for role in ROLES:
            out += _odd_ones(str(profile), str(metric), str(group), role, rows, windows)
    return out


def trial_samples(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per trial and metric: the goodput's model share, the handshake's net RTTs, and
    what the explanations need (the model's time, the link, the client's CPU, cpu_bound)."""
    out = []
    for _, r in rows.iterrows():
        protocol = str(r["protocol"])
        setup = HANDSHAKE_RTTS.get(protocol)
        rtt, connection = finite_number(r.get("calib_rtt_ms")), finite_number(r.get("connection_time_ms"))
        if setup is None or not rtt:
            continue
        base = {
            "profile": r["profile"],
            "server": str(r["server"]),
            "client": str(r["client"]),
            "rtt_ms": rtt,
            "rate_mbit": finite_number(r.get("rate_down_mbit")),
            "client_cpu_ms": finite_number(r.get("client_cpu_ms")),
            "cpu_bound": r.get("cpu_bound") in (True, 1),  # a bool, or NaN where a row lacks it
        }
        times = model_and_measured_s(r, setup)
        if times:
            model_s, took_s = times
            out.append(
                base
                | {
                    "metric": "goodput",
                    "group": transport(protocol),
                    "value": model_s / took_s,
                    "model_s": model_s,
                }
            )
        if connection is not None:
            net = net_connection_rtts(connection, base["client_cpu_ms"], rtt)
            out.append(
                base
                | {"metric": "handshake", "group": protocol_label(protocol), "value": net, "model_s": None}
            )
    return pd.DataFrame(out)


def beyond_statistics(own: Estimate, others: Estimate) -> bool:
    """The module's rule: CIs apart and the medians at least MATERIAL apart."""
    apart = own.hi < others.lo or own.lo > others.hi
    return apart and abs(own.value - others.value) >= MATERIAL * abs(others.value)


def _odd_ones(
    profile: str, metric: str, group: str, role: str, rows: pd.DataFrame, windows: Sequence[StackWindow]
) -> Iterator[Disagreement]:
    values = {
        str(stack): part["value"].to_numpy(dtype=float)
        for stack, part in rows.groupby(role, sort=False)
        if len(part) >= MIN_TRIALS
    }
    if len(values) < MIN_STACKS:
        return
    for stack, own_values in values.items():
        others = [s for s in values if s != stack]
        own = median_ci(own_values)
        pooled = median_ci(np.concatenate([values[s] for s in others]))
        if not beyond_statistics(own, pooled):
            continue
        mine = rows[rows[role] == stack]
        if metric == "goodput":
            why = _goodput_why(role, stack, group, others, own, pooled, rows, mine, windows)
        else:
            why = _handshake_why(role, stack, group, own, pooled, mine, windows)
        medians = tuple(float(np.median(values[s])) for s in others)
        yield Disagreement(profile, role, stack, metric, group, own, pooled, medians, tuple(others), why)


# --- why: goodput --------------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowShare:
    """What the initial-window difference costs in the model's slow start, against the gap."""

    own_packets: int
    others_packets: int
    own_bytes: float
    others_bytes: float
    extra_rounds: int  # the stack's slow-start rounds less the others'
    window_s: float  # the time the window difference costs the stack (negative: saves it)
    gap_s: float  # the stack's download time less the others', at the median shares
    base_s: float  # the others' download time

    def text(self) -> str:
        windows = (
            f"initial window {self.own_packets} vs {self.others_packets} packets "
            f"({self.own_bytes / 1000:.1f} vs {self.others_bytes / 1000:.1f} KB, measured)"
        )
        gap = f"{_pct(self.gap_s / self.base_s)} {_longer(self.gap_s)} download"
        if self.window_s == 0:
            return f"{windows}: the same slow start, so the windows do not explain its {gap}"
        rounds = (
            f"{abs(self.extra_rounds)} slow-start round{'s' if abs(self.extra_rounds) > 1 else ''} "
            f"{'more' if self.extra_rounds > 0 else 'fewer'}"
            if self.extra_rounds
            else f"as many slow-start rounds, each carrying {'less' if self.window_s > 0 else 'more'}"
        )
        cost = (
            f"{abs(self.window_s):.2f} s {_longer(self.window_s)} than the others' "
            f"{self.base_s:.1f} s download"
        )
        if (self.window_s > 0) != (self.gap_s > 0):
            return f"{windows}: {rounds}, {cost}, against its {gap}: the windows do not explain it"
        share = _pct(self.window_s / self.base_s)
        rest = "" if abs(self.window_s) < abs(self.gap_s) else ", all of it"
        return f"{windows}: {rounds}, {cost}, which accounts for {share} of its {gap}{rest}"


def _pct(fraction: float) -> str:
    return f"{abs(fraction) * 100:.1f} %"


def _longer(seconds: float) -> str:
    return "longer" if seconds > 0 else "shorter"


def window_share(
    own: StackWindow,
    others: Sequence[StackWindow],
    own_share: float,
    others_share: float,
    model_s: float,
    rate_mbit: float,
    rtt_ms: float,
) -> WindowShare:
    """The model's slow start from each measured window (in full-size segments' worth of its
    bytes: a QUIC packet carries less than a TCP segment) and the download times the two
    model shares mean for the same transfer."""
    others_bytes = statistics.median(w.bytes for w in others)
    own_iw, others_iw = own.bytes / TCP_PAYLOAD, others_bytes / TCP_PAYLOAD
    return WindowShare(
        own_packets=own.packets,
        others_packets=round(statistics.median(w.packets for w in others)),
        own_bytes=own.bytes,
        others_bytes=others_bytes,
        extra_rounds=slow_start_rounds(rate_mbit, rtt_ms, own_iw)
        - slow_start_rounds(rate_mbit, rtt_ms, others_iw),
        window_s=slow_start_deficit_s(rate_mbit, rtt_ms, own_iw)
        - slow_start_deficit_s(rate_mbit, rtt_ms, others_iw),
        gap_s=model_s / own_share - model_s / others_share,
        base_s=model_s / others_share,
    )


def _goodput_why(
    role: str,
    stack: str,
    group: str,
    others: list[str],
    own: Estimate,
    pooled: Estimate,
    rows: pd.DataFrame,
    mine: pd.DataFrame,
    windows: Sequence[StackWindow],
) -> str:
    busy = _cpu_bound(mine)
    if role == "client":
        return (
            "not measured: the servers, and so their initial windows, were the same for every "
            "client; the client's flights per round trip and losses would show in a capture "
            f"({CAPTURE_HOW}, then `quicbed explain RUN TRIAL`)" + busy
        )
    by_server = {w.server: w for w in windows if w.transport == group}
    mine_w, theirs = by_server.get(stack), [by_server[s] for s in others if s in by_server]
    if mine_w is None or not theirs:
        missing = f"{stack}'s {group}" if mine_w is None else f"the other servers' {group}"
        return (
            f"not measured: no captured trial shows the initial window of {missing}; {CAPTURE_HOW} "
            "to see whether the windows explain the gap" + busy
        )
    if not mine_w.reached or not all(w.reached for w in theirs):
        return (
            "not measured: a captured response fit in its first flight, so a window is only a "
            "lower bound; capture a transfer larger than the window" + busy
        )
    rate, rtt = rows["rate_mbit"].median(), rows["rtt_ms"].median()
    model_s = float(rows["model_s"].median())
    return window_share(mine_w, theirs, own.value, pooled.value, model_s, rate, rtt).text() + busy


def _cpu_bound(mine: pd.DataFrame) -> str:
    """The measured hint that the host, not the stack, set the pace: trials flagged cpu_bound."""
    flagged = int(mine["cpu_bound"].sum())
    if not flagged:
        return ""
    return f"; {flagged} of its {len(mine)} trials were flagged CPU-bound (`cpu_bound`)"


# --- why: handshake ------------------------------------------------------------------------------
def _handshake_why(
    role: str,
    stack: str,
    group: str,
    own: Estimate,
    pooled: Estimate,
    mine: pd.DataFrame,
    windows: Sequence[StackWindow],
) -> str:
    rtt = float(mine["rtt_ms"].median())
    extra_ms = (own.value - pooled.value) * rtt
    more = f"the {abs(extra_ms):.1f} ms {'more' if extra_ms > 0 else 'less'} than the others'"
    cpu = mine["client_cpu_ms"].dropna()
    if cpu.empty:
        netted = "these rows carry no client CPU (`client_cpu_ms`), so nothing is netted out and"
    else:
        netted = (
            f"the client's CPU (median {cpu.median():.1f} ms a trial) is netted out, so {more} are not it;"
        )
    captures = _handshake_capture(role, stack, group, windows)
    return f"{netted} the rows do not net out the server's time: {captures}"


def _handshake_capture(role: str, stack: str, group: str, windows: Sequence[StackWindow]) -> str:
    # A server's captured trials are its own; a client's are not among them (the windows pick
    # the perf tools' largest trials per server, whichever client ran them).
    kind = "QUIC" if group == protocol_label("quic") else "TCP"
    trials = [
        t for w in windows if role == "server" and w.transport == kind and w.server == stack for t in w.trials
    ]
    if trials:
        return f"`quicbed explain RUN {trials[0]}` shows when each flight of the handshake left"
    return f"captures would show whose time it is ({CAPTURE_HOW}, then `quicbed explain RUN TRIAL`)"
