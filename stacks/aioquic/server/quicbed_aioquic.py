#!/usr/bin/env python3
"""quicbed-aioquic: a static HTTP/3 file server on aioquic's public asyncio API.

Serves a directory read-only over HTTP/3 (QUIC, TLS 1.3) on UDP: GET/HEAD of any regular file
under the root, 404 otherwise (no escape from the root through `..` or symlinks), 204 at the
health path. Big files are streamed in chunks, a new chunk read only while the stream's send
buffer (data queued and not yet acknowledged) is below a bound, so memory stays bounded.

One JSON line per request to the access log in quicbed's `quicbed-json` format
(servers/accesslog.py); the server's own messages go to stderr. With $QLOGDIR set, aioquic's
qlog 0.3 trace of every connection is written there as JSON-SEQ, one file per connection,
when the connection ends.

Usage: quicbed-aioquic --root DIR --cert PEM --key KEY [--host H] [--port N]
         [--access-log FILE] [--health PATH]
       quicbed-aioquic --version
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import mimetypes
import os
import signal
import sys
import time
from email.utils import formatdate
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote

from aioquic import __version__ as AIOQUIC_VERSION
from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.h3.connection import H3_ALPN, H3Connection, Setting
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, ProtocolNegotiated, QuicEvent
from aioquic.quic.logger import QuicLogger, QuicLoggerTrace
from aioquic.tls import SessionTicket

NAME = "quicbed-aioquic"
CHUNK = 64 * 1024
# Data queued on a stream and not yet acknowledged, above which no more of the file is read.
# It must exceed what can be in flight (the path's bandwidth-delay product; 4 MB is 200 Mbit/s
# at 160 ms), or the buffer, not the congestion window, would cap the transfer.
HIGH_WATER = 4 * 1024 * 1024


class StaticTableH3(H3Connection):
    """HTTP/3 whose SETTINGS offer no QPACK dynamic table, as Caddy's, HAProxy's, quiche's and
    quinn's do. Why: Debian's curl 8.14.1 (OpenSSL 3.5's QUIC, the servers' health probe and
    the libcurl perf tool) sometimes never sends its control and QPACK encoder streams, and a
    request whose headers refer to table entries it never inserted waits for them for ever
    (RFC 9204 2.1.2): 12 of 300 fetches over loopback, each a 10 s timeout, none once the
    table is off (stacks/aioquic/README.md)."""

    def _get_local_settings(self) -> dict[int, int]:
        # aioquic's own hook for the SETTINGS it sends (pinned: AIOQUIC_VERSION).
        settings = super()._get_local_settings()
        settings[Setting.QPACK_MAX_TABLE_CAPACITY] = 0
        settings[Setting.QPACK_BLOCKED_STREAMS] = 0
        return settings


def log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {NAME}: {msg}", file=sys.stderr, flush=True)


class SeqQlogger(QuicLogger):
    """aioquic's QuicLogger, each trace written as JSON-SEQ (a header record, then one record
    per event) into <dir>/<odcid>_server.sqlog when its connection ends, and then dropped
    (aioquic's own QuicFileLogger writes one JSON document per connection)."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.dir = directory

    def end_trace(self, trace: QuicLoggerTrace) -> None:
        d = trace.to_dict()
        header = {
            "qlog_version": "0.3",
            "qlog_format": "JSON-SEQ",
            "title": NAME,
            "trace": {"common_fields": d["common_fields"], "vantage_point": d["vantage_point"]},
        }
        final = os.path.join(self.dir, f"{d['common_fields']['ODCID']}_server.sqlog")
        try:
            # Written under a dot name and renamed: the testbed takes files that hold still.
            tmp = os.path.join(self.dir, f".{os.path.basename(final)}.tmp")
            with open(tmp, "w") as f:
                f.write("\x1e" + json.dumps(header) + "\n")
                for event in d["events"]:
                    f.write("\x1e" + json.dumps(event) + "\n")
            os.replace(tmp, final)
        except OSError as exc:
            log(f"qlog: {exc}")
        self._traces.remove(trace)


class Server:
    """What every connection shares: the root, the access log, the session tickets."""

    def __init__(self, root: Path, access_log: IO[str], health: str) -> None:
        self.root = root.resolve()
        self.access_log = access_log
        self.health = health
        self.conn_ids = itertools.count(1)
        self.tickets: dict[bytes, SessionTicket] = {}

    def resolve(self, raw_path: str) -> Path | None:
        """The regular file under the root that `raw_path` names, or None (404)."""
        path = unquote(raw_path.split("?", 1)[0].split("#", 1)[0])
        if not path.startswith("/") or "\x00" in path:
            return None
        try:
            target = (self.root / path.lstrip("/")).resolve()
        except (OSError, RuntimeError):  # a symlink loop
            return None
        if not target.is_relative_to(self.root) or not target.is_file():
            return None
        return target

    def write_log(self, entry: dict[str, Any]) -> None:
        self.access_log.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self.access_log.flush()


class H3Server(QuicConnectionProtocol):
    """One QUIC connection: HTTP/3 requests answered from the root."""

    def __init__(self, *args: Any, server: Server, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server = server
        self.h3: H3Connection | None = None
        self.conn = str(next(server.conn_ids))
        self.alpn = ""
        self.resumed = False
        self.cipher = ""
        self.closed = False
        self.remote = ""
        # Set whenever a datagram arrives (ACKs drain the send buffers) or the connection ends.
        self.progress = asyncio.Event()
        # A 0-RTT request can be answered before the handshake completes; its log line waits
        # for it, to say whether the session was resumed.
        self.handshake_done = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        self.remote = str(addr[0])
        super().datagram_received(data, addr)
        self.progress.set()

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ProtocolNegotiated):
            # Before HandshakeCompleted: a 0-RTT request's stream data comes in between.
            self.alpn = event.alpn_protocol or ""
        elif isinstance(event, HandshakeCompleted):
            self.alpn = event.alpn_protocol or self.alpn
            self.resumed = event.session_resumed
            self.handshake_done.set()
            # The negotiated suite: aioquic's public events do not carry it (as in
            # stacks/aioquic/aioquic_perf.py).
            suite = getattr(getattr(self._quic.tls, "key_schedule", None), "cipher_suite", None)
            self.cipher = f"TLS_{suite.name}" if suite is not None else ""
        elif isinstance(event, ConnectionTerminated):
            self.closed = True
            self.progress.set()
            self.handshake_done.set()
        if self.h3 is None and self.alpn in H3_ALPN:
            self.h3 = StaticTableH3(self._quic)
        if self.h3 is not None:
            for h3_event in self.h3.handle_event(event):
                self.h3_event_received(h3_event)

    def h3_event_received(self, event: H3Event) -> None:
        if isinstance(event, HeadersReceived):
            headers = dict(event.headers)
            start = time.monotonic()
            task = asyncio.ensure_future(self.respond(event.stream_id, headers, start))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        elif isinstance(event, DataReceived):
            pass  # request bodies are not read (GET/HEAD only)

    def unacked(self, stream_id: int) -> int:
        """Bytes queued on the stream and not yet acknowledged. aioquic's public API has no
        send-buffer back-pressure (its example server queues whole bodies), so this reads the
        stream's sender, whose buffer starts at the first unacknowledged byte."""
        stream = self._quic._streams.get(stream_id)
        if stream is None:
            return 0
        sender = stream.sender
        return sender._buffer_stop - sender._buffer_start

    def unsent(self, stream_id: int) -> int:
        """Bytes queued on the stream and never sent yet (the sender's highest offset sent
        trails its buffer's end); 0 once the stream is gone."""
        stream = self._quic._streams.get(stream_id)
        if stream is None:
            return 0
        sender = stream.sender
        return max(0, sender._buffer_stop - sender.highest_offset)

    async def respond(self, stream_id: int, headers: dict[bytes, bytes], start: float) -> None:
        assert self.h3 is not None
        method = headers.get(b":method", b"").decode(errors="replace")
        path = headers.get(b":path", b"").decode(errors="replace")
        status, sent = 500, 0
        try:
            if path.split("?", 1)[0] == self.server.health:
                status = 204
                self.h3.send_headers(stream_id, [(b":status", b"204")], end_stream=True)
                self.transmit()
                return
            if method not in ("GET", "HEAD"):
                status = 405
                self.h3.send_headers(
                    stream_id, [(b":status", b"405"), (b"allow", b"GET, HEAD")], end_stream=True
                )
                self.transmit()
                return
            target = self.server.resolve(path)
            if target is None:
                status = 404
                self.h3.send_headers(
                    stream_id, [(b":status", b"404"), (b"content-length", b"0")], end_stream=True
                )
                self.transmit()
                return
            with target.open("rb") as f:
                total = os.fstat(f.fileno()).st_size
                ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
                span = byte_range(headers.get(b"range", b"").decode(errors="replace"), total)
                if method == "GET" and span == UNSATISFIABLE:
                    status = 416
                    self.h3.send_headers(
                        stream_id,
                        [(b":status", b"416"), (b"content-range", f"bytes */{total}".encode())],
                        end_stream=True,
                    )
                    self.transmit()
                    return
                first, last = span if method == "GET" and span else (0, total - 1)
                size = last - first + 1
                status = 206 if method == "GET" and span else 200
                ranged = f"bytes {first}-{last}/{total}".encode()
                extra = [(b"content-range", ranged)] if status == 206 else []
                self.h3.send_headers(
                    stream_id,
                    [
                        (b":status", str(status).encode()),
                        (b"content-type", ctype.encode()),
                        (b"content-length", str(size).encode()),
                        *extra,
                        (b"date", formatdate(usegmt=True).encode()),
                    ],
                    end_stream=method == "HEAD" or size == 0,
                )
                self.transmit()
                if method == "HEAD" or size == 0:
                    return
                f.seek(first)
                while sent < size and not self.closed:
                    while self.unacked(stream_id) > HIGH_WATER and not self.closed:
                        self.progress.clear()
                        await self.progress.wait()
                    chunk = f.read(min(CHUNK, size - sent))
                    if not chunk:  # the file shrank under us: end the stream short
                        break
                    sent += len(chunk)
                    self.h3.send_data(stream_id, chunk, end_stream=sent >= size)
                    self.transmit()
                    # Let received datagrams be handled between chunks.
                    await asyncio.sleep(0)
                if sent < size and not self.closed:
                    self.h3.send_data(stream_id, b"", end_stream=True)
                    self.transmit()
                # request_time ends when the body's last byte has been sent (as nginx's): queued
                # is not sent, up to HIGH_WATER of it may wait for the congestion window. Not
                # when acknowledged: a client may close at once, and its CONNECTION_CLOSE
                # acknowledges nothing.
                while self.unsent(stream_id) > 0 and not self.closed:
                    self.progress.clear()
                    await self.progress.wait()
        except Exception as exc:  # one request's failure (a reset stream) must not end the server
            log(f"conn {self.conn} stream {stream_id} {path}: {type(exc).__name__}: {exc}")
        finally:
            took = time.monotonic() - start
            await self.handshake_done.wait()
            self.log_request(method, path, status, sent, took)

    def log_request(self, method: str, path: str, status: int, sent: int, seconds: float) -> None:
        self.server.write_log(
            {
                "ts": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "proto": "HTTP/3.0",
                "tls": "TLSv1.3",
                "alpn": self.alpn,
                "cipher": self.cipher,
                "reused": "r" if self.resumed else ".",
                "method": method,
                "path": path.split("?", 1)[0],
                "status": status,
                "bytes": sent,
                "request_time": round(seconds, 6),
                "remote": self.remote,
                "conn": self.conn,
            }
        )


UNSATISFIABLE = (-1, -1)


def byte_range(header: str, total: int) -> tuple[int, int] | None:
    """The one byte range of a Range header (RFC 9110 14.2) as (first, last), inclusive:
    `bytes=A-B`, `bytes=A-`, `bytes=-N`; UNSATISFIABLE when it starts past the end (416);
    None for no header, several ranges, another unit or a malformed one (the whole file,
    200, as RFC 9110 allows)."""
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    start, dash, end = spec.strip().partition("-")
    if not dash or not (start.isdigit() or end.isdigit()) or not all(p.isdigit() for p in (start, end) if p):
        return None
    if not start:  # the last N bytes
        n = int(end)
        return (max(0, total - n), total - 1) if n and total else UNSATISFIABLE
    first = int(start)
    last = min(int(end), total - 1) if end else total - 1
    if end and int(end) < first:
        return None
    return (first, last) if first < total else UNSATISFIABLE


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=NAME, description="HTTP/3 static file server on aioquic")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--root", default="/srv/content")
    p.add_argument("--cert", default="/etc/quicbed/pki/server.pem")
    p.add_argument("--key", default="/etc/quicbed/pki/server.key")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=443)
    p.add_argument("--access-log", default="/var/log/quicbed/access.log")
    p.add_argument("--health", default="/.quicbed-health")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    qlog_dir = os.environ.get("QLOGDIR", "")
    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN)
    config.load_cert_chain(args.cert, args.key)
    if qlog_dir:
        os.makedirs(qlog_dir, exist_ok=True)
        config.quic_logger = SeqQlogger(qlog_dir)
    with open(args.access_log, "a") as access_log:
        server = Server(Path(args.root), access_log, args.health)
        quic_server = await serve(
            args.host,
            args.port,
            configuration=config,
            create_protocol=lambda *a, **kw: H3Server(*a, server=server, **kw),
            session_ticket_fetcher=server.tickets.pop,
            session_ticket_handler=lambda t: server.tickets.__setitem__(t.ticket, t),
        )
        log(
            f"aioquic/{AIOQUIC_VERSION} serving {server.root} on udp {args.host}:{args.port} "
            f"(HTTP/3, congestion control {config.congestion_control_algorithm}"
            f"{', qlog to ' + qlog_dir if qlog_dir else ''})"
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log("stopping")
        quic_server.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.version:
        print(f"{NAME} aioquic/{AIOQUIC_VERSION}")
        return 0
    for f in (args.cert, args.key):
        if not os.access(f, os.R_OK):
            log(f"cannot read {f}")
            return 1
    try:
        asyncio.run(run(args))
    except OSError as exc:  # the port is taken, the log cannot be written
        log(f"{exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
