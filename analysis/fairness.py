"""Who got the bottleneck: per-flow throughput from a capture at the receiver, and Jain's
fairness index.

A trial with cross traffic (experiment `cross:`, experiments/cross.py) is captured on the
client's interface, after the bottleneck, so each flow's bytes there are what the link gave
it. `read_pcap` reads the classic pcap format tcpdump writes (Ethernet or Linux cooked
frames, IPv4), `flow_bytes` buckets a flow's IP bytes over time, and `window_rates` takes
every flow's rate over one window: the measured trial's transfer, where the flows competed.
Pure logic, so tests/analysis/test_fairness.py checks it on pcaps it writes itself.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

_MAGIC = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
          b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}  # fmt: skip
LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL = 1, 113
_ETHERTYPE_IPV4, _ETHERTYPE_VLAN = 0x0800, 0x8100
TCP, UDP = 6, 17


class PcapError(ValueError):
    """Not a capture this reader understands (its words say why)."""


@dataclass(frozen=True)
class Packet:
    ts: float  # epoch seconds
    src: str
    dst: str
    proto: int  # IP protocol number
    sport: int
    dport: int
    length: int  # the IP packet's total length: what it took of the link, headers included


def read_pcap(path: Path) -> Iterator[Packet]:
    """The IPv4 TCP and UDP packets of a pcap file; anything else is skipped."""
    with Path(path).open("rb") as f:
        head = f.read(24)
        if len(head) < 24 or head[:4] not in _MAGIC:
            raise PcapError(f"{path}: not a pcap file")
        order, unit = _MAGIC[head[:4]]
        linktype = struct.unpack(order + "I", head[20:24])[0] & 0xFFFF
        if linktype not in (LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL):
            raise PcapError(f"{path}: link type {linktype} (expected Ethernet or Linux cooked)")
        record = struct.Struct(order + "IIII")
        while len(rec := f.read(16)) == 16:
            sec, frac, caplen, _ = record.unpack(rec)
            frame = f.read(caplen)
            packet = _parse(frame, linktype, sec + frac * unit)
            if packet:
                yield packet


def _parse(frame: bytes, linktype: int, ts: float) -> Packet | None:
    if linktype == LINKTYPE_ETHERNET:
        offset, ethertype = 14, int.from_bytes(frame[12:14], "big")
        if ethertype == _ETHERTYPE_VLAN:
            offset, ethertype = 18, int.from_bytes(frame[16:18], "big")
    else:
        offset, ethertype = 16, int.from_bytes(frame[14:16], "big")
    ip = frame[offset:]
    if ethertype != _ETHERTYPE_IPV4 or len(ip) < 20 or ip[0] >> 4 != 4:
        return None
    proto, header = ip[9], (ip[0] & 0x0F) * 4
    if proto not in (TCP, UDP) or len(ip) < header + 4:
        return None
    sport, dport = struct.unpack("!HH", ip[header : header + 4])
    src, dst = ".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20]))
    return Packet(ts, src, dst, proto, sport, dport, int.from_bytes(ip[2:4], "big"))


@dataclass
class FlowSeries:
    """One flow's bytes as they arrived: (time, bytes) per packet, times in seconds."""

    times: list[float]
    sizes: list[int]

    @property
    def first(self) -> float | None:
        return self.times[0] if self.times else None

    @property
    def last(self) -> float | None:
        return self.times[-1] if self.times else None

    def bytes_between(self, start: float, end: float) -> int:
        return sum(size for t, size in zip(self.times, self.sizes, strict=True) if start <= t <= end)

    def mbit(self) -> float | None:
        """The flow's rate over its own life, first packet to last."""
        if len(self.times) < 2 or self.times[-1] <= self.times[0]:
            return None
        return sum(self.sizes) * 8 / (self.times[-1] - self.times[0]) / 1e6


def flow_bytes(packets: Iterable[Packet], classify: Callable[[Packet], str | None]) -> dict[str, FlowSeries]:
    """Each named flow's series; `classify` names a packet's flow, or None to leave it out."""
    flows: dict[str, FlowSeries] = {}
    for packet in packets:
        name = classify(packet)
        if name is not None:
            series = flows.setdefault(name, FlowSeries([], []))
            series.times.append(packet.ts)
            series.sizes.append(packet.length)
    return flows


def window_rates(flows: dict[str, FlowSeries], start: float, end: float) -> dict[str, float]:
    """Every flow's rate (Mbit/s) over [start, end]: its share of that stretch of the link."""
    if end <= start:
        raise ValueError(f"empty window [{start}, {end}]")
    return {name: s.bytes_between(start, end) * 8 / (end - start) / 1e6 for name, s in flows.items()}


def jain_index(rates: Iterable[float]) -> float | None:
    """Jain's fairness index, (sum x)^2 / (n * sum x^2): 1 when all are equal, 1/n when one
    flow has everything. None when there is nothing to share."""
    values = list(rates)
    squares = sum(x * x for x in values)
    if not values or squares == 0:
        return None
    return sum(values) ** 2 / (len(values) * squares)
