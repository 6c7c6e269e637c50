"""Count datagram loss on one direction of the path: a paced sender and a counting receiver.

Run with the host's python3 inside a host's network namespace (no handshake to lose, unlike
iperf3's UDP mode, whose setup fails on very lossy links):
    udpprobe.py count PORT COUNT IDLE_S REORDER
        → prints, every REPORT_S while datagrams arrive, {"sent": S, "received": N,
          "duplicates": D, "loss_runs": R, "ahead": A, "final": F}
("sent": the datagrams decided so far: every sequence number below the highest seen less
REORDER, which a late datagram may still fill; "received" and "loss_runs" count among those.
"ahead": datagrams that arrived while one sent before them was still missing: reordering.
The last line, once COUNT have arrived or IDLE_S passed without one, has "final": true and
decides all COUNT. The caller may stop reading, and kill both ends, at any line.)
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


REPORT_S = 0.05


class Counts:
    """What has arrived, and the losses among the sequence numbers already decided."""

    def __init__(self, count: int, reorder: int) -> None:
        self.count, self.reorder = count, reorder
        self.seen: set[int] = set()
        self.duplicates = self.ahead = 0
        self.highest = -1
        self.decided = self.received = self.runs = 0
        self.previous_lost = False

    def arrived(self, seq: int) -> None:
        self.duplicates += seq in self.seen
        self.ahead += seq > self.highest + 1
        self.highest = max(self.highest, seq)
        self.seen.add(seq)

    def decide(self, upto: int) -> None:
        for seq in range(self.decided, min(upto, self.count)):
            lost = seq not in self.seen
            self.received += not lost
            self.runs += lost and not self.previous_lost
            self.previous_lost = lost
        self.decided = max(self.decided, min(upto, self.count))

    def report(self, final: bool) -> dict[str, int | bool]:
        self.decide(self.count if final else self.highest + 1 - self.reorder)
        return {
            "sent": self.decided,
            "received": self.received,
            "duplicates": self.duplicates,
            "loss_runs": self.runs,
            "ahead": self.ahead,
            "final": final,
        }


def count(port: int, total: int, idle_s: float, reorder: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("0.0.0.0", port))
    print("ready", flush=True)
    counts = Counts(total, reorder)
    sock.settimeout(60.0)  # until the first datagram
    last_datagram = last_report = time.monotonic()
    while len(counts.seen) < total:
        now = time.monotonic()
        if counts.highest >= 0 and now - last_datagram >= idle_s:
            break
        try:
            data = sock.recv(2048)
        except TimeoutError:
            if counts.highest < 0:
                break
            data = b""
        now = time.monotonic()
        if data:
            if counts.highest < 0:
                sock.settimeout(REPORT_S)
            counts.arrived(struct.unpack_from("!I", data)[0])
            last_datagram = now
        if now - last_report >= REPORT_S:
            print(json.dumps(counts.report(final=False)), flush=True)
            last_report = now
    print(json.dumps(counts.report(final=True)), flush=True)


# A burst of datagrams sent to catch up would queue at the bottleneck (dsl's 12 ms queue is five
# full frames), and a probe that fills the queue it measures counts the queue's drops as loss.
BEHIND_S = 0.002


def send(host: str, port: int, count: int, pps: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pad = bytes(PAYLOAD - 4)
    start = time.monotonic()
    for seq in range(count):
        delay = start + seq / pps - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -BEHIND_S:  # a stalled sender resumes its pace, not a burst to catch up
            start -= delay
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
    elif argv[:1] == ["count"]:
        count(int(argv[1]), int(argv[2]), float(argv[3]), int(argv[4]))
    elif argv[:1] == ["send"]:
        send(argv[1], int(argv[2]), int(argv[3]), float(argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
