"""Is a sender's rate one a loss-responsive congestion controller could reach? (issue 29)

At 10 % random loss on india (80 ms), nginx's QUIC moved 5.7-8.4 Mbit/s where TCP and the
other QUIC stacks moved 0.3-0.6: far above what any Reno-like sender can do at that loss and
RTT. A comparison of QUIC against TCP through such a sender measures that sender's congestion
control, not QUIC. This module is the one judge of it, shared by the runner (each row it
writes: `loss_bound_mbit`, `loss_response`, `loss_bound_basis`) and the analysis (older rows,
the report's "Congestion response" section, the claims). Pure: no I/O.

**The bound.** The most a loss-responsive (Reno-like, TCP-friendly) sender can reach at a
random loss rate p and round-trip time R is the timeout-free square-root law of Mathis,
Semke, Mahdavi and Ott (CCR 1997):

    rate = s * sqrt(3 / (2 b)) / (R * sqrt(p))

with s = 1448 bytes (a full TCP segment with timestamps; a QUIC packet carries about as
much) and b = 1 (one ACK per packet). That is the generous end: delayed ACKs (b = 2) and
retransmission timeouts only lower a real sender's rate, so a sender above it is above what
any of them reaches. Padhye, Firoiu, Towsley and Kurose (SIGCOMM 1998) add the timeouts; their
full formula (`padhye_mbit`) is lower still and is shown beside it in the report.

CUBIC at these RTTs and losses is in its Reno-friendly region (RFC 9438 §5.1, RFC 8312
§5.1): its own average window, (C (3+β)/(4 (1−β)))^(1/4) · (R/p)^(3/4) packets with C = 0.4
and β = 0.7, is below Reno's sqrt(3/(2p)) whenever R^3 < 1.8 p (R in seconds); on india at
9.9 % loss it is 0.9 packets against Reno's 3.9 (`cubic_reno_friendly`). There CUBIC follows
its Reno estimate, so the same bound holds for it.

**The goodput** a row is judged by: the payload bytes over the time they took, for every
client tool (what each row reports, from clients/perf/README.md and clients/browser/README.md):
  - tls_perf, quic_perf: `bytes` is the response body; `download_time_ms` = t_done − t_start
    (connection start to the last body byte); `throughput_mbps` = bytes·8 / download time.
    Backlogged: the server sends the whole object as fast as its congestion control lets it.
  - video_download: `bytes` is every body (manifest, init and media segments of both streams),
    `download_time_ms` the whole session, `throughput_mbps` their ratio: the paper's "overall
    download rate". Paced like playout (a segment is asked for only when the buffer has room),
    so it is **demand-limited**. (`video_rate_mbps` is the video stream's rate over its busy
    time only; not used: a segment fetch restarts from an idle connection, neither backlogged
    nor the whole.)
  - chromium, a page load: `bytes` is every body of the page, `t_done` − `t_start` the load
    (navigation start to the load event; `download_time_ms` is the document's alone and
    `throughput_mbps` null). The browser asks for resources as it parses: demand-limited.
  - chromium, a playback (streaming): `bytes` is every body fetched (player, manifest,
    segments), `t_done` − `t_start` the session (navigation start to the end of playback;
    `download_time_ms` and `throughput_mbps` null). The player fetches when its buffer has
    room: demand-limited.
So: bytes·8 / download_time_ms where both exist and the row is not a browser's, else
bytes·8 / (t_done − t_start).

**The verdict** (one of VERDICTS), in this order:
  - `no loss`: the data direction has no loss (no bound);
  - `too short`: fewer than MIN_PACKETS full packets: the initial window and the handshake,
    not the steady state the law describes, set such a transfer's rate;
  - `loss does not bind`: the bound is above LINK_SHARE of the link's rate: the link, not
    the loss, limits any sender there, so the rate says nothing about its response to loss;
  - `not loss-responsive`: goodput above FLAG_FACTOR times the bound;
  - `demand-limited`: a sender that waits on its receiver (a player, a browser) below that:
    its rate is the demand's, so it is never called responsive from it;
  - `responsive`: otherwise.

**p and R**: p is the calibrated loss of the data direction (down: server to client) from the
condition's calibration (topology/calibrate.py's `loss_pct` check, direction `down`), falling
back to the configured downlink loss where the calibration has no measurement; the basis says
which (`calibrated` or `configured`). R is the calibrated RTT (the rows' `calib_rtt_ms`),
else the configured one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quicbed import runmanifest
from quicbed.clients.tools import TOOLS
from quicbed.workloads import demand_limited_kinds

from .stats import finite_number

# A full TCP segment's payload with timestamps (1500 − 20 IP − 20 TCP − 12 options); also the
# calibration's TCP_PAYLOAD_SHARE. QUIC packets on these paths carry about as much.
PACKET_BYTES = 1448
ACKED_PER_ACK = 1  # b: one ACK per packet, the generous end (delayed ACKs halve the growth)
# Above twice the bound: the law is an estimate (random loss, steady state, a model of the
# window), and measured Reno/CUBIC senders sit at 0.5-1.1 times it here (the table of issue 29:
# TCP 0.29-0.34, caddy 0.57-0.62, HAProxy 0.39-0.43 Mbit/s against 0.56). Twice it is beyond
# that scatter and still far below what a sender that ignores loss moves (nginx: 10-15x).
FLAG_FACTOR = 2.0
# Below 100 full packets (145 kB) the initial window (10-32 packets) and the handshake set the
# rate: such a transfer ends within a few loss events, before any steady state.
MIN_PACKETS = 100
# The bound above half the link's rate: the link, not the loss, limits any sender there.
LINK_SHARE = 0.5
# Padhye's timeout: Linux's retransmission timeout on a steady path is the RTT plus its
# 200 ms floor of the RTT variance (TCP_RTO_MIN); QUIC's PTO is shorter, so this is generous.
RTO_FLOOR_MS = 200.0

NO_LOSS = "no loss"
TOO_SHORT = "too short"
NOT_BINDING = "loss does not bind"
NOT_RESPONSIVE = "not loss-responsive"
DEMAND_LIMITED = "demand-limited"
RESPONSIVE = "responsive"
VERDICTS = (NO_LOSS, TOO_SHORT, NOT_BINDING, NOT_RESPONSIVE, DEMAND_LIMITED, RESPONSIVE)

CALIBRATED, CONFIGURED = "calibrated", "configured"
# Analysis kinds whose sender waits on its receiver's demand (see the docstring) are each
# workload kind's `demand_limited` (workloads/<kind>.py). So are the page loaders, from their
# descriptors (clients/<name>/client.yaml `command`: the browser client, chromium and firefox).
# The perf tools and the other stacks' clients (aioquic, quicgo) fetch one object and are not
# demand-limited.
BROWSER_TOOLS = tuple(name for name, tool in TOOLS.items() if tool.browser)

# RFC 9438's CUBIC constants.
CUBIC_C, CUBIC_BETA = 0.4, 0.7


def mathis_mbit(loss_pct: float, rtt_ms: float, packet_bytes: int = PACKET_BYTES) -> float:
    """Mathis et al.'s timeout-free bound in Mbit/s; inf without loss."""
    p, rtt_s = loss_pct / 100.0, rtt_ms / 1000.0
    if p <= 0:
        return math.inf
    return packet_bytes * 8 * math.sqrt(3 / (2 * ACKED_PER_ACK)) / (rtt_s * math.sqrt(p)) / 1e6


def padhye_mbit(
    loss_pct: float, rtt_ms: float, rto_ms: float | None = None, packet_bytes: int = PACKET_BYTES
) -> float:
    """Padhye et al.'s full formula (with timeouts, no receiver-window cap) in Mbit/s: lower
    than Mathis's. The timeout T0 defaults to R + 200 ms (Linux's RTO on a steady path)."""
    p, rtt_s = loss_pct / 100.0, rtt_ms / 1000.0
    if p <= 0:
        return math.inf
    t0 = (rto_ms if rto_ms is not None else rtt_ms + RTO_FLOOR_MS) / 1000.0
    b = ACKED_PER_ACK
    denominator = rtt_s * math.sqrt(2 * b * p / 3) + t0 * min(1.0, 3 * math.sqrt(3 * b * p / 8)) * p * (
        1 + 32 * p**2
    )
    return packet_bytes * 8 / denominator / 1e6


def cubic_reno_friendly(loss_pct: float, rtt_ms: float) -> bool:
    """CUBIC's own average window is below Reno's at this loss and RTT (RFC 9438 §5.1): CUBIC
    then grows as its Reno estimate, and the Reno bound holds for it."""
    p, rtt_s = loss_pct / 100.0, rtt_ms / 1000.0
    if p <= 0:
        return False
    cubic = (CUBIC_C * (3 + CUBIC_BETA) / (4 * (1 - CUBIC_BETA))) ** 0.25 * (rtt_s / p) ** 0.75
    return cubic <= math.sqrt(3 / (2 * p))


@dataclass(frozen=True)
class PathLoss:
    """What the bound of one condition rests on: p (%) of the data direction, R (ms), the
    link's downlink rate (Mbit/s), and whether p was measured or configured."""

    loss_pct: float
    rtt_ms: float
    rate_mbit: float
    basis: str = CALIBRATED

    @property
    def bound_mbit(self) -> float:
        return mathis_mbit(self.loss_pct, self.rtt_ms)

    @property
    def padhye_mbit(self) -> float:
        return padhye_mbit(self.loss_pct, self.rtt_ms)

    def describe(self) -> str:
        """'9.9 % loss (calibrated) and 80 ms'."""
        return f"{self.loss_pct:.3g} % loss ({self.basis}) and {self.rtt_ms:.3g} ms"


def measured_down_loss(calibration: Mapping[str, Any] | None) -> float | None:
    """The calibrated downlink loss (%) of a condition's calibration: the runner's summary
    (its full Calibration.to_dict() under "calibration") or that dict itself; None if it
    measured none."""
    for check in runmanifest.calibration_record(calibration).get("checks") or []:
        if not isinstance(check, Mapping):
            continue
        if check.get("metric") == "loss_pct" and check.get("direction") == "down":
            return finite_number(check.get("measured"))
    return None


def path_loss(
    measured_loss_pct: float | None,
    configured_loss_pct: float | None,
    rtt_ms: float | None,
    rate_mbit: float | None,
) -> PathLoss | None:
    """The path a bound rests on: the measured loss, else the configured one; None without an
    RTT or any loss figure."""
    rtt, rate = finite_number(rtt_ms), finite_number(rate_mbit)
    measured, configured = finite_number(measured_loss_pct), finite_number(configured_loss_pct)
    if rtt is None or rtt <= 0:
        return None
    if measured is not None:
        return PathLoss(measured, rtt, rate if rate is not None else math.inf, CALIBRATED)
    if configured is not None:
        return PathLoss(configured, rtt, rate if rate is not None else math.inf, CONFIGURED)
    return None


def is_demand_limited(row: Mapping[str, Any]) -> bool:
    return row.get("workload") in demand_limited_kinds() or row.get("tool") in BROWSER_TOOLS


def goodput_mbit(row: Mapping[str, Any]) -> float | None:
    """Payload bytes over the time they took (see the module docstring), Mbit/s; None for a
    row without both (a failed trial)."""
    size = finite_number(row.get("bytes"))
    if size is None or size <= 0:
        return None
    download_ms = finite_number(row.get("download_time_ms"))
    if download_ms is not None and download_ms > 0 and row.get("tool") not in BROWSER_TOOLS:
        return size * 8 / (download_ms * 1e3)
    start, done = finite_number(row.get("t_start")), finite_number(row.get("t_done"))
    if start is None or done is None or done <= start:
        return None
    return size * 8 / ((done - start) * 1e6)


def verdict(goodput: float, payload_bytes: float, path: PathLoss, demand_limited: bool = False) -> str:
    """The verdict for one trial, or a group's median goodput and payload (see the docstring)."""
    if path.loss_pct <= 0:
        return NO_LOSS
    if payload_bytes < MIN_PACKETS * PACKET_BYTES:
        return TOO_SHORT
    bound = path.bound_mbit
    if bound > LINK_SHARE * path.rate_mbit:
        return NOT_BINDING
    if goodput > FLAG_FACTOR * bound:
        return NOT_RESPONSIVE
    return DEMAND_LIMITED if demand_limited else RESPONSIVE


def row_columns(row: Mapping[str, Any], path: PathLoss | None) -> dict[str, Any]:
    """The row's `loss_bound_mbit`, `loss_response` and `loss_bound_basis`: all None for a
    row without a goodput (a failed trial) or a path without an RTT."""
    rate = goodput_mbit(row)
    error = row.get("error")
    if path is None or rate is None or (isinstance(error, str) and error.strip()):
        return {"loss_bound_mbit": None, "loss_response": None, "loss_bound_basis": None}
    bound = path.bound_mbit
    return {
        "loss_bound_mbit": round(bound, 4) if math.isfinite(bound) else None,
        "loss_response": verdict(rate, float(row["bytes"]), path, is_demand_limited(row)),
        "loss_bound_basis": path.basis,
    }


def runner_columns(row: Mapping[str, Any], calibration: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the runner adds to a row it writes, from the condition's calibration dict (the
    executor's summary: `rtt_ms`, and the full calibration with its checks)."""
    rtt = finite_number((calibration or {}).get("rtt_ms"))
    path = path_loss(
        measured_down_loss(calibration),
        row.get("loss_pct"),
        rtt if rtt is not None else row.get("rtt_ms"),
        row.get("rate_down_mbit"),
    )
    return row_columns(row, path)


def stack_label(server: str, protocol: str, tcp_cc: object = None) -> str:
    """The sender whose congestion control a row measured: the server's own QUIC stack, or the
    kernel's TCP with the servers' congestion control (`param_server.tcp_cc`, else cubic)."""
    if protocol == "quic":
        return f"{server}'s QUIC"
    cc = tcp_cc if isinstance(tcp_cc, str) and tcp_cc else "cubic"
    return f"kernel TCP ({cc}) under {server}"
