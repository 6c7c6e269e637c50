"""What a transfer should take on an emulated link: the arithmetic the measurements are
checked against (handshake RTTs, slow start, payload share of a frame)."""

from __future__ import annotations

import math

FRAME_BYTES = 1514   # MTU-sized Ethernet frame: what the bottleneck counts
TCP_PAYLOAD = 1448   # its TCP payload with timestamps
INITIAL_WINDOW = 10  # segments (RFC 6928, Linux's default)


def slow_start_deficit_s(rate_mbit: float, rtt_ms: float, iw: int = INITIAL_WINDOW) -> float:
    """Time lost while cwnd doubles from `iw` up to the bandwidth-delay product: each RTT of
    slow start sends cwnd frames where the link could carry a BDP's worth."""
    frame_s = FRAME_BYTES * 8 / (rate_mbit * 1e6)
    bdp = rate_mbit * 1e6 * rtt_ms / 1e3 / (FRAME_BYTES * 8)
    rounds = max(0, math.ceil(math.log2(bdp / iw))) if bdp > iw else 0
    return sum(bdp - iw * 2 ** k for k in range(rounds)) * frame_s


def tcp_download_s(size_bytes: float, rate_mbit: float, rtt_ms: float,
                   setup_rtts: int) -> float:
    """Fresh connection, one GET, by the paper's definition (start to last byte): the
    setup RTTs (TCP + TLS), the request's RTT, slow start, then the payload at line rate.
    Ignores TLS record and HTTP/2 framing (~0.3%) and losses from slow-start overshoot."""
    payload_s = size_bytes * 8 * FRAME_BYTES / TCP_PAYLOAD / (rate_mbit * 1e6)
    return (setup_rtts + 1) * rtt_ms / 1e3 + slow_start_deficit_s(rate_mbit, rtt_ms) + payload_s
