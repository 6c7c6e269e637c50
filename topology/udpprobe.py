"""Count datagram loss on one direction of the path: a paced sender and a counting receiver.

Run with the host's python3 inside a host's network namespace (no handshake to lose, unlike
iperf3's UDP mode, whose setup fails on very lossy links):
    udpprobe.py recv PORT COUNT IDLE_S      → prints {"received": N, "duplicates": D,
                                                      "loss_runs": R, "ahead": A}
("ahead": datagrams that arrived while one sent before them was still missing: reordering.)
    udpprobe.py send HOST PORT COUNT PPS
Or time the arrivals of a paced flood of MTU-sized datagrams (a trace-driven link's delivered
rate, per window, from the receiver's clock: CLOCK_MONOTONIC, shared by every namespace):
    udpprobe.py arrivals PORT SECONDS TOKEN   → prints {"arrivals_ns": [...], "bytes": IP_BYTES}
    udpprobe.py flood HOST PORT SECONDS PPS TOKEN
(TOKEN, hex, starts each datagram: what an earlier flood left in the link's queue is not
counted, nor the gap before this flood's sender starts.)
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time

PAYLOAD = 64
FLOOD_PAYLOAD = 1472  # a 1500-byte IP packet: one delivery opportunity of a trace each


def receive(port: int, count: int, idle_s: float) -> dict[str, int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("0.0.0.0", port))
    print("ready", flush=True)
    seen: set[int] = set()
    duplicates = ahead = 0
    highest = -1
    sock.settimeout(60.0)  # until the first datagram
    while len(seen) < count:
        try:
            data = sock.recv(2048)
        except TimeoutError:
            break
        sock.settimeout(idle_s)
        seq = struct.unpack_from("!I", data)[0]
        duplicates += seq in seen
        ahead += seq > highest + 1
        highest = max(highest, seq)
        seen.add(seq)
    return {
        "received": len(seen),
        "duplicates": duplicates,
        "loss_runs": loss_runs(seen, count),
        "ahead": ahead,
    }


def loss_runs(seen: set[int], count: int) -> int:
    """How many runs of consecutive lost datagrams (a burst of 5 counts once)."""
    runs, previous_lost = 0, False
    for seq in range(count):
        lost = seq not in seen
        runs += lost and not previous_lost
        previous_lost = lost
    return runs


def send(host: str, port: int, count: int, pps: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pad = bytes(PAYLOAD - 4)
    start = time.monotonic()
    for seq in range(count):
        delay = start + seq / pps - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sock.sendto(struct.pack("!I", seq) + pad, (host, port))


def arrivals(port: int, seconds: float, token: bytes) -> list[int]:
    """Arrival times (ns) of the datagrams that start with `token`, for `seconds` after the
    first of them."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind(("0.0.0.0", port))
    print("ready", flush=True)
    sock.settimeout(60.0)
    times: list[int] = []
    end = None
    while end is None or time.monotonic_ns() < end:
        try:
            data = sock.recv(2048)
        except TimeoutError:
            break
        now = time.monotonic_ns()
        if not data.startswith(token):
            continue
        times.append(now)
        if end is None:
            end = now + int(seconds * 1e9)
            sock.settimeout(1.0)
    return times


def flood(host: str, port: int, seconds: float, pps: float, token: bytes) -> None:
    """Paced in 1 ms bursts, so that the sender's own timer does not shape what it sends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    payload = token + bytes(FLOOD_PAYLOAD - len(token))
    start = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - start) < seconds:
        for _ in range(int(elapsed * pps) + 1 - sent):
            try:
                sock.sendto(payload, (host, port))
            except OSError:  # a full socket buffer: the link's queue is full anyway
                pass
            sent += 1
        time.sleep(0.001)


def main(argv: list[str]) -> int:
    if argv[:1] == ["arrivals"]:
        times = arrivals(int(argv[1]), float(argv[2]), bytes.fromhex(argv[3]))
        print(json.dumps({"arrivals_ns": times, "bytes": (FLOOD_PAYLOAD + 28) * len(times)}))
    elif argv[:1] == ["flood"]:
        flood(argv[1], int(argv[2]), float(argv[3]), float(argv[4]), bytes.fromhex(argv[5]))
    elif argv[:1] == ["recv"]:
        print(json.dumps(receive(int(argv[1]), int(argv[2]), float(argv[3]))))
    elif argv[:1] == ["send"]:
        send(argv[1], int(argv[2]), int(argv[3]), float(argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
