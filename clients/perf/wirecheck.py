#!/usr/bin/env python3
"""Cross-check a tls_perf/quic_perf row against a packet capture of the same connection.

    wirecheck.py --pcap cap.pcap --row row.json [--keylog keys.txt] [--tolerance-ms 1] [--json]

The row file holds JSON lines as printed by the tools; the row whose local_port matches a
connection in the capture is checked (or --rep N picks one). Packets are decoded with tshark.
Capture on the client host (its interface or lo): the tool's timestamps are the client's.

Wire events (all from the client's point of view):
  start       TCP: the client's SYN.             QUIC: the client's first Initial.
  connect     TCP: the server's SYN-ACK.         QUIC: the server's first packet.
  handshake   the instant libcurl's APPCONNECT describes, i.e. the client has finished:
                TLS 1.2: the server's ChangeCipherSpec+Finished arrives (OpenSSL does no
                         False Start, so SSL_connect returns once that is processed);
                         with --false-start (browsers), the client sends its Finished, as in
                         TLS 1.3: a False Start client is done then, an RTT and the server's
                         turn before the server's Finished arrives;
                TLS 1.3, QUIC: the client sends its Finished (it does so as soon as the server's
                         Finished is processed, so this is handshake completion + client CPU).
              With --keylog the Finished messages are found by decryption; without it by
              record/packet types (TCP: CCS records; QUIC: the last client Handshake packet
              before its first 1-RTT packet).
  first_byte  the first packet carrying the response: HTTP/2 or HTTP/3 HEADERS frame, or the
              HTTP/1.1 status line (needs --keylog; without it, the first server packet with
              payload after the client's first request-carrying packet, flagged approximate).
  done        the last server packet carrying response data (needs --keylog; without it, the
              last server packet with payload before the client's FIN / CONNECTION_CLOSE).

Printed deltas are wire time minus tool time, in ms. Exit status 0 if |delta| of handshake and
first_byte are within the tolerance, 1 if not, 2 on usage or decoding problems.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FIELDS = [
    "frame.time_epoch",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "tcp.flags.syn",
    "tcp.flags.ack",
    "tcp.flags.fin",
    "tcp.len",
    "tls.record.content_type",
    "tls.handshake.type",
    "http2.type",
    "http2.length",
    "http2.streamid",
    "http.response.code",
    "quic.long.packet_type",
    "quic.header_form",
    "quic.frame_type",
    "quic.stream.stream_id",
    "quic.stream.length",
    "http3.frame_type",
]

# tshark decodes a trial's capture (headers, at most its run's capture cap) in seconds.
TSHARK_TIMEOUT_S = 300.0
SERVER_PORT = 443  # the testbed's servers listen here, TCP and UDP
TLS_CCS = "20"
TLS_FINISHED = "20"
QUIC_HANDSHAKE = "2"
QUIC_INITIAL = "0"
H2_DATA, H2_HEADERS = "0", "1"
H3_DATA, H3_HEADERS = "0", "1"
QUIC_CONNECTION_CLOSE = {"28", "29"}


@dataclass
class Packet:
    """One frame of the connection, reduced to what the event rules need."""

    t: float
    from_client: bool
    f: dict[str, list[str]] = field(default_factory=dict)

    def has(self, name: str, value: str | None = None) -> bool:
        values = self.f.get(name, [])
        return bool(values) if value is None else value in values

    def pairs(self, a: str, b: str) -> list[tuple[str, str]]:
        """Per-frame values of two fields of the same protocol, e.g. (type, length)."""
        return list(zip(self.f.get(a, []), self.f.get(b, []), strict=False))

    def payload(self) -> bool:
        if "tcp.len" in self.f:
            return self.f["tcp.len"] != ["0"]
        return True  # every QUIC packet carries frames


Pred = Callable[[Packet], bool]


def _split(value: str) -> list[str]:
    out = []
    for v in value.split(","):
        v = v.strip()
        if v.startswith("0x"):
            v = str(int(v, 16))  # tshark prints QUIC/HTTP3 frame types as hex
        v = {"True": "1", "False": "0"}.get(v, v)  # tshark 4.x prints booleans as words
        if v:
            out.append(v)
    return out


def tshark_fields_argv(
    pcap: str,
    keylog: str | None,
    fields: list[str],
    display_filter: str = "",
    quic_ports: tuple[int, ...] = (SERVER_PORT,),
) -> list[str]:
    """tshark's arguments that print `fields` of each frame, one line each, '|' between fields
    and ',' between a field's values (several TLS records, QUIC packets or frames). UDP on
    `quic_ports` is decoded as QUIC: left to its heuristics, tshark took a flow from an
    ephemeral client port for Elasticsearch's Zen Ping, and found no QUIC in it."""
    cmd = ["tshark", "-n", "-r", pcap]
    for port in dict.fromkeys(quic_ports):
        cmd += ["-d", f"udp.port=={port},quic"]
    if display_filter:
        cmd += ["-Y", display_filter]
    cmd += ["-T", "fields", "-E", "separator=|", "-E", "aggregator=,"]
    if keylog:
        cmd += ["-o", f"tls.keylog_file:{keylog}"]
    for name in fields:
        cmd += ["-e", name]
    return cmd


def parse_fields(text: str, fields: list[str], client_port: int) -> list[Packet]:
    """tshark_fields_argv's output as Packets; the first field is frame.time_epoch. A frame is
    the client's when its source port is `client_port`."""
    packets = []
    for line in text.splitlines():
        cols = line.split("|")
        f = {name: _split(v) for name, v in zip(fields, cols, strict=False) if v}
        src = (f.get("tcp.srcport") or f.get("udp.srcport") or ["0"])[0]
        packets.append(Packet(float(cols[0]), int(src) == client_port, f))
    return packets


def read_packets(pcap: Path, port: int, keylog: Path | None) -> list[Packet]:
    """Decodes the frames to or from the client's port with tshark."""
    cmd = tshark_fields_argv(
        str(pcap),
        str(keylog) if keylog else None,
        FIELDS,
        f"tcp.port == {port} || udp.port == {port}",
        (port, SERVER_PORT),
    )
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=TSHARK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"tshark did not finish within {TSHARK_TIMEOUT_S:g} s") from None
    if res.returncode != 0:
        raise RuntimeError(f"tshark failed: {res.stderr.strip()}")
    return parse_fields(res.stdout, FIELDS, port)


def _first(packets: list[Packet], pred: Pred, start: int = 0) -> int | None:
    for i in range(start, len(packets)):
        if pred(packets[i]):
            return i
    return None


def _last(packets: list[Packet], pred: Pred, end: int | None = None) -> int | None:
    stop = len(packets) if end is None else end
    for i in range(stop - 1, -1, -1):
        if pred(packets[i]):
            return i
    return None


def tcp_events(
    pk: list[Packet], tls12: bool, keyed: bool, false_start: bool = False
) -> dict[str, int | None]:
    ev: dict[str, int | None] = {}
    ev["start"] = _first(
        pk, lambda p: p.from_client and p.has("tcp.flags.syn", "1") and p.has("tcp.flags.ack", "0")
    )
    ev["connect"] = _first(pk, lambda p: not p.from_client and p.has("tcp.flags.syn", "1"))
    hello = _first(pk, lambda p: not p.from_client and p.has("tls.handshake.type", "2")) or 0
    if tls12 and not false_start:  # the server's CCS (+Finished) ends the client's handshake
        ev["handshake"] = _first(
            pk, lambda p: not p.from_client and p.has("tls.record.content_type", TLS_CCS), hello
        )
    elif keyed:
        ev["handshake"] = _first(
            pk, lambda p: p.from_client and p.has("tls.handshake.type", TLS_FINISHED), hello
        )
    else:  # the client's CCS (middlebox compatibility) travels with its Finished
        ev["handshake"] = _first(pk, lambda p: p.from_client and p.has("tls.record.content_type"), hello + 1)
    return ev


def quic_events(pk: list[Packet], keyed: bool) -> dict[str, int | None]:
    ev: dict[str, int | None] = {}
    ev["start"] = _first(pk, lambda p: p.from_client and p.has("quic.long.packet_type", QUIC_INITIAL))
    ev["connect"] = _first(pk, lambda p: not p.from_client)
    if keyed:
        ev["handshake"] = _first(pk, lambda p: p.from_client and p.has("tls.handshake.type", TLS_FINISHED))
    else:
        one_rtt = _first(pk, lambda p: p.from_client and p.has("quic.header_form", "0"))
        ev["handshake"] = _last(
            pk, lambda p: p.from_client and p.has("quic.long.packet_type", QUIC_HANDSHAKE), one_rtt
        )
    return ev


def response_events(pk: list[Packet], http: str, keyed: bool, handshake: int | None) -> dict[str, int | None]:
    """first_byte and done; approximate (payload-based) without decryption."""
    if keyed and http in ("2", "3"):
        name = "http2.type" if http == "2" else "http3.frame_type"
        hdr, data = (H2_HEADERS, H2_DATA) if http == "2" else (H3_HEADERS, H3_DATA)
        first = _first(pk, lambda p: not p.from_client and p.has(name, hdr))
        if http == "3":  # DATA frames span packets: the last packet with request-stream bytes
            done = _last(
                pk,
                lambda p: not p.from_client
                and any(
                    sid == "0" and n != "0"
                    for sid, n in p.pairs("quic.stream.stream_id", "quic.stream.length")
                ),
            )
        else:  # the last non-empty DATA frame (END_STREAM may come in an empty one)
            done = _last(
                pk,
                lambda p: not p.from_client
                and any(t == data and n != "0" for t, n in p.pairs("http2.type", "http2.length")),
            )
        return {"first_byte": first, "done": done}
    if keyed:  # HTTP/1.1
        first = _first(pk, lambda p: not p.from_client and p.has("http.response.code"))
        done = _last(
            pk, lambda p: not p.from_client and p.payload() and p.has("tls.record.content_type", "23")
        )
        return {"first_byte": first, "done": done}
    # Without keys: the request is the client's first payload after the handshake event, the
    # response starts with the server's next payload. Session tickets (TLS 1.3, QUIC) sent at
    # the same time can be mistaken for it, hence "approximate".
    after = (handshake or 0) + 1
    req = _first(pk, lambda p: p.from_client and p.payload(), after)
    first = _first(pk, lambda p: not p.from_client and p.payload(), (req or after) + 1)
    close = _first(
        pk,
        lambda p: p.from_client
        and (
            p.has("tcp.flags.fin", "1")
            or any(t in QUIC_CONNECTION_CLOSE for t in p.f.get("quic.frame_type", []))
        ),
        first or 0,
    )
    done = _last(pk, lambda p: not p.from_client and p.payload(), close)
    return {"first_byte": first, "done": done}


ROW_KEYS = {
    "start": "t_start",
    "connect": "t_connect",
    "handshake": "t_handshake",
    "first_byte": "t_first_byte",
    "done": "t_done",
}


def compare(row: dict, pk: list[Packet], keyed: bool, false_start: bool = False) -> dict:
    quic = row.get("protocol") == "quic"
    tls12 = row.get("protocol") == "tls1.2"
    ev = quic_events(pk, keyed) if quic else tcp_events(pk, tls12, keyed, false_start)
    ev.update(response_events(pk, str(row.get("http_version", "")), keyed, ev.get("handshake")))
    events = {}
    for name, key in ROW_KEYS.items():
        i = ev.get(name)
        wire = pk[i].t if i is not None else None
        tool = row.get(key)
        delta = (wire - tool) * 1e3 if wire is not None and tool is not None else None
        events[name] = {"wire": wire, "tool": tool, "delta_ms": delta}
    start = events["start"]["wire"]
    rtt = None
    if start is not None and events["connect"]["wire"] is not None:
        rtt = (events["connect"]["wire"] - start) * 1e3
    hs = events["handshake"]["wire"]
    return {
        "protocol": row.get("protocol"),
        "local_port": row.get("local_port"),
        "decrypted": keyed,
        "approximate": not keyed,
        "events": events,
        "wire_first_rtt_ms": rtt,
        "wire_connection_time_ms": (hs - start) * 1e3 if hs is not None and start else None,
        "tool_connection_time_ms": row.get("connection_time_ms"),
    }


def _fmt(v: float | None, spec: str) -> str:
    return format(v, spec) if v is not None else "-"


def print_report(res: dict) -> None:
    print(
        f"protocol {res['protocol']}  client port {res['local_port']}  "
        f"{'decrypted' if res['decrypted'] else 'not decrypted (approximate)'}"
    )
    print(f"{'event':<11} {'wire (epoch s)':>18} {'tool (epoch s)':>18} {'wire-tool ms':>13}")
    for name, e in res["events"].items():
        print(
            f"{name:<11} {_fmt(e['wire'], '18.6f')} {_fmt(e['tool'], '18.6f')} "
            f"{_fmt(e['delta_ms'], '13.3f')}"
        )
    print(
        f"first RTT on wire (SYN->SYN-ACK / Initial->first reply): "
        f"{_fmt(res['wire_first_rtt_ms'], '.3f')} ms"
    )
    print(
        f"connection time: wire start->handshake {_fmt(res['wire_connection_time_ms'], '.3f')}"
        f" ms, tool {_fmt(res['tool_connection_time_ms'], '.3f')} ms"
    )


def load_row(path: Path, rep: int | None, ports: set[int]) -> dict:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        if (rep is not None and row.get("rep") == rep) or (rep is None and row.get("local_port") in ports):
            return row
    if len(rows) == 1:
        return rows[0]
    raise ValueError("no row matches a connection in the capture (use --rep)")


def capture_ports(pcap: Path) -> set[int]:
    try:
        res = subprocess.run(
            ["tshark", "-n", "-r", str(pcap), "-T", "fields", "-e", "tcp.srcport", "-e", "udp.srcport"],
            capture_output=True,
            text=True,
            check=False,
            timeout=TSHARK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"tshark did not finish within {TSHARK_TIMEOUT_S:g} s") from None
    ports = set()
    for tok in res.stdout.split():
        if tok.isdigit():
            ports.add(int(tok))
    return ports


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcap", type=Path, required=True)
    ap.add_argument("--row", type=Path, required=True, help="file with the tool's JSON row(s)")
    ap.add_argument("--keylog", type=Path, help="SSLKEYLOGFILE written by --keylog")
    ap.add_argument("--rep", type=int, help="check the row with this rep")
    ap.add_argument("--tolerance-ms", type=float, default=1.0)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument(
        "--false-start",
        action="store_true",
        help="TLS 1.2: the handshake ends with the client's Finished leaving (browsers' False Start)",
    )
    args = ap.parse_args(argv)
    try:
        row = load_row(args.row, args.rep, capture_ports(args.pcap))
        pk = read_packets(args.pcap, int(row["local_port"]), args.keylog)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        print(f"wirecheck: {exc}", file=sys.stderr)
        return 2
    if not pk:
        print("wirecheck: no packets of that connection in the capture", file=sys.stderr)
        return 2
    res = compare(row, pk, args.keylog is not None, args.false_start)
    checked = [res["events"][k]["delta_ms"] for k in ("handshake", "first_byte")]
    res["ok"] = all(d is not None and abs(d) <= args.tolerance_ms for d in checked)
    if args.json:
        print(json.dumps(res))
    else:
        print_report(res)
        print("OK" if res["ok"] else f"MISMATCH (tolerance {args.tolerance_ms} ms)")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
