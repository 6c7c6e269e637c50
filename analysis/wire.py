"""A fresh connection's handshake from packet captures on the client and the server: the
endpoints' own time told from the path's, as the decided criterion judges a handshake
(analysis/physics.py: the path ÷ RTT within 1 %, the connection net of both endpoints' time
within +3 %). bench/handshake_bench.py prints it; the servers' path test judges by it.

Rows are the perf tools' (`local_port`, `t_start`, `t_handshake` on the capture's clock)."""

from __future__ import annotations

import contextlib
import re
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .physics import net_connection_rtts

Packet = tuple[float, int, int, bool]  # (time, source port, destination port, to answer)


PACKET = re.compile(r"^(\d+\.\d+) .*?\.(\d+) > [\d.]+\.(\d+):(.*)$")
LENGTH = re.compile(r"length (\d+)")


@contextlib.contextmanager
def capture(host: Any, pcap: Path) -> Iterator[None]:
    """tcpdump (the host's) in a testbed host's network namespace, for the duration."""
    argv = ["tcpdump", "--immediate-mode", "-Z", "root", "-i", "any", "-w", str(pcap), "port 443"]
    proc = subprocess.Popen(host.popen_argv(argv), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        while "listening" not in (proc.stderr.readline() or "listening"):
            pass
        yield
    finally:
        time.sleep(0.3)
        proc.terminate()
        proc.wait(timeout=10)


def packets(pcap: Path) -> list[Packet]:
    """(time, source port, destination port, carries something to answer) of each packet:
    a payload, or a SYN (a bare ACK the kernel sends at once is no server turn)."""
    text = subprocess.run(
        ["tcpdump", "-r", str(pcap), "-tt", "-n"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    out: list[Packet] = []
    for m in map(PACKET.match, text.splitlines()):
        if m:
            length = LENGTH.search(m[4])
            out.append(
                (float(m[1]), int(m[2]), int(m[3]), "Flags [S" in m[4] or bool(length and int(length[1]) > 0))
            )
    return out


def server_turns_s(row: dict[str, Any], at_server: list[Packet]) -> float:
    """The server's own time in a connection's handshake, from its own capture: for each
    flight it answers, the time from the flight's last packet in to its first packet out
    (TCP: SYN to SYN-ACK, each TLS flight to the next; QUIC: Initial to its flight)."""
    port, total, last_in = row["local_port"], 0.0, None
    for t, src, dst, meaningful in at_server:
        if t > row["t_handshake"] or not meaningful or port not in (src, dst):
            continue
        if src == port:
            last_in = t
        elif last_in is not None:
            total += t - last_in
            last_in = None
    return total


def quic_split(row: dict[str, Any], at_client: list[Packet], at_server: list[Packet]) -> dict[str, float]:
    """Start to handshake done, cut at the first Initial and the last server datagram before
    handshake done, each seen on both sides (k-th datagram sent = k-th received: no loss)."""
    port = row["local_port"]
    c_out = [t for t, src, _, _ in at_client if src == port]
    c_in = [t for t, _, dst, _ in at_client if dst == port]
    s_in = [t for t, src, _, _ in at_server if src == port]
    s_out = [t for t, _, dst, _ in at_server if dst == port]
    k = sum(t <= row["t_handshake"] for t in c_in) - 1
    return {
        "up": s_in[0] - c_out[0],
        "down": c_in[k] - s_out[k],
        "before": c_out[0] - row["t_start"],
        "server": s_out[k] - s_in[0],
        "after": row["t_handshake"] - c_in[k],
    }


@dataclass(frozen=True)
class Handshakes:
    """Fresh connections split from their captures: medians ÷ RTT, the server's turns."""

    raw: float  # connection time ÷ RTT
    net: float  # less the client's CPU and the server's turns
    server_ms: list[float]  # each connection's server turns
    path: float | None  # QUIC's Initial up + the server's flight down ÷ RTT; None for TCP


def split_handshakes(
    rows: list[dict[str, Any]], at_client: list[Packet], at_server: list[Packet], rtt: float, quic: bool
) -> Handshakes:
    """The parts the decided criterion judges (analysis/physics.py connection_within and
    path_within), from the rows' tools and the captures on both ends."""
    server_ms = [server_turns_s(r, at_server) * 1e3 for r in rows]
    net = statistics.median(
        net_connection_rtts(r["connection_time_ms"] - s, r["client_cpu_ms"], rtt)
        for r, s in zip(rows, server_ms, strict=True)
    )
    raw = statistics.median(r["connection_time_ms"] for r in rows) / rtt
    path = None
    if quic:
        splits = [quic_split(r, at_client, at_server) for r in rows]
        path = statistics.median(s["up"] + s["down"] for s in splits) * 1e3 / rtt
    return Handshakes(raw, net, server_ms, path)
