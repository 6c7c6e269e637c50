"""Access logs: the formats a descriptor's `access_log:` may name, each parsed once here, and
read_access_log, which turns a server's log into normalized entries."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .spec import ACCESS_LOG, HEALTH_PATH, ServerSpec

_TLS_CODES = {769: "TLSv1.0", 770: "TLSv1.1", 771: "TLSv1.2", 772: "TLSv1.3"}


def _tls_name(version: object) -> str | None:
    """Caddy's numeric TLS version as its name; anything else as given, none as None."""
    if isinstance(version, int) and version in _TLS_CODES:
        return _TLS_CODES[version]
    return str(version or "") or None


def _caddy_json(entry: dict) -> dict | None:
    """Caddy's JSON access log (`log { format json }`)."""
    if "request" not in entry:
        return None  # Caddy also logs non-access events if misconfigured; skip them
    req = entry["request"]
    tls = req.get("tls") or {}
    return {
        "server": "caddy",
        "ts": entry.get("ts"),
        "proto": req.get("proto"),
        "tls": _tls_name(tls.get("version")),
        "alpn": tls.get("proto"),
        "cipher": tls.get("cipher_suite"),
        "resumed": tls.get("resumed"),
        "method": req.get("method"),
        "path": req.get("uri", "").split("?", 1)[0],
        "status": entry.get("status"),
        "bytes": entry.get("size"),
        "duration_ms": float(entry.get("duration", 0)) * 1000,
        "remote": req.get("remote_ip"),
        # the client's address and port: one per TCP connection, one per QUIC connection
        "connection": (f"{req.get('remote_ip')}:{req['remote_port']}" if req.get("remote_port") else None),
    }


def _quicbed_json(entry: dict) -> dict | None:
    """The flat JSON line of nginx's `log_format quicbed` (servers/nginx/nginx.conf); any server
    that writes these fields can use it."""
    if "proto" not in entry or "request_time" not in entry:
        return None
    return {
        "server": "nginx",
        "ts": entry.get("ts"),
        "proto": entry["proto"],
        "tls": entry.get("tls") or None,
        "alpn": entry.get("alpn") or None,
        "cipher": entry.get("cipher") or None,
        "resumed": entry.get("reused") == "r",
        "method": entry.get("method"),
        "path": entry.get("path"),
        "status": entry.get("status"),
        "bytes": entry.get("bytes"),
        "duration_ms": float(entry["request_time"]) * 1000,
        "remote": entry.get("remote"),
        # nginx's $connection serial: one per TCP connection, but one per stream in HTTP/3
        # (nginx gives every QUIC stream a connection object), so unknown there
        "connection": (str(entry["conn"]) if entry.get("conn") and entry["proto"] != "HTTP/3.0" else None),
    }


def _replay_json(entry: dict) -> dict | None:
    """stacks/quicgo's quicgo_replay: the quicbed-json fields, plus the origin asked for
    (`host`), the HAR entry that answered (`entry`, -1 for none) and the think time kept
    (`wait_ms`); its `conn` is one serial per connection over HTTP/2 and HTTP/3 alike."""
    base = _quicbed_json(entry)
    if base is None or "entry" not in entry:
        return None
    return {
        **base,
        "server": "quicgo_replay",
        "host": entry.get("host"),
        "entry": entry["entry"],
        "wait_ms": entry.get("wait_ms"),
        "connection": str(entry["conn"]) if entry.get("conn") else None,
    }


def _haproxy_json(entry: dict) -> dict | None:
    """The JSON line of HAProxy's log-format (servers/haproxy/haproxy.cfg): bytes is the
    response's Content-Length ("" when it had none), total_ms HAProxy's %Ta."""
    if "proto" not in entry or "total_ms" not in entry:
        return None
    length = str(entry.get("bytes", ""))
    return {
        "server": "haproxy",
        "ts": entry.get("ts"),
        "proto": entry["proto"],
        "tls": entry.get("tls") or None,
        "alpn": entry.get("alpn") or None,
        "cipher": entry.get("cipher") or None,
        "resumed": entry.get("resumed") in (1, True),
        "method": entry.get("method"),
        "path": entry.get("path"),
        "status": entry.get("status"),
        "bytes": int(length) if length.isdigit() else None,
        "duration_ms": float(entry["total_ms"]),
        "remote": entry.get("remote"),
        # the client's address and port (%ci:%cp): one per TCP connection, one per QUIC
        # connection
        "connection": (f"{entry.get('remote')}:{entry['port']}" if entry.get("port") else None),
    }


# Format name -> parser of one decoded JSON line (None: not an entry of this format). Tried in
# this order when no spec is given.
FORMATS: dict[str, Callable[[dict], dict | None]] = {
    "caddy-json": _caddy_json,
    "replay-json": _replay_json,  # before quicbed-json, whose fields it has
    "quicbed-json": _quicbed_json,
    "haproxy-json": _haproxy_json,
}


def _normalize(entry: dict, formats: list[Callable[[dict], dict | None]]) -> dict | None:
    for parse in formats:
        normalized = parse(entry)
        if normalized is not None:
            return normalized
    return None


def read_access_log(log_dir: Path, spec: ServerSpec | None = None) -> list[dict]:
    """The server's access log, normalized: proto ('HTTP/2.0'/'HTTP/3.0'), tls ('TLSv1.2'/
    'TLSv1.3'), path, bytes (body), status, duration_ms, connection (the same string for
    requests on one connection; None where the log cannot tell). Health probes are left out.

    With `spec` (get_server(name)), only its descriptor's format is read and its health path
    left out too; without, every known format."""
    return access_log_since(log_dir, 0, spec)[0]


def access_log_since(log_dir: Path, offset: int, spec: ServerSpec | None = None) -> tuple[list[dict], int]:
    """The entries written after byte `offset` (read_access_log's), and the offset after the
    last whole line: a trial's requests, given the offset before it."""
    formats = [FORMATS[spec.access_log]] if spec else list(FORMATS.values())
    # A tuple: `in` compares with ==, so an odd path value (a list) cannot raise.
    health = (HEALTH_PATH, spec.health.path) if spec else (HEALTH_PATH,)
    path = Path(log_dir) / ACCESS_LOG
    if not path.exists():
        return [], offset
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    whole = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
    entries = []
    for line in whole.decode(errors="replace").splitlines():
        try:
            entry = _normalize(json.loads(line), formats)
        except (json.JSONDecodeError, TypeError, ValueError):
            continue  # a line cut by a crash; the rest is still good
        if entry and entry["path"] not in health:
            entries.append(entry)
    return entries, offset + len(whole)
