"""`quicbed explain RUN TRIAL`: one trial's timeline from its capture (issue 29).

The evidence is the trial's capture directory (quicbed/rowschema.py capture_dir): the client's
packets (client.pcap), decrypted with its TLS secrets (keys.log) by tshark in the client
image, and the qlogs where a stack wrote them. From it, `evidence()` works out:

- the handshake: its packets from the first SYN / QUIC Initial, in ms and in RTTs of the row's
  calib_rtt_ms, which packet each waited for (a server packet more than an RTT after what it
  answered is flagged: a lost flight, a server that held it, a neighbour entry resolved across
  the delay line), and the handshake's round trips counted along that chain from the request
  back to the first packet (TLS 1.2: 3, TLS 1.3: 2, QUIC: 1);
- the response's first byte;
- the server's initial window (its first flight after the request, before an ACK of it can
  have come back; a lower bound when the whole response fit in it) and each later round
  trip's flight, from the capture; QUIC's congestion windows from the qlogs
  (recovery:metrics_updated) where they exist;
- losses: holes in the server's TCP sequence space or QUIC stream data (and gaps in QUIC packet
  numbers), from the packet after the hole until the hole was filled; qlog packet_lost events.

The capture is taken on the client: a packet lost on the path is never in it, so a loss shows
as the hole it leaves, and its recovery as the retransmission that fills it.
The parsing is pure (tests/analysis/test_explain.py runs it on recorded tshark output); only
`run_tshark` runs a program.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed import rowschema, runfolder
from quicbed.analysis.load import AnalysisError, resolve_run_dir
from quicbed.clients.perf.wirecheck import (
    FIELDS as WIRECHECK_FIELDS,
)
from quicbed.clients.perf.wirecheck import (
    Packet,
    parse_fields,
    quic_events,
    response_events,
    tcp_events,
    tshark_fields_argv,
)
from quicbed.dockercli import PULL_NEVER, docker, image_present, missing_image

CLIENT_IMAGE = "quicbed/client:dev"  # has tshark; the host need not
# A capture is at most safefs.MAX_FILE_BYTES; tshark decodes ~50 MB/s here: far within this.
TSHARK_TIMEOUT_S = 300.0
# wirecheck's fields (time first) and what the timeline, windows and losses need besides.
FIELDS = [
    *WIRECHECK_FIELDS,
    "frame.number",
    "udp.length",
    "tcp.seq",
    "tcp.nxtseq",
    "tcp.analysis.retransmission",
    "tcp.analysis.lost_segment",
    "http.request.method",
    "quic.packet_number",
    "quic.stream.off",
    "quic.stream.offset",
    "quic.stream.len",
]
EXPECTED_RTTS = {"tls1.2": 3, "tls1.3": 2, "quic": 1}
SERVER_PORT = "443"
# A server packet answers the latest client packet sent at least this share of an RTT before
# it arrived: nothing sent later can have reached the server and come back.
CAUSAL_SHARE = 0.5
# A flight ends where packets sent after an ACK of its first packet could begin to arrive:
# the ACK's departure plus the path's RTT (a little less: the ping's RTT includes its own
# serialisation, the bare ACK's is shorter).
ROUND_SHARE = 0.95
TLS_TYPES = {
    "1": "ClientHello",
    "2": "ServerHello",
    "4": "NewSessionTicket",
    "8": "EncryptedExtensions",
    "11": "Certificate",
    "12": "ServerKeyExchange",
    "13": "CertificateRequest",
    "14": "ServerHelloDone",
    "15": "CertificateVerify",
    "16": "ClientKeyExchange",
    "20": "Finished",
}
QUIC_LONG = {"0": "Initial", "1": "0-RTT", "2": "Handshake", "3": "Retry"}
QUIC_CRYPTO, QUIC_HANDSHAKE_DONE = "6", "30"
H2_HEADERS = H3_HEADERS = "1"
# HTTP/2 and HTTP/3 frame types the handshake's packets carry (the same numbers in both).
HTTP_FRAMES = {
    "0": "DATA",
    "1": "HEADERS",
    "3": "RST_STREAM",
    "4": "SETTINGS",
    "6": "PING",
    "7": "GOAWAY",
    "8": "WINDOW_UPDATE",
}
TCP_FIRST_BYTE = 1  # tshark's relative sequence numbers: the SYN is 0
LOSSES_SHOWN = 8
LATE_SHARE = 0.1  # a server packet later than 1.1 RTT after what it answered is flagged
CLIENT_LATE_MS = 5.0  # a client packet later than this after what it waited for is flagged
# The capture contract's file names (quicbed/rowschema.py).
PCAP, KEYS = rowschema.CAPTURE_FILES["pcap"], rowschema.CAPTURE_FILES["keys"]
QLOGS = (rowschema.CAPTURE_FILES["qlog/server"], rowschema.CAPTURE_FILES["qlog/client"])
NO_CAPTURE = "the trial has no capture, run with --capture pcap,keys,qlog"


class ExplainError(AnalysisError):
    """A trial that cannot be explained, in one line: exit 2 for a run or trial that does not
    exist, 1 for a trial with nothing to explain (no capture, an empty one)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --- reading ---------------------------------------------------------------------------------
def run_tshark(cap_dir: Path) -> str:
    """The capture's frames as tshark_fields_argv prints them, decoded in the client image."""
    keylog = f"/cap/{KEYS}" if (cap_dir / KEYS).is_file() else None
    run_args = [
        "run",
        "--rm",
        *PULL_NEVER,  # the image this host built, never one fetched by root
        "--network",
        "none",
        "-v",
        f"{cap_dir.resolve()}:/cap:ro",
        CLIENT_IMAGE,
        *tshark_fields_argv(f"/cap/{PCAP}", keylog, FIELDS),
    ]
    proc = docker(*run_args, timeout=TSHARK_TIMEOUT_S)
    if proc.returncode != 0 and not image_present(CLIENT_IMAGE):
        raise missing_image(CLIENT_IMAGE)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ExplainError(f"tshark could not read {cap_dir / PCAP}: {last}", exit_code=1)
    return proc.stdout


def client_port(packets_text: str, row: dict[str, Any]) -> int:
    """The row's local port, or else the first frame's port that is not the server's."""
    if row.get("local_port"):
        return int(row["local_port"])
    for line in packets_text.splitlines():
        ports = [p for p in line.split("|")[1:5] if p.isdigit() and p != SERVER_PORT]
        if ports:
            return int(ports[0])
    return 0


def connection_packets(text: str, port: int) -> list[Packet]:
    """The frames of the client's connection on `port` (a trial may hold a warm-up's too)."""
    packets = parse_fields(text, FIELDS, port)
    return [p for p in packets if port in _ports(p)]


def _ports(p: Packet) -> set[int]:
    names = ("tcp.srcport", "tcp.dstport", "udp.srcport", "udp.dstport")
    return {int(v) for n in names for v in p.f.get(n, [])}


def read_qlog(path: Path) -> list[dict[str, Any]]:
    """A JSON-SEQ qlog's event records (RFC 7464: each record after a 0x1e); a record that is
    not JSON (a torn last one) is skipped."""
    events = []
    for chunk in path.read_text(errors="replace").split("\x1e"):
        try:
            record = json.loads(chunk)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and ("name" in record or "event" in record):
            events.append(record)
    return events


def _event_name(record: dict[str, Any]) -> str:
    if "name" in record:
        return str(record["name"])
    return f"{record.get('category', '')}:{record.get('event', '')}"


def qlog_cwnd(events: list[dict[str, Any]]) -> list[tuple[float, int]]:
    """(time ms, congestion window bytes) of every recovery:metrics_updated that has one."""
    out = []
    for e in events:
        cwnd = (e.get("data") or {}).get("congestion_window")
        if _event_name(e) == "recovery:metrics_updated" and cwnd is not None:
            out.append((float(e.get("time", 0.0)), int(cwnd)))
    return out


def qlog_losses(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """recovery:packet_lost events: their time (ms), packet number and trigger."""
    out = []
    for e in events:
        if _event_name(e) == "recovery:packet_lost":
            data = e.get("data") or {}
            header = data.get("header") or {}
            out.append(
                {
                    "t_ms": float(e.get("time", 0.0)),
                    "packet_number": header.get("packet_number"),
                    "trigger": data.get("trigger"),
                }
            )
    return out


# --- what a packet is ------------------------------------------------------------------------
def is_quic(packets: list[Packet]) -> bool:
    return any("udp.srcport" in p.f for p in packets)


def carries(p: Packet) -> bool:
    """A packet with something to answer: SYN, FIN or payload (TCP); any QUIC packet that is
    not only ACKs and padding."""
    if "tcp.len" in p.f:
        return p.has("tcp.flags.syn", "1") or p.has("tcp.flags.fin", "1") or p.payload()
    if "quic.frame_type" not in p.f:
        return True  # not decrypted: any packet may carry something
    return any(t not in ("0", "1", "2", "3") for t in p.f["quic.frame_type"])


def describe(p: Packet) -> str:
    """A packet in a few words: its TCP flags or QUIC packet types, TLS messages, HTTP frames."""
    parts: list[str] = []
    if "tcp.len" in p.f:
        if p.has("tcp.flags.syn", "1"):
            parts.append("SYN-ACK" if p.has("tcp.flags.ack", "1") else "SYN")
        if p.has("tcp.analysis.retransmission"):
            parts.append("retransmission")
        if p.has("tls.record.content_type", "20"):
            parts.append("ChangeCipherSpec")
    else:
        parts.append("+".join(_quic_packet_types(p)))
        if p.has("quic.frame_type", QUIC_HANDSHAKE_DONE):
            parts.append("HANDSHAKE_DONE")
    parts += [TLS_TYPES.get(t, f"TLS({t})") for t in p.f.get("tls.handshake.type", [])]
    for name in ("http2.type", "http3.frame_type"):
        frames = [HTTP_FRAMES.get(t, f"frame({t})") for t in p.f.get(name, [])]
        parts += list(dict.fromkeys(frames))  # each kind once, in order
    if p.has("http.request.method"):
        parts.append("request")
    if "tcp.len" in p.f and p.payload():
        parts.append(f"{p.f['tcp.len'][0]} B")
    elif "tcp.len" in p.f and not parts:
        parts.append("ACK")
    return " ".join(parts)


def _quic_packet_types(p: Packet) -> list[str]:
    longs = iter(p.f.get("quic.long.packet_type", []))
    return [
        QUIC_LONG.get(next(longs, ""), "long") if h == "1" else "1-RTT"
        for h in p.f.get("quic.header_form", [])
    ]


def is_request(p: Packet) -> bool:
    return p.from_client and (
        p.has("http2.type", H2_HEADERS)
        or p.has("http3.frame_type", H3_HEADERS)
        or p.has("http.request.method")
    )


# --- the handshake -----------------------------------------------------------------------------
def waited_for(packets: list[Packet], i: int, rtt_s: float) -> int | None:
    """What packet `i` could not leave (client) or arrive (server) before: a client packet
    waits for the latest server packet with something in it before it; a server packet answers
    the latest client packet sent early enough to have reached the server and come back."""
    p = packets[i]
    if p.from_client:
        for j in range(i - 1, -1, -1):
            if not packets[j].from_client and carries(packets[j]):
                return j
        return None
    for j in range(i - 1, -1, -1):
        if packets[j].from_client and packets[j].t <= p.t - CAUSAL_SHARE * rtt_s:
            return j
    return None


def handshake_chain(packets: list[Packet], request: int, rtt_s: float) -> list[int]:
    """From the request back to the first packet: request <- server packet <- client packet
    <- ...; its server packets are the handshake's round trips."""
    chain = [request]
    while (j := waited_for(packets, chain[-1], rtt_s)) is not None:
        chain.append(j)
    return chain[::-1]


def _first(packets: list[Packet], pred: Any, start: int = 0) -> int | None:
    return next((i for i in range(start, len(packets)) if pred(packets[i])), None)


def _encrypted_request(packets: list[Packet], quic: bool, handshake: int | None) -> int | None:
    """Without keys, the request is where it must be: QUIC's first 1-RTT packet from the
    client; over TCP the client's first payload after the handshake's end (approximate)."""
    if quic:
        return _first(packets, lambda p: p.from_client and p.has("quic.header_form", "0"))
    if handshake is None:
        return None
    return _first(packets, lambda p: p.from_client and carries(p), handshake + 1)


def handshake_evidence(packets: list[Packet], protocol: str, rtt_ms: float, keyed: bool) -> dict[str, Any]:
    """The handshake's packets until the first byte, its events and its round trips."""
    quic = is_quic(packets)
    ev = quic_events(packets, keyed) if quic else tcp_events(packets, protocol == "tls1.2", keyed)
    http = "3" if quic else ("2" if any(p.has("http2.type") for p in packets) else "1.1")
    ev.update(response_events(packets, http, keyed, ev.get("handshake")))
    start = ev.get("start")
    if start is None:
        raise ExplainError("the capture holds no SYN or QUIC Initial of the trial's connection")
    t0, rtt_s = packets[start].t, rtt_ms / 1e3
    request = _first(packets, is_request, start)
    if request is None and not keyed:
        request = _encrypted_request(packets, quic, ev.get("handshake"))
    first_byte = ev.get("first_byte")
    end = first_byte if first_byte is not None else (request if request is not None else len(packets) - 1)
    chain = handshake_chain(packets, request, rtt_s) if request is not None else []
    timeline = []
    for i in range(start, end + 1):
        p = packets[i]
        if not (carries(p) or i in chain):
            continue
        found = waited_for(packets, i, rtt_s)
        wait = found if found is not None and found >= start else None
        timeline.append(
            {
                "frame": _frame(p, i),
                "from": "client" if p.from_client else "server",
                "t_ms": _ms(p.t - t0),
                "t_rtts": _rtts(p.t - t0, rtt_s),
                "what": describe(p),
                "waited_for": _frame(packets[wait], wait) if wait is not None else None,
                # The time since what it waited for: a server packet's is an RTT unless a
                # loss, a retransmission timer or the server held it; a client's, its CPU.
                "waited_ms": _ms(p.t - packets[wait].t) if wait is not None else None,
                "on_chain": i in chain,
            }
        )
    return {
        "quic": quic,
        "http_version": http,
        "decrypted": keyed,
        "t0": t0,
        "events_ms": {k: (_ms(packets[i].t - t0) if i is not None else None) for k, i in ev.items()},
        "events_rtts": {
            k: (_rtts(packets[i].t - t0, rtt_s) if i is not None else None) for k, i in ev.items()
        },
        "request_ms": _ms(packets[request].t - t0) if request is not None else None,
        "handshake_rtts": sum(1 for i in chain if not packets[i].from_client) if chain else None,
        "expected_rtts": EXPECTED_RTTS.get(protocol),
        "chain": [_frame(packets[i], i) for i in chain],
        "timeline": timeline,
        # The server's answer to the request begins its first flight (TLS 1.3's tickets go
        # out with the response: the same window pays for them).
        "_answer_index": _first(packets, lambda p: not p.from_client and carries(p), request + 1)
        if request is not None
        else first_byte,
    }


def _frame(p: Packet, i: int) -> int:
    return int(p.f["frame.number"][0]) if "frame.number" in p.f else i + 1


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def _rtts(seconds: float, rtt_s: float) -> float | None:
    return round(seconds / rtt_s, 3) if rtt_s > 0 else None


# --- the windows -------------------------------------------------------------------------------
def flight_bytes(p: Packet) -> int:
    """What a server packet puts in flight (0: nothing the congestion window counts, e.g. a
    bare ACK): TCP payload; a QUIC packet's UDP payload unless it only ACKs or pads."""
    if "tcp.len" in p.f:
        return int(p.f["tcp.len"][0])
    return int(p.f["udp.length"][0]) - 8 if carries(p) and "udp.length" in p.f else 0


def rounds(packets: list[Packet], first: int, rtt_s: float, t0: float) -> list[dict[str, Any]]:
    """The server's packets from `first` on in flights: a flight starts with its first
    packet's arrival, and ends where a packet the server sent on an ACK of that packet could arrive
    (the client's next packet after it, plus an RTT). Later packets are the next flight."""
    out: list[dict[str, Any]] = []
    i = first
    while i < len(packets):
        start = packets[i].t
        ack = next((p.t for p in packets[i:] if p.from_client and p.t >= start), math.inf)
        end = ack + ROUND_SHARE * rtt_s
        flight = [p for p in packets[i:] if not p.from_client and p.t < end and flight_bytes(p) > 0]
        if flight:
            out.append(
                {
                    "round": len(out),
                    "start_ms": _ms(start - t0),
                    "packets": len(flight),
                    "bytes": sum(flight_bytes(p) for p in flight),
                }
            )
        nxt = _first(packets, lambda p, end=end: not p.from_client and p.t >= end and flight_bytes(p) > 0, i)
        if nxt is None:
            break
        i = nxt
    return out


# --- losses ------------------------------------------------------------------------------------
@dataclass
class Hole:
    """Bytes of a stream (TCP: the server's sequence space) missing since a packet beyond them
    arrived; `missing` shrinks as retransmissions fill it."""

    start: int
    end: int
    detected: float
    frame: int
    missing: list[tuple[int, int]] = field(default_factory=list)
    recovered: float | None = None


class HoleTracker:
    """Holes in one byte stream received in pieces (offset, end)."""

    def __init__(self, first: int) -> None:
        self.high = first  # the stream's first byte: QUIC 0, TCP's relative 1 (the SYN is 0)
        self.holes: list[Hole] = []

    def receive(self, begin: int, end: int, t: float, frame: int) -> None:
        if begin > self.high:
            self.holes.append(Hole(self.high, begin, t, frame, [(self.high, begin)]))
        elif begin < self.high:
            for hole in self.holes:
                if hole.recovered is None:
                    hole.missing = _subtract(hole.missing, begin, end)
                    if not hole.missing:
                        hole.recovered = t
        self.high = max(self.high, end)


def _subtract(ranges: list[tuple[int, int]], begin: int, end: int) -> list[tuple[int, int]]:
    out = []
    for a, b in ranges:
        if end <= a or begin >= b:
            out.append((a, b))
            continue
        if a < begin:
            out.append((a, begin))
        if end < b:
            out.append((end, b))
    return out


def tcp_losses(packets: list[Packet]) -> tuple[HoleTracker, dict[str, int]]:
    """Holes in the server's sequence space, and what tshark flags: retransmissions, and
    segments after one it did not see (its count of holes, a cross-check of ours)."""
    tracker = HoleTracker(TCP_FIRST_BYTE)
    flags = {"retransmitted_segments": 0, "tshark_lost_segments": 0}
    for i, p in enumerate(packets):
        if p.from_client or not p.payload() or "tcp.seq" not in p.f:
            continue
        seq, nxt = int(p.f["tcp.seq"][0]), int(p.f["tcp.nxtseq"][0])
        tracker.receive(seq, nxt, p.t, _frame(p, i))
        flags["retransmitted_segments"] += p.has("tcp.analysis.retransmission")
        flags["tshark_lost_segments"] += p.has("tcp.analysis.lost_segment")
    return tracker, flags


def stream_frames(p: Packet) -> list[tuple[int, int, int]]:
    """(stream id, offset, length) of each STREAM frame: tshark lists a frame's offset and
    length only when its OFF and LEN bits are set, so they are matched through those bits."""
    offsets = iter(p.f.get("quic.stream.offset", []))
    lengths = iter(p.f.get("quic.stream.length", []))
    out = []
    ids, offs, lens = (
        p.f.get("quic.stream.stream_id", []),
        p.f.get("quic.stream.off", []),
        p.f.get("quic.stream.len", []),
    )
    for k, sid in enumerate(ids):
        off = int(next(offsets, "0")) if k < len(offs) and offs[k] == "1" else 0
        n = int(next(lengths, "0")) if k < len(lens) and lens[k] == "1" else 0
        out.append((int(sid), off, n))
    return out


def quic_losses(packets: list[Packet]) -> tuple[dict[int, HoleTracker], list[dict[str, Any]]]:
    """Holes in each server stream's data, and gaps in the server's 1-RTT packet numbers."""
    streams: dict[int, HoleTracker] = {}
    gaps: list[dict[str, Any]] = []
    high = -1
    for i, p in enumerate(packets):
        if p.from_client:
            continue
        for form, pn in zip(p.f.get("quic.header_form", []), p.f.get("quic.packet_number", []), strict=False):
            if form != "0":
                continue
            if int(pn) > high + 1 and high >= 0:
                gaps.append({"frame": _frame(p, i), "t": p.t, "first": high + 1, "count": int(pn) - high - 1})
            high = max(high, int(pn))
        for sid, off, n in stream_frames(p):
            if n:
                streams.setdefault(sid, HoleTracker(0)).receive(off, off + n, p.t, _frame(p, i))
    return streams, gaps


def loss_list(holes: list[tuple[str, Hole]], t0: float, rtt_s: float) -> list[dict[str, Any]]:
    out = []
    for what, h in holes:
        took = (h.recovered - h.detected) if h.recovered is not None else None
        out.append(
            {
                "what": what,
                "bytes": h.end - h.start,
                "detected_frame": h.frame,
                "detected_ms": _ms(h.detected - t0),
                "recovered_ms": _ms(h.recovered - t0) if h.recovered is not None else None,
                "took_ms": _ms(took) if took is not None else None,
                "took_rtts": _rtts(took, rtt_s) if took is not None else None,
            }
        )
    return out


def loss_evidence(packets: list[Packet], t0: float, rtt_s: float) -> dict[str, Any]:
    if is_quic(packets):
        streams, gaps = quic_losses(packets)
        holes = [
            (f"stream {sid} bytes {h.start}-{h.end}", h) for sid, tr in streams.items() for h in tr.holes
        ]
        holes.sort(key=lambda x: x[1].detected)
        return {
            "losses": loss_list(holes, t0, rtt_s),
            "packet_number_gaps": [
                {"frame": g["frame"], "t_ms": _ms(g["t"] - t0), "first": g["first"], "count": g["count"]}
                for g in gaps
            ],
            "lost_packets": sum(g["count"] for g in gaps),
        }
    tracker, flags = tcp_losses(packets)
    return {"losses": loss_list([(f"seq {h.start}-{h.end}", h) for h in tracker.holes], t0, rtt_s), **flags}


# --- the whole trial ---------------------------------------------------------------------------
def explain_packets(packets: list[Packet], protocol: str, rtt_ms: float, keyed: bool) -> dict[str, Any]:
    """Everything the capture says of one connection (pure: the unit tests' entry)."""
    hs = handshake_evidence(packets, protocol, rtt_ms, keyed)
    first = hs.pop("_answer_index")
    rtt_s = rtt_ms / 1e3
    flights = rounds(packets, first, rtt_s, hs["t0"]) if first is not None else []
    initial = flights[0] if flights else None
    return {
        **hs,
        "first_byte_ms": hs["events_ms"].get("first_byte"),
        "first_byte_rtts": hs["events_rtts"].get("first_byte"),
        "initial_window_packets": initial["packets"] if initial else None,
        "initial_window_bytes": initial["bytes"] if initial else None,
        # One flight held the whole response: the window was not reached, only bounded below.
        "initial_window_reached": len(flights) > 1,
        "rounds": flights,
        **loss_evidence(packets, hs["t0"], rtt_s),
    }


def find_row(run_dir: Path, trial_id: str) -> dict[str, Any]:
    """The trial's last row (a resumed run's rerun supersedes the first), read as the store
    and the report read rows.jsonl (quicbed/runfolder.py): a damaged line mid-file is refused."""
    path = run_dir / rowschema.ROWS_FILE
    if not path.is_file():
        raise ExplainError(f"run {run_dir.name}: no {rowschema.ROWS_FILE}")
    try:
        rows = runfolder.read_rows_file(path).rows
    except runfolder.RunFolderError as exc:
        raise ExplainError(str(exc)) from None
    found = [row for row in rows if row.get("trial_id") == trial_id]
    if not found:
        raise ExplainError(f"run {run_dir.name} has no trial '{trial_id}'")
    return found[-1]


def evidence(run_dir: Path, trial_id: str) -> dict[str, Any]:
    """The trial's evidence as a dict (handshake_rtts, first_byte_ms, initial_window_packets /
    _bytes, rounds, losses, qlog windows...); ExplainError if there is none. With qlogs but no
    packets, the qlogs' part alone and `no_packets` saying why."""
    row = find_row(run_dir, trial_id)
    cap = run_dir / rowschema.capture_dir(trial_id)
    out: dict[str, Any] = {
        "run": run_dir.name,
        "trial_id": trial_id,
        "protocol": row.get("protocol"),
        "server": row.get("server"),
        "client": row.get("client"),
        "row": {k: row.get(k) for k in ("connection_time_ms", "ttfb_ms", "download_time_ms", "bytes")},
        "capture_missing": row.get("capture_missing") or {},
    }
    qlogs = qlog_evidence(cap)
    packets, why = [], NO_CAPTURE
    if _nonempty(cap / PCAP):
        text = run_tshark(cap)
        packets = connection_packets(text, client_port(text, row))
        why = f"{PCAP} holds no packets of the trial's connection"
    if not packets and not qlogs:
        raise ExplainError(f"{trial_id}: {why}", exit_code=1)
    if packets:
        rtt_ms, rtt_source = path_rtt(row, packets)
        out |= {"calib_rtt_ms": rtt_ms, "rtt_source": rtt_source}
        out |= explain_packets(packets, str(row.get("protocol")), rtt_ms, (cap / KEYS).is_file())
    else:
        out["no_packets"] = why
    return out | qlogs


def _nonempty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def path_rtt(row: dict[str, Any], packets: list[Packet]) -> tuple[float, str]:
    """The RTT the timeline counts in: the row's calibrated one, else its configured one, else
    the capture's first exchange (SYN to SYN-ACK, Initial to the server's first packet)."""
    for column in ("calib_rtt_ms", "rtt_ms"):
        value = row.get(column)
        if isinstance(value, int | float) and math.isfinite(value) and value > 0:
            return float(value), column
    start = _first(packets, lambda p: p.from_client)
    reply = _first(packets, lambda p: not p.from_client)
    if start is None or reply is None:
        raise ExplainError("the capture has no exchange to take an RTT from, and the row none")
    return (packets[reply].t - packets[start].t) * 1e3, "first exchange in the capture"


def qlog_evidence(cap: Path) -> dict[str, Any]:
    """Each qlog's congestion windows and lost packets; the initial window is the server's
    (it sends the response), else the client's."""
    qlogs: dict[str, dict[str, Any]] = {}
    for name in QLOGS:
        if _nonempty(cap / name):
            events = read_qlog(cap / name)
            qlogs[name] = {"cwnd": qlog_cwnd(events), "lost": qlog_losses(events)}
    if not qlogs:
        return {}
    first = next((name for name, q in qlogs.items() if q["cwnd"]), None)
    return {
        "qlogs": qlogs,
        "qlog_initial_cwnd_bytes": qlogs[first]["cwnd"][0][1] if first else None,
        "qlog_initial_cwnd_from": first,
    }


# --- printing ----------------------------------------------------------------------------------
def format_text(ev: dict[str, Any]) -> str:
    """The evidence as the terminal shows it: the timeline, windows, losses, what is missing."""
    if "timeline" in ev:
        lines = packet_lines(ev)
    else:
        lines = [f"{ev['trial_id']} ({ev['protocol']}): no packet timeline: {ev['no_packets']}"]
    lines += ["", *qlog_lines(ev)] if ev.get("qlogs") else []
    lines += [f"not captured: {kind}: {reason}" for kind, reason in ev["capture_missing"].items()]
    return "\n".join(lines)


def packet_lines(ev: dict[str, Any]) -> list[str]:
    rtt = ev["calib_rtt_ms"]
    lines = [
        f"{ev['trial_id']} ({ev['protocol']}, HTTP/{ev['http_version']}, "
        f"{'decrypted' if ev['decrypted'] else f'not decrypted: no {KEYS}'}), "
        f"RTT {rtt:.1f} ms ({ev['rtt_source']})",
        "",
        "handshake (from the first SYN / QUIC Initial; * = on the request's chain; "
        "<- #N: waited for frame N):",
        f"{'frame':>6} {'from':<6} {'ms':>9} {'RTTs':>6}  what (waited for)",
    ]
    for s in ev["timeline"]:
        wait = f"  <- #{s['waited_for']}{_late(s, rtt)}" if s["waited_for"] is not None else ""
        lines.append(
            f"{s['frame']:>6}{'*' if s['on_chain'] else ' '}{s['from']:<6} {s['t_ms']:>9.1f} "
            f"{_num(s['t_rtts'], '6.2f')}  {s['what']}{wait}"
        )
    expected, n = ev["expected_rtts"], ev["handshake_rtts"]
    lines.append(
        f"handshake: {_num(n, 'd')} round trip{'' if n == 1 else 's'} before the request "
        f"(expected {_num(expected, 'd')} for {ev['protocol']}); "
        f"the request left at {_num(ev['request_ms'], '.1f')} ms = "
        f"{_num(_div(ev['request_ms'], rtt), '.2f')} RTT"
    )
    lines.append(
        f"first byte: {_num(ev['first_byte_ms'], '.1f')} ms = {_num(ev['first_byte_rtts'], '.2f')} RTT"
        f" (row: connection {_num(ev['row']['connection_time_ms'], '.1f')} ms, "
        f"ttfb {_num(ev['row']['ttfb_ms'], '.1f')} ms)"
    )
    return [*lines, "", *window_lines(ev), "", *loss_lines(ev)]


def qlog_lines(ev: dict[str, Any]) -> list[str]:
    out = []
    for name, q in ev["qlogs"].items():
        cw = q["cwnd"]
        window = f"congestion window {cw[0][1]} B at first, {max(c for _, c in cw)} B at most" if cw else ""
        out.append(f"{name}: {window or 'no congestion window'}; {len(q['lost'])} packet(s) lost")
        for lost in q["lost"][:LOSSES_SHOWN]:
            out.append(f"  packet {lost['packet_number']} lost at {lost['t_ms']:.1f} ms ({lost['trigger']})")
    return out


def _late(step: dict[str, Any], rtt_ms: float) -> str:
    """How much longer than it had to a packet waited: a server packet beyond one RTT (by
    LATE_SHARE of it), a client packet beyond CLIENT_LATE_MS."""
    waited = step["waited_ms"]
    if step["from"] == "server" and waited > (1 + LATE_SHARE) * rtt_ms:
        return f" +{waited - rtt_ms:.1f} ms beyond an RTT"
    if step["from"] == "client" and waited > CLIENT_LATE_MS:
        return f" after {waited:.1f} ms"
    return ""


def window_lines(ev: dict[str, Any]) -> list[str]:
    if not ev["rounds"]:
        return ["initial window: no response data in the capture"]
    out = [
        f"initial window: {'' if ev['initial_window_reached'] else 'at least '}"
        f"{ev['initial_window_packets']} packets, {ev['initial_window_bytes']} B "
        + (
            "(the server's first flight after the request)"
            if ev["initial_window_reached"]
            else "(the whole response fit in the first flight)"
        ),
        "flights per round trip: "
        + ", ".join(f"{r['packets']}" for r in ev["rounds"][:12])
        + (" ..." if len(ev["rounds"]) > 12 else "")
        + " packets",
    ]
    return out


def loss_lines(ev: dict[str, Any]) -> list[str]:
    losses = ev["losses"]
    head = f"losses: {len(losses)} hole(s) in the server's data"
    if "lost_packets" in ev:
        head += f", {ev['lost_packets']} server packet number(s) never seen (lost, or skipped)"
    if "retransmitted_segments" in ev:
        head += (
            f" (tshark: {ev['tshark_lost_segments']} after a segment not captured), "
            f"{ev['retransmitted_segments']} segment(s) tshark calls retransmissions"
        )
    out = [head]
    for item in losses[:LOSSES_SHOWN]:
        took = (
            f"recovered after {item['took_ms']:.1f} ms = {item['took_rtts']:.2f} RTT"
            if item["took_ms"] is not None
            else "never recovered in the capture"
        )
        out.append(
            f"  {item['what']} ({item['bytes']} B) missing from {item['detected_ms']:.1f} ms "
            f"(frame {item['detected_frame']}): {took}"
        )
    if len(losses) > LOSSES_SHOWN:
        took_rtts = sorted(x["took_rtts"] for x in losses if x["took_rtts"] is not None)
        median = f"{took_rtts[len(took_rtts) // 2]:.2f} RTT" if took_rtts else "-"
        out.append(f"  ... {len(losses) - LOSSES_SHOWN} more (median recovery of all: {median})")
    return out


def _div(a: float | None, b: float) -> float | None:
    return a / b if a is not None and b else None


def _num(v: float | None, spec: str) -> str:
    return format(v, spec) if v is not None else "-"


def main_explain(run: str, trial_id: str, as_json: bool = False) -> int:
    """`quicbed explain RUN TRIAL [--json]`: 0 explained; 1 nothing captured; 2 no such run
    or trial."""
    try:
        run_dir = resolve_run_dir(run)
        ev = evidence(run_dir, trial_id)
    except AnalysisError as exc:
        print(f"quicbed explain: {exc}", file=sys.stderr)
        return exc.exit_code
    try:
        print(json.dumps(ev, indent=1) if as_json else format_text(ev))
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        sys.stderr.close()
    return 0
