#!/usr/bin/env python3
"""aioquic_perf: HTTP/3 GETs through aioquic's public API, one JSON row per measurement.

It keeps the client contract of clients/tools.py and the row of the perf tools
(clients/perf/README.md, quicbed/rowschema.py TOOL): the same fixed arguments, the same row
keys, exit 0 all measurements succeeded, 1 a row carries an error, 2 usage error (no rows),
3 a valid option aioquic cannot do (no rows). Every measurement is a fresh QUIC connection
on a fresh UDP socket. Timed in aioquic's events, as quic_perf's ngtcp2 backend is timed in
its callbacks: t_start right before the connection is created (socket open, address known),
t_handshake at HandshakeCompleted (before the client's Finished leaves), t_first_byte at the
first stream data of the request, t_done at the response's end of stream.

--resume: an unprinted warm-up GET leaves a session ticket; each measured connection resumes
the newest ticket, and sends its request in 0-RTT with the Initial where the ticket allows
early data (aioquic resends it in 1-RTT if the server refuses it).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import platform
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import IO, Any
from urllib.parse import urlsplit

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import Buffer, BufferReadError
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, QuicEvent, StreamDataReceived
from aioquic.quic.logger import QuicLogger
from aioquic.tls import SessionTicket

TOOL = "aioquic_perf"
TOOL_VERSION = "0.1.0"
ROW_TOOL = "aioquic"  # the row's `tool`: the client's name in the testbed (stacks/aioquic)
UNSUPPORTED_EXIT = 3  # clients/tools.py UNSUPPORTED_EXIT
CONGESTION = ("reno", "cubic")  # QuicConfiguration.congestion_control_algorithm's names
CPU_PERIOD_S = 0.5


class Unsupported(Exception):
    """A valid option that aioquic cannot do: exit 3, no rows."""


def library() -> str:
    """The stack's versions, as the row's `library` (the C tools: curl_version())."""
    from cryptography.hazmat.backends.openssl import backend

    names = ("aioquic", "pylsqpack", "cryptography")
    parts = [f"{n}/{version(n)}" for n in names]
    return " ".join(
        [
            *parts,
            backend.openssl_version_text().replace(" ", "/", 1).split(" ")[0],
            f"CPython/{platform.python_version()}",
        ]
    )


# ---------------------------------------------------------------- arguments


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"usage: {self.prog} --url https://NAME[:PORT]/PATH [options] ({message}; see --help)\n")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _not_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError(text)
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = _Parser(
        prog=TOOL,
        description="HTTP/3 GETs through aioquic; one JSON row per measurement.",
        epilog="Exit status: 0 all measurements succeeded, 1 some failed, 2 usage error, "
        "3 unsupported (an option aioquic cannot do; no rows).",
    )
    p.add_argument("--version", action="version", version=f"{TOOL} {TOOL_VERSION} ({library()})")
    p.add_argument("--url", required=True)
    p.add_argument("--resolve", action="append", default=[], metavar="NAME:PORT:ADDR")
    ca = p.add_mutually_exclusive_group()
    ca.add_argument("--cacert", metavar="FILE")
    ca.add_argument("--insecure", action="store_true")
    p.add_argument("-n", "--repetitions", type=_positive, default=1)
    p.add_argument("--pause", type=_not_negative, default=0.0, metavar="MS")
    p.add_argument("--timeout", type=_positive, default=30, metavar="S")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--keylog", metavar="FILE")
    p.add_argument("--qlog", metavar="FILE")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--output-body", metavar="FILE")
    body.add_argument("--discard", action="store_true")
    p.add_argument("--sha256", action="store_true")
    p.add_argument("--cold", action="store_true", help="no in-memory warm-up of the stack")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--cc", metavar="NAME", help="congestion control: reno (aioquic's default), cubic")
    p.add_argument("--backend", choices=["aioquic"], default="aioquic")
    p.add_argument("--http", choices=["3"], default="3")
    p.add_argument("--tls", choices=["1.3"], default="1.3")
    p.add_argument("--resume", action="store_true")
    # Valid for the C tools, not for aioquic: exit 3 (checked in unsupported()).
    p.add_argument("--groups", metavar="LIST")
    p.add_argument("--curl-timers", action="store_true")
    args = p.parse_args(argv)
    for entry in args.resolve:
        name, _, rest = entry.partition(":")
        port, _, addr = rest.partition(":")
        if not name or not port.isdigit() or not addr:
            p.error(f"--resolve {entry!r} is not NAME:PORT:ADDR")
    return args


def unsupported(args: argparse.Namespace) -> str:
    """Why aioquic cannot do what was asked ("" = it can)."""
    if args.groups is not None:
        return "--groups: aioquic's public API cannot choose the key-exchange groups"
    if args.curl_timers:
        return "--curl-timers: there is no libcurl in aioquic_perf"
    if args.cc is not None and args.cc not in CONGESTION:
        return f"--cc {args.cc}: aioquic has no congestion control {args.cc!r} ({', '.join(CONGESTION)})"
    return ""


# ---------------------------------------------------------------- CPU samples


def _jiffies() -> tuple[int, int, int]:
    """(this process's utime+stime, all CPU jiffies, idle+iowait jiffies)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    proc = int(fields[11]) + int(fields[12])
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    return proc, sum(cpu), cpu[3] + cpu[4]


class CpuSampler(threading.Thread):
    """Every 500 ms: the process's share of one CPU and the machine's busy share (cpu.c)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[dict[str, float]] = []
        self._halt = threading.Event()
        self._ncpu = os.cpu_count() or 1

    def run(self) -> None:
        start, last = time.monotonic(), _jiffies()
        while not self._halt.wait(CPU_PERIOD_S):
            now = _jiffies()
            d_proc, d_all, d_idle = (now[i] - last[i] for i in range(3))
            last = now
            if d_all <= 0:
                continue
            self.samples.append(
                {
                    "t": round(time.monotonic() - start, 3),
                    "proc_pct": round(100 * d_proc / (d_all / self._ncpu), 1),
                    "sys_busy_pct": round(100 * (d_all - d_idle) / d_all, 1),
                }
            )

    def stop(self) -> list[dict[str, float]]:
        self._halt.set()
        self.join()
        return self.samples


# ---------------------------------------------------------------- one measurement


@dataclass
class Target:
    url: str
    host: str
    port: int
    address: str
    authority: str
    path: str


@dataclass
class Measurement:
    """What one connection saw; becomes a row."""

    t_start: float | None = None
    t_handshake: float | None = None
    t_first_byte: float | None = None
    t_done: float | None = None
    client_cpu_ms: float | None = None
    local: tuple[str, int] = ("", 0)
    status: int = 0
    bytes: int = 0
    alpn: str = ""
    cipher: str = ""
    resumed: bool | None = None
    early_data_bytes: int | None = None  # --resume: bytes of the 0-RTT packets the server took
    error: str = ""
    digest: Any = field(default_factory=hashlib.sha256)


def zero_rtt_bytes(datagram: bytes) -> int:
    """The bytes of the 0-RTT packets in a datagram: its coalesced long-header packets
    (RFC 9000 17.2), each type from its first byte, each length from its header."""
    buf, total = Buffer(data=datagram), 0
    try:
        while not buf.eof() and datagram[buf.tell()] & 0x80:  # a long header
            start = buf.tell()
            kind = (buf.pull_uint8() & 0x30) >> 4  # QUIC v1: 0 Initial, 1 0-RTT, 2 Handshake
            buf.pull_uint32()  # version
            buf.pull_bytes(buf.pull_uint8())  # destination connection ID
            buf.pull_bytes(buf.pull_uint8())  # source connection ID
            if kind == 3:  # Retry: no length, and never sent by a client
                break
            if kind == 0:
                buf.pull_bytes(buf.pull_uint_var())  # the token
            end = buf.pull_uint_var() + buf.tell()
            if kind == 1:
                total += end - start
            buf.seek(end)
    except BufferReadError:
        pass  # a short or foreign datagram: what was counted stands
    return total


class CountingTransport:
    """The connection's datagram transport, counting the 0-RTT bytes it sends."""

    def __init__(self, inner: asyncio.DatagramTransport) -> None:
        self.inner, self.zero_rtt = inner, 0

    def sendto(self, data: bytes, addr: Any = None) -> None:
        self.zero_rtt += zero_rtt_bytes(data)
        self.inner.sendto(data, addr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class PerfProtocol(QuicConnectionProtocol):
    """One GET on one connection, timed in aioquic's events."""

    def __init__(self, quic: QuicConnection, target: Target, m: Measurement, body: IO[bytes] | None) -> None:
        super().__init__(quic)
        self.h3 = H3Connection(quic)
        self.target, self.m, self.body = target, m, body
        self.stream_id: int | None = None
        self.cpu0 = 0.0
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.counting: CountingTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.counting = CountingTransport(transport)  # type: ignore[arg-type]
        super().connection_made(self.counting)

    def start(self, addr: tuple[str, int], early: bool = False) -> None:
        """Connect; with `early` (a resumed ticket that allows early data), the request is
        written before the Initial leaves, so it goes in 0-RTT beside it."""
        self.m.t_start = time.time()
        self.cpu0 = time.thread_time()
        self.connect(addr, transmit=not early)
        if early:
            self._request()
            self.transmit()

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, HandshakeCompleted):
            self.m.t_handshake = time.time()
            self.m.client_cpu_ms = (time.thread_time() - self.cpu0) * 1e3
            self.m.alpn = event.alpn_protocol or ""
            self.m.resumed = event.session_resumed
            suite = getattr(getattr(self._quic.tls, "key_schedule", None), "cipher_suite", None)
            self.m.cipher = f"TLS_{suite.name}" if suite is not None else ""
            early = self.counting.zero_rtt if self.counting else 0
            self.m.early_data_bytes = early if event.early_data_accepted else 0
            if self.stream_id is None:
                self._request()
        elif isinstance(event, StreamDataReceived) and event.stream_id == self.stream_id:
            if self.m.t_first_byte is None and event.data:
                self.m.t_first_byte = time.time()
        elif isinstance(event, ConnectionTerminated):
            self._fail(_termination_error(event, self.m.t_handshake is not None))
        for h3_event in self.h3.handle_event(event):
            self._h3_event(h3_event)

    def _request(self) -> None:
        self.stream_id = self._quic.get_next_available_stream_id()
        headers = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", self.target.authority.encode()),
            (b":path", self.target.path.encode()),
            (b"user-agent", f"{TOOL}/{TOOL_VERSION}".encode()),
        ]
        self.h3.send_headers(self.stream_id, headers, end_stream=True)

    def _h3_event(self, event: H3Event) -> None:
        if getattr(event, "stream_id", None) != self.stream_id:
            return
        if isinstance(event, HeadersReceived):
            for name, value in event.headers:
                if name == b":status":
                    self.m.status = int(value)
        elif isinstance(event, DataReceived):
            self.m.bytes += len(event.data)
            self.m.digest.update(event.data)
            if self.body is not None:
                self.body.write(event.data)
        if getattr(event, "stream_ended", False) and not self.finished.done():
            self.m.t_done = time.time()
            if self.m.status != 200:
                self.m.error = f"http: status {self.m.status}"
            self.finished.set_result(None)

    def _fail(self, error: str) -> None:
        if not self.finished.done():
            self.m.error = error
            self.finished.set_result(None)

    def error_received(self, exc: Exception) -> None:
        # An ICMP error on the connected socket: port unreachable means no server listens.
        self._fail(f"connect: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")


def _termination_error(event: ConnectionTerminated, handshake_done: bool) -> str:
    # QUIC's CRYPTO_ERROR range carries the TLS alert (RFC 9001 4.8): a certificate problem.
    if 0x100 <= event.error_code <= 0x1FF:
        return f"tls: {event.reason_phrase or 'alert'} (alert {event.error_code - 0x100})"
    stage = "after" if handshake_done else "during"
    detail = f"code 0x{event.error_code:x} {event.reason_phrase}".rstrip()
    return f"quic: connection closed {stage} the handshake, {detail}"


def configuration(args: argparse.Namespace, target: Target, keylog: IO[str] | None) -> QuicConfiguration:
    config = QuicConfiguration(
        is_client=True,
        alpn_protocols=H3_ALPN,
        server_name=target.host,
        secrets_log_file=keylog,
        congestion_control_algorithm=args.cc or "reno",
    )
    if args.insecure:
        config.verify_mode = ssl.CERT_NONE
    elif args.cacert:
        config.load_verify_locations(cadata=_ca_data(args.cacert))
    else:
        config.load_verify_locations(cafile="/etc/ssl/certs/ca-certificates.crt")
    return config


def _ca_data(path: str) -> bytes:
    """The CA file, read and checked before any connection (a missing CA is a row error)."""
    from cryptography import x509

    with open(path, "rb") as f:
        data = f.read()
    x509.load_pem_x509_certificate(data)  # ValueError: no certificate in it
    return data


class Tickets:
    """The newest session ticket the server gave (--resume): each connection resumes it."""

    def __init__(self) -> None:
        self.newest: SessionTicket | None = None

    def keep(self, ticket: SessionTicket) -> None:
        self.newest = ticket


async def measure(
    args: argparse.Namespace,
    target: Target,
    config: QuicConfiguration,
    qlog: IO[str] | None,
    body: IO[bytes] | None,
    tickets: Tickets | None = None,
) -> Measurement:
    m = Measurement()
    loop = asyncio.get_running_loop()
    logger = QuicLogger() if qlog else None
    config.quic_logger = logger
    config.session_ticket = tickets.newest if tickets else None
    # aioquic sets up 0-RTT keys for a ticket whose early-data limit is QUIC's (RFC 9001 4.6.1).
    early = config.session_ticket is not None and config.session_ticket.max_early_data_size is not None

    def protocol() -> PerfProtocol:
        handler = tickets.keep if tickets else None
        quic = QuicConnection(configuration=config, session_ticket_handler=handler)
        return PerfProtocol(quic, target, m, body)

    try:
        transport, proto = await loop.create_datagram_endpoint(
            protocol, remote_addr=(target.address, target.port)
        )
    except OSError as exc:
        m.error = f"connect: {exc.strerror or exc}"
        return m
    try:
        sockname = transport.get_extra_info("sockname")
        m.local = (sockname[0], sockname[1])
        proto.start((target.address, target.port), early=early)
        try:
            await asyncio.wait_for(asyncio.shield(proto.finished), args.timeout)
        except TimeoutError:
            what = "transfer" if m.t_handshake else "handshake"
            m.error = f"timeout: {what} not done after {args.timeout} s"
        if tickets and not m.error and tickets.newest is config.session_ticket:
            await asyncio.sleep(0.05)  # a ticket the server sends after the response
        proto.close()  # CONNECTION_CLOSE after the measurement: untimed
        await asyncio.sleep(0)
    finally:
        transport.close()
    if logger and qlog:
        write_qlog(logger, qlog)
    return m


def warm_up(config: QuicConfiguration) -> None:
    """The stack's first use, in memory and sent nowhere: a connection object builds its TLS
    context, key shares, ClientHello and protected Initial, then is dropped. A fresh process
    (the runner starts one per trial) would otherwise time that in its first connection."""
    quic = QuicConnection(configuration=config)
    quic.connect(("192.0.2.1", 443), now=time.monotonic())
    quic.datagrams_to_send(now=time.monotonic())


def write_qlog(logger: QuicLogger, out: IO[str]) -> None:
    """aioquic's qlog 0.3 traces as JSON-SEQ: per connection a header record, then its events."""
    for trace in logger.to_dict()["traces"]:
        header = {
            "qlog_version": "0.3",
            "qlog_format": "JSON-SEQ",
            "title": TOOL,
            "trace": {"common_fields": trace["common_fields"], "vantage_point": trace["vantage_point"]},
        }
        out.write("\x1e" + json.dumps(header) + "\n")
        for event in trace["events"]:
            out.write("\x1e" + json.dumps(event) + "\n")
    out.flush()


# ---------------------------------------------------------------- the row


def make_row(
    args: argparse.Namespace, target: Target, m: Measurement, rep: int, cpu: list[Any]
) -> dict[str, Any]:
    ok = not m.error

    def ms(t: float | None) -> float | None:
        return round((t - m.t_start) * 1e3, 3) if t is not None and m.t_start is not None else None

    download = ms(m.t_done) if ok else None
    row: dict[str, Any] = {
        "tool": ROW_TOOL,
        "tool_version": TOOL_VERSION,
        "library": LIBRARY,
        "backend": "aioquic",
        "protocol": "quic",
        "tls_version": "TLSv1.3" if m.t_handshake else "",
        "http_version": "3" if m.alpn.startswith("h3") else "",
        "cipher": m.cipher,
        "tls_group": "",
        "local_ip": m.local[0],
        "local_port": m.local[1],
        "remote_ip": target.address,
        "remote_port": target.port,
        "url": args.url,
        "bytes": m.bytes,
        "http_status": m.status,
        "t_start": m.t_start,
        "t_connect": m.t_handshake,
        "t_handshake": m.t_handshake,
        "t_first_byte": m.t_first_byte,
        "t_done": m.t_done if ok else None,
        "connection_time_ms": ms(m.t_handshake),
        "client_cpu_ms": round(m.client_cpu_ms, 3) if m.client_cpu_ms is not None else None,
        "ttfb_ms": ms(m.t_first_byte),
        "download_time_ms": download,
        "throughput_mbps": round(m.bytes * 8 / download / 1e3, 3) if download else None,
        "resumed": m.resumed if m.t_handshake else False,
        "cpu": cpu,
        "rep": rep,
        "error": m.error,
    }
    if args.resume:
        row["early_data_bytes"] = m.early_data_bytes
    if args.sha256:
        row["sha256"] = m.digest.hexdigest() if ok else ""
    if args.cc:
        row["cc"] = args.cc
    return row


def target_of(args: argparse.Namespace) -> Target | str:
    """The URL's host, port and path, and the address to use (--resolve, else DNS)."""
    try:
        url = urlsplit(args.url)
        port = url.port or 443
    except ValueError as exc:
        return f"url: {exc}"
    host = url.hostname or ""
    if url.scheme != "https" or not host or any(c.isspace() for c in args.url):
        return f"url: not an https://NAME[:PORT]/PATH URL: {args.url}"
    address = next((e.split(":", 2)[2] for e in args.resolve if e.split(":", 2)[:2] == [host, str(port)]), "")
    if not address:
        try:
            address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0][4][0]
        except OSError as exc:
            return f"connect: cannot resolve {host}: {exc}"
    authority = host if port == 443 else f"{host}:{port}"
    path = url.path or "/"
    return Target(args.url, host, port, address, authority, path + (f"?{url.query}" if url.query else ""))


def error_row(args: argparse.Namespace, error: str, rep: int) -> dict[str, Any]:
    target = Target(args.url, "", 0, "", "", "")
    return make_row(args, target, Measurement(error=error), rep, [])


async def run(args: argparse.Namespace) -> int:
    target = target_of(args)
    keylog = open(args.keylog, "a") if args.keylog else None  # open for the whole run
    qlog = open(args.qlog, "a") if args.qlog else None
    body = open(args.output_body, "wb") if args.output_body else None
    failed = False
    try:
        config_error = ""
        config = None
        if isinstance(target, Target):
            try:
                config = configuration(args, target, keylog)
            except (OSError, ValueError) as exc:
                config_error = f"tls: CA file {args.cacert}: {getattr(exc, 'strerror', None) or exc}"
            if config is not None and not args.cold:
                warm_up(configuration(args, target, None))
        tickets = Tickets() if args.resume else None
        if tickets and config is not None and isinstance(target, Target):
            # Unprinted: a full connection whose ticket the first measurement resumes.
            first = await measure(args, target, configuration(args, target, None), None, None, tickets)
            if first.error or tickets.newest is None:
                config_error = f"resume: the warm-up connection {first.error or 'got no session ticket'}"
                config = None
        for rep in range(args.repetitions):
            if rep and args.pause:
                await asyncio.sleep(args.pause / 1e3)
            if not isinstance(target, Target) or config is None:
                row = error_row(args, target if isinstance(target, str) else config_error, rep)
            else:
                sampler = CpuSampler() if args.cpu else None
                if sampler:
                    sampler.start()
                m = await measure(args, target, config, qlog, body, tickets)
                row = make_row(args, target, m, rep, sampler.stop() if sampler else [])
            failed |= bool(row["error"])
            print(json.dumps(row), flush=True)
    finally:
        for f in (keylog, qlog, body):
            if f:
                f.close()
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    why = unsupported(args)
    if why:
        print(f"{TOOL}: unsupported: {why}", file=sys.stderr)
        return UNSUPPORTED_EXIT
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    try:
        return asyncio.run(run(args))
    except OSError as exc:  # a --keylog/--qlog/--output-body path it cannot write
        print(f"{TOOL}: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2


LIBRARY = library()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
