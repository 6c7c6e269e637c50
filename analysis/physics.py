"""What a transfer should take on an emulated link: the arithmetic the measurements are
checked against (handshake RTTs, slow start, payload share of a frame)."""

from __future__ import annotations

import math

FRAME_BYTES = 1514  # MTU-sized Ethernet frame: what the bottleneck counts
TCP_PAYLOAD = 1448  # its TCP payload with timestamps
INITIAL_WINDOW = 10  # segments (RFC 6928, Linux's default)


def bdp_frames(rate_mbit: float, rtt_ms: float) -> float:
    """The bandwidth-delay product in full-size frames."""
    return rate_mbit * 1e6 * rtt_ms / 1e3 / (FRAME_BYTES * 8)


def slow_start_rounds(rate_mbit: float, rtt_ms: float, iw: float = INITIAL_WINDOW) -> int:
    """The round trips cwnd takes to double from `iw` (full-size segments) to the BDP."""
    bdp = bdp_frames(rate_mbit, rtt_ms)
    return max(0, math.ceil(math.log2(bdp / iw))) if bdp > iw else 0


def slow_start_deficit_s(rate_mbit: float, rtt_ms: float, iw: float = INITIAL_WINDOW) -> float:
    """Time lost while cwnd doubles from `iw` up to the bandwidth-delay product: each RTT of
    slow start sends cwnd frames where the link could carry a BDP's worth. `iw` may be a
    fraction: a window measured in bytes, in full-size segments' worth."""
    frame_s = FRAME_BYTES * 8 / (rate_mbit * 1e6)
    bdp = bdp_frames(rate_mbit, rtt_ms)
    return sum(bdp - iw * 2**k for k in range(slow_start_rounds(rate_mbit, rtt_ms, iw))) * frame_s


def tcp_download_s(size_bytes: float, rate_mbit: float, rtt_ms: float, setup_rtts: int) -> float:
    """Fresh connection, one GET, by the paper's definition (start to last byte): the
    setup RTTs (TCP + TLS), the request's RTT, slow start, then the payload at line rate.
    Ignores TLS record and HTTP/2 framing (~0.3%) and losses from slow-start overshoot."""
    payload_s = size_bytes * 8 * FRAME_BYTES / TCP_PAYLOAD / (rate_mbit * 1e6)
    return (setup_rtts + 1) * rtt_ms / 1e3 + slow_start_deficit_s(rate_mbit, rtt_ms) + payload_s


# The decided criteria for the perf tools' physics (issue 13). A fresh connection costs these
# RTTs before the request can leave:
HANDSHAKE_RTTS = {"quic": 1, "tls1.3": 2, "tls1.2": 3}
# The path, from captures: a fresh QUIC connection's Initial up + the server's flight down,
# ÷ the calibrated RTT, within 1 %.
PATH_TOLERANCE = 0.01
# The connection time net of the client's own time (its CPU from t_start to handshake done,
# `client_cpu_ms`) is at most 3 % above n RTT: the server's time and the flights'
# transmission are what may remain. The raw ratio is always shown beside it.
CONNECTION_EXCESS = 0.03
# In a run's rows (no captures: the server's time cannot be taken out), the connection time
# net of the client's CPU may exceed n RTT by max(3 %, ROW_EXCESS_MS).
ROW_EXCESS_MS = 1.5
# Runner and bench must agree on the client's own time within this (bench/handshake_bench.py).
RUNNER_CPU_MS = 0.5
# TLS 1.2's 10 MB goodput ÷ the TCP model of the link (tcp_download_s).
GOODPUT_OF_MODEL = 0.97


def net_connection_rtts(connection_ms: float, client_ms: float | None, rtt_ms: float) -> float:
    """Connection time less the client's measured own time, in RTTs (raw if not measured)."""
    own = client_ms if client_ms is not None and math.isfinite(client_ms) else 0.0
    return (connection_ms - own) / rtt_ms


def connection_within(rtts: int, net_ratio: float, raw_ratio: float) -> bool:
    """The bench's verdict: the measured connection no faster than n RTT (within the RTT's
    1 %), and net of client and server time at most 3 % above. The floor is the raw time's:
    endpoint time that overlaps a flight (the client's CPU while its ClientHello crosses) is
    subtracted though it added nothing, so the net ratio may fall below n (2.967 for TLS 1.2
    on germany, raw 3.059)."""
    return rtts * (1 - PATH_TOLERANCE) <= raw_ratio and net_ratio <= rtts * (1 + CONNECTION_EXCESS)


def row_connection_within(rtts: int, net_ratio: float, rtt_ms: float) -> bool:
    """A row's connection ÷ RTT net of the client's CPU only (no capture, so the server's time
    stays in): within max(+3 %, +1.5 ms) of n RTT."""
    return rtts * (1 - PATH_TOLERANCE) <= net_ratio <= row_upper_rtts(rtts, rtt_ms)


def row_upper_rtts(rtts: int, rtt_ms: float) -> float:
    return rtts + max(CONNECTION_EXCESS * rtts, ROW_EXCESS_MS / rtt_ms)


def path_within(path_ratio: float) -> bool:
    return abs(path_ratio - 1) <= PATH_TOLERANCE


def wire_within(rtts: int, wire_ratio: float) -> bool:
    """A handshake judged on the wire (issue 62, decision 6; a row's `wire_rtts`, from
    analysis/wire.py): the connection less both ends' turns as their captures saw them is
    the path's n round trips, within 1 % of n RTT. Nothing of an endpoint's own time is left
    in it, so neither side has an allowance: shorter is a short path, longer a slow one."""
    return abs(wire_ratio / rtts - 1) <= PATH_TOLERANCE
