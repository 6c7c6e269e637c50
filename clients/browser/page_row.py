"""The row of one browser load, from plain dicts: its keys, the row from the page's timing
entries, the protocol proof, the error categories. Standard library only (the unit tests load
it on the host); shared by every browser driver (chromium_driver.py, firefox_driver.py)."""

from __future__ import annotations

import collections
import re
from typing import Any
from urllib.parse import urlsplit

import qoe
from critical_path import NO_NETWORK_SCHEMES, critical_connections

# requested protocol -> (nextHopProtocol every resource must have, CDP securityDetails.protocol)
EXPECTED = {"quic": ("h3", "QUIC"), "tls1.3": ("h2", "TLS 1.3"), "tls1.2": ("h2", "TLS 1.2")}
HTTP_VERSION = {"h3": "3", "h2": "2", "http/1.1": "1.1", "http/1.0": "1.0"}
ERROR_CATEGORIES = ("connect", "tls", "timeout", "protocol", "http", "browser")

ROW_KEYS = (
    "tool",
    "tool_version",
    "library",
    "backend",
    "protocol",
    "tls_version",
    "http_version",
    "cipher",
    "tls_group",
    "local_ip",
    "local_port",
    "remote_ip",
    "remote_port",
    "url",
    "bytes",
    "http_status",
    "t_start",
    "t_connect",
    "t_handshake",
    "t_first_byte",
    "t_done",
    "connection_time_ms",
    "client_cpu_ms",
    "ttfb_ms",
    "download_time_ms",
    "throughput_mbps",
    "resumed",
    "cpu",
    "rep",
    "error",
    "page_load_time_ms",
    "dom_content_loaded_ms",
    "fcp_ms",
    "lcp_ms",
    "resources",
    "resource_protocols",
    "connections",
    "origins",
    "origin_connections",
    "critical_connections",
    "critical_chain",
    "browser_cpu_ms",
    "browser_cpu_pct",
    "browser",
    "host_idle_pct",
    "busiest_thread_pct",
    "busiest_thread",
    "cpu_wait_ms",
    "cpu_throttled_ms",
    "cpu_bound",
    "cpu_by_process",
    "cpu_top_threads",
    "settle_ms",
)
# With --duration: the playback's QoE (qoe.summarize) and its per-second trace instead of the
# page-load columns (the player page's own load is not what a playback row measures).
PLAYER_KEYS = (*qoe.COLUMNS, "cancelled_requests", "trace")
PAGE_ONLY_KEYS = (
    "page_load_time_ms",
    "dom_content_loaded_ms",
    "fcp_ms",
    "lcp_ms",
    "t_done",
    "download_time_ms",
    "critical_connections",
    "critical_chain",
)


class LoadError(Exception):
    """A load that gave no page: the row's error (category: detail)."""


def _ms(value: Any) -> float | None:
    return round(float(value), 3) if isinstance(value, int | float) else None


def _epoch(origin_ms: float | None, offset_ms: Any) -> float | None:
    if origin_ms is None or not isinstance(offset_ms, int | float) or offset_ms <= 0:
        return None
    return round((origin_ms + offset_ms) / 1000.0, 6)


def _tls_version(security_protocol: str) -> str:
    """CDP's securityDetails.protocol ("TLS 1.3", "QUIC") as the perf tools spell it; QUIC
    carries TLS 1.3 (RFC 9001)."""
    if security_protocol == "QUIC":
        return "TLSv1.3"
    m = re.fullmatch(r"TLS (\d\.\d)", security_protocol or "")
    return f"TLSv{m.group(1)}" if m else ""


def is_favicon(url: str) -> bool:
    return urlsplit(url).path == "/favicon.ico"


def drop_favicon(perf: dict[str, Any], net: dict[str, Any]) -> None:
    """Leave out the browser's own favicon fetch (blocked, see Load.run): the page names no
    icon, so it is no resource of the page, and being blocked it never reached the network."""
    perf["resources"] = [e for e in perf.get("resources") or [] if not is_favicon(e.get("name", ""))]
    net["requests"] = [u for u in net.get("requests", []) if not is_favicon(u)]
    net["responses"] = [r for r in net.get("responses", []) if not is_favicon(r.get("url", ""))]
    net["failures"] = [f for f in net.get("failures", []) if not is_favicon(f.get("url", ""))]


def is_cancel(failure: dict[str, Any]) -> bool:
    return bool(failure.get("canceled")) or "ERR_ABORTED" in failure.get("errorText", "")


def drop_cancelled(perf: dict[str, Any], net: dict[str, Any]) -> int:
    """A player cancels requests (dash.js abandons a segment that arrives too slowly, and its
    reset at the end aborts what is in flight): a cancelled request is no protocol error and
    no failure. Its Resource Timing entry has no protocol, whether its response had begun or
    not (an aborted fetch's entry is a network error's), so it is left out of the proof; a
    response that had begun still proves its protocol over DevTools, and every chunk that
    completed is proven as before. Returns how many requests were cancelled."""
    cancelled = {f.get("url") for f in net.get("failures", []) if is_cancel(f)}
    answered = {r.get("url") for r in net.get("responses", [])}
    gone = cancelled - answered  # no response at all: not even a request to prove
    perf["resources"] = [
        e
        for e in perf.get("resources") or []
        if not (e.get("name") in cancelled and not e.get("nextHopProtocol"))
    ]
    net["failures"] = [f for f in net.get("failures", []) if not is_cancel(f)]
    net["requests"] = [u for u in net.get("requests", []) if u not in gone]
    return len(cancelled)


def empty_row(protocol: str, url: str, rep: int) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(ROW_KEYS)
    row.update(
        tool="chromium",
        tool_version="",
        library="",
        backend="chromium",
        protocol=protocol,
        tls_version="",
        http_version="",
        cipher="",
        tls_group="",
        url=url,
        bytes=0,
        http_status=0,
        resumed=False,
        cpu=[],
        rep=rep,
        error="",
        resources=0,
        resource_protocols={},
        connections=0,
        origins=0,
        origin_connections={},
        cpu_bound=False,
        cpu_by_process={},
        cpu_top_threads=[],
    )
    return row


def connection_keys(row: dict[str, Any], response: dict[str, Any], hop: str) -> dict[str, Any]:
    """What DevTools says of the connection a response came over (its securityDetails and
    peer) and the protocol Resource Timing names (`hop`), in the perf tools' keys."""
    security = response.get("securityDetails") or {}
    return {
        "tls_version": _tls_version(security.get("protocol", "")),
        "http_version": HTTP_VERSION.get(hop, hop),
        "cipher": security.get("cipher") or "",
        "tls_group": security.get("keyExchangeGroup") or "",
        "remote_ip": response.get("remoteIPAddress") or row.get("remote_ip"),
        "remote_port": response.get("remotePort") or row.get("remote_port"),
    }


def build_row(row: dict[str, Any], perf: dict[str, Any], net: dict[str, Any]) -> dict[str, Any]:
    """Fill a row from the page's timing entries (`perf`: timeOrigin, navigation, resources,
    fcp, lcp) and the DevTools network record (`net`: document, responses). Times are
    milliseconds from navigation start (performance.timeOrigin), as the browser reports them."""
    nav = perf.get("navigation") or {}
    resources = perf.get("resources") or []
    origin = perf.get("timeOrigin")
    doc = net.get("document") or {}
    hop = nav.get("nextHopProtocol") or doc.get("protocol") or ""
    connect_start, connect_end = nav.get("connectStart"), nav.get("connectEnd")
    secure_start = nav.get("secureConnectionStart")
    critical, chain = critical_connections(perf)
    row.update(
        **connection_keys(row, doc, hop),
        bytes=int(sum(e.get("encodedBodySize") or 0 for e in [nav, *resources])),
        http_status=int(nav.get("responseStatus") or doc.get("status") or 0),
        t_start=round(origin / 1000.0, 6) if origin is not None else None,
        # TCP: connected when TLS starts (secureConnectionStart); QUIC: at the handshake's
        # end, as the perf tools (no transport handshake of its own).
        t_connect=_epoch(origin, secure_start if hop != "h3" and secure_start else connect_end),
        t_handshake=_epoch(origin, connect_end),
        t_first_byte=_epoch(origin, nav.get("responseStart")),
        t_done=_epoch(origin, nav.get("loadEventEnd")),
        connection_time_ms=_ms(connect_end - connect_start)
        if isinstance(connect_start, int | float) and isinstance(connect_end, int | float)
        else None,
        ttfb_ms=_ms(nav.get("responseStart")),
        download_time_ms=_ms(nav.get("responseEnd")),
        page_load_time_ms=_ms(nav.get("loadEventEnd")),
        dom_content_loaded_ms=_ms(nav.get("domContentLoadedEventEnd")),
        fcp_ms=_ms(perf.get("fcp")),
        lcp_ms=_ms(perf.get("lcp")),
        resources=len(resources),
        resource_protocols=dict(
            collections.Counter(e.get("nextHopProtocol") or "" for e in [nav, *resources])
        ),
        connections=len({r["connectionId"] for r in net.get("responses", []) if r.get("connectionId")}),
        origins=len({urlsplit(e.get("name", "")).hostname for e in [nav, *resources] if e.get("name")}),
        origin_connections=origin_connections(net.get("responses", [])),
        critical_connections=critical,
        critical_chain=chain,
    )
    return row


def origin_connections(responses: list[dict[str, Any]]) -> dict[str, int]:
    """Host -> the distinct connections its responses came over (DevTools connectionId). A
    connection coalesced across origins counts once under each origin it served."""
    by_host: dict[str, set[Any]] = collections.defaultdict(set)
    for r in responses:
        host = urlsplit(r.get("url", "")).hostname
        if host and r.get("connectionId"):
            by_host[host].add(r["connectionId"])
    return {host: len(ids) for host, ids in sorted(by_host.items())}


def _short(url: str, page: str) -> str:
    base = page.rsplit("/", 1)[0] + "/"
    return url[len(base) :] if url.startswith(base) else url


def judge(
    protocol: str,
    page_url: str,
    perf: dict[str, Any],
    net: dict[str, Any],
    hosts: frozenset[str] = frozenset(),
) -> str:
    """The protocol proof: "" when the document and every subresource came from the page's
    host or one of `hosts` (a replayed page's other origins, each --resolve'd) at its scheme
    and port, over the requested protocol (Resource Timing's nextHopProtocol and DevTools'
    response protocol and TLS version agree), else a `protocol: ...` error."""
    want_hop, want_security = EXPECTED[protocol]
    page = urlsplit(page_url)
    allowed = {page.hostname, *hosts}
    names = " or ".join(sorted(h for h in allowed if h)) if len(allowed) <= 3 else "the page's origins"
    problems: list[str] = []
    for url in [*net.get("requests", []), *(e.get("name", "") for e in perf.get("resources", []))]:
        if url.startswith(NO_NETWORK_SCHEMES):
            continue
        u = urlsplit(url)
        if (u.scheme, u.port or 443) != (page.scheme, page.port or 443) or u.hostname not in allowed:
            problems.append(f"{url} is not from {names}")
    entries = [
        ("document", perf.get("navigation") or {}),
        *((_short(e.get("name", ""), page_url), e) for e in perf.get("resources", [])),
    ]
    for name, entry in entries:
        hop = entry.get("nextHopProtocol") or "none"
        if hop != want_hop:
            problems.append(f"{name} over {hop}")
    for response in net.get("responses", []):
        name = _short(response.get("url", ""), page_url)
        if response.get("url", "").startswith(NO_NETWORK_SCHEMES):
            continue
        if response.get("protocol") != want_hop:
            problems.append(f"{name} over {response.get('protocol') or 'none'} (DevTools)")
        security = (response.get("securityDetails") or {}).get("protocol")
        if security and security != want_security:
            problems.append(f"{name} over {security}")
    if not problems:
        return ""
    unique = list(dict.fromkeys(problems))
    more = f" (+{len(unique) - 3} more)" if len(unique) > 3 else ""
    return f"protocol: asked {protocol} ({want_hop}): {'; '.join(unique[:3])}{more}"


def http_problems(perf: dict[str, Any], net: dict[str, Any], page_url: str) -> str:
    """An `http: ...` error for a document or subresource answered >= 400 or failed."""
    problems = []
    for e in [perf.get("navigation") or {}, *perf.get("resources", [])]:
        status = e.get("responseStatus")
        if isinstance(status, int) and status >= 400:
            problems.append(f"status {status} for {_short(e.get('name', ''), page_url)}")
    for failure in net.get("failures", []):
        if failure.get("canceled"):
            continue
        problems.append(
            f"{_short(failure.get('url', ''), page_url)} failed: " f"{failure.get('errorText', '')}"
        )
    if not problems:
        return ""
    return f"http: {'; '.join(problems[:3])}" + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")


# Chromium's net errors (net/base/net_error_list.h) -> the row's error category.
_NET_CATEGORIES = (
    (re.compile(r"ERR_(CERT_|SSL_|BAD_SSL|CERTIFICATE|QUIC_CERT|NO_SSL|TLS)"), "tls"),
    (re.compile(r"ERR_(TIMED_OUT|CONNECTION_TIMED_OUT|QUIC_HANDSHAKE_TIMEOUT)"), "timeout"),
    (
        re.compile(
            r"ERR_(CONNECTION_REFUSED|CONNECTION_RESET|CONNECTION_CLOSED|CONNECTION_FAILED|"
            r"CONNECTION_ABORTED|ADDRESS_UNREACHABLE|ADDRESS_INVALID|NAME_NOT_RESOLVED|"
            r"NAME_RESOLUTION_FAILED|INTERNET_DISCONNECTED|NETWORK_CHANGED|NETWORK_ACCESS_DENIED|"
            r"SOCKET_NOT_CONNECTED|QUIC_PROTOCOL_ERROR|QUIC_GOAWAY|EMPTY_RESPONSE)"
        ),
        "connect",
    ),
    (
        re.compile(
            r"ERR_(HTTP|INVALID_HTTP|INVALID_RESPONSE|RESPONSE_HEADERS|CONTENT_|"
            r"INCOMPLETE_CHUNKED|INVALID_CHUNKED|UNEXPECTED_PROXY|FILE_NOT_FOUND|"
            r"INVALID_REDIRECT|TOO_MANY_REDIRECTS)"
        ),
        "http",
    ),
    (re.compile(r"ERR_(ALPN_NEGOTIATION|NPN|DISALLOWED_URL_SCHEME|UNKNOWN_URL_SCHEME)"), "protocol"),
)
_BROWSER_GONE = re.compile(
    r"(page crashed|Target crashed|Target page, context or browser has "
    r"been closed|Browser closed|browser has disconnected|Connection "
    r"closed|has been closed|crashed)",
    re.I,
)


def categorize(message: str) -> str:
    """A failed load's one-line `category: detail` from Playwright's or Chromium's message."""
    text = " ".join(str(message).split())
    first = str(message).strip().splitlines()[0] if str(message).strip() else "unknown error"
    net = re.search(r"net::(ERR_[A-Z0-9_]+)", text)
    if net:
        for pattern, category in _NET_CATEGORIES:
            if pattern.search(net.group(1)):
                return f"{category}: {net.group(1)}"
        return f"connect: {net.group(1)}"
    if re.search(r"Timeout \d+(\.\d+)?ms exceeded|TimeoutError", text):
        return "timeout: " + first.removeprefix("Page.goto: ")
    if _BROWSER_GONE.search(text):
        return "browser: " + first.removeprefix("Page.goto: ")
    return "browser: " + first


def one_line(error: str, limit: int = 400) -> str:
    text = " ".join(error.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def add_cpu(row: dict[str, Any], cpu_ms: float | None) -> None:
    """browser_cpu_ms over the load; its share of one core over page_load_time_ms (shown, not
    the flag: eleven processes on two cores can use 150 % of a core without waiting)."""
    row["browser_cpu_ms"] = _ms(cpu_ms)
    load = row.get("page_load_time_ms")
    if cpu_ms is not None and load:
        row["browser_cpu_pct"] = round(100.0 * cpu_ms / load, 1)
