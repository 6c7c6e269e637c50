"""A fresh connection's handshake from packet captures on the client and the server: the
endpoints' own time told from the path's, as the decided criterion judges a handshake
(analysis/physics.py: the path ÷ RTT within 1 %, the connection net of both endpoints' time
within +3 %). bench/handshake_bench.py prints it; the servers' path test judges by it; a run's
executor writes it into each perf-tool row (`handshake_columns`: client_turn_ms,
server_turn_ms, wire_rtts, from header captures that `read_packets` reads).

Rows are the perf tools' (`local_port`, `t_start`, `t_handshake` on the capture's clock)."""

from __future__ import annotations

import contextlib
import math
import re
import statistics
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .physics import net_connection_rtts

Packet = tuple[float, int, int, bool]  # (time, source port, destination port, to answer)


# A classic pcap's magic -> (byte order, seconds per timestamp unit): micro- or nanoseconds.
_MAGIC = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
          b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}  # fmt: skip
_LINK_OFFSETS = {1: 14, 113: 16}  # Ethernet, Linux cooked (SLL): bytes before the IP header
_TCP, _UDP, _SYN = 6, 17, 0x02


class WireError(ValueError):
    """The captures do not hold the connection's handshake (the reason, for capture_missing)."""


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


def read_packets(data: bytes) -> list[Packet]:
    """The IPv4 TCP and UDP packets of a classic pcap (what `tcpdump -w` writes; headers are
    enough: snaplen 96), as `packets` gives them, without running tcpdump once more."""
    if len(data) < 24 or data[:4] not in _MAGIC:
        raise WireError("not a pcap capture")
    order, unit = _MAGIC[data[:4]]
    offset = _LINK_OFFSETS.get(struct.unpack(order + "I", data[20:24])[0] & 0xFFFF)
    if offset is None:
        raise WireError("a capture of an unknown link type")
    record, at, out = struct.Struct(order + "IIII"), 24, []
    while at + 16 <= len(data):
        sec, frac, caplen, _ = record.unpack_from(data, at)
        if at + 16 + caplen > len(data):  # read while tcpdump wrote its last one
            break
        packet = _packet(data[at + 16 + offset : at + 16 + caplen], sec + frac * unit)
        at += 16 + caplen
        if packet:
            out.append(packet)
    return out


def _packet(ip: bytes, t: float) -> Packet | None:
    """One IPv4 packet's ports and whether it carries something to answer: a SYN or a
    payload (by the IP and TCP or UDP headers' lengths, so a cut packet still counts)."""
    if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] not in (_TCP, _UDP):
        return None
    header, total = (ip[0] & 0x0F) * 4, int.from_bytes(ip[2:4], "big")
    transport = ip[header:]
    if len(transport) < (14 if ip[9] == _TCP else 8):
        return None
    sport, dport = struct.unpack("!HH", transport[:4])
    if ip[9] == _UDP:
        return (t, sport, dport, int.from_bytes(transport[4:6], "big") > 8)
    payload = total - header - (transport[12] >> 4) * 4
    return (t, sport, dport, bool(transport[13] & _SYN) or payload > 0)


def _conversation(row: dict[str, Any], seen: list[Packet], outbound_port: str) -> list[tuple[float, bool]]:
    """The connection's packets that carry something, up to handshake done, as (time, sent
    by this end): at the client its own port is the source of what it sends, at the server
    the destination."""
    port = row["local_port"]
    return [
        (t, (src if outbound_port == "src" else dst) == port)
        for t, src, dst, meaningful in seen
        if meaningful and port in (src, dst) and t <= row["t_handshake"]
    ]


def client_turns_s(row: dict[str, Any], at_client: list[Packet]) -> float:
    """The client's own time in a connection's handshake, from its own capture: start to its
    first packet out, each server flight's last packet in to the client's next packet out,
    and the last packet in to handshake done (what it sends meanwhile, its Finished, is
    still its own time)."""
    talk = _conversation(row, at_client, "src")
    sent = [t for t, mine in talk if mine]
    received = [i for i, (_, mine) in enumerate(talk) if not mine]
    if not sent or not received:
        raise WireError("the client's capture holds no exchange of the connection before handshake done")
    last = received[-1]
    total, last_in = sent[0] - row["t_start"], None
    for t, mine in talk[:last]:
        if not mine:
            last_in = t
        elif last_in is not None:
            total, last_in = total + t - last_in, None
    return total + row["t_handshake"] - talk[last][0]


def handshake_columns(
    row: dict[str, Any], at_client: list[Packet], at_server: list[Packet], rtt_ms: float | None
) -> dict[str, float]:
    """A row's handshake on the wire: both ends' turns (ms) and the rest, the path's time,
    in calibrated RTTs (`wire_rtts`). Raises WireError when the row or the captures cannot
    say it."""
    needed = ("local_port", "t_start", "t_handshake", "connection_time_ms")
    if any(not isinstance(row.get(k), int | float) for k in needed):
        raise WireError("the tool's row has no connection port or handshake instants")
    if rtt_ms is None or not math.isfinite(rtt_ms) or rtt_ms <= 0:
        raise WireError("no calibrated RTT to divide by")
    client = client_turns_s(row, at_client) * 1e3
    if not any(mine for _, mine in _conversation(row, at_server, "dst")):
        raise WireError("the server's capture holds no answer of the connection before handshake done")
    server = server_turns_s(row, at_server) * 1e3
    return {
        "client_turn_ms": round(client, 3),
        "server_turn_ms": round(server, 3),
        "wire_rtts": round((row["connection_time_ms"] - client - server) / rtt_ms, 4),
    }


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
