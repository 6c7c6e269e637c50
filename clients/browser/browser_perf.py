#!/opt/browser/bin/python3
"""browser_perf: page loads in headless Chromium, one fresh browser per load, as JSON rows.

    browser_perf --url https://server.quicbed/web/pages/news/index.html \\
                 --resolve server.quicbed:443:10.0.1.2 --cacert /etc/quicbed/pki/ca.pem \\
                 -n 1 --cpu --timeout 30 --protocol quic|tls1.3|tls1.2

Each load starts a new Chromium process (Debian's, driven by Playwright for Python) with a new
profile directory and a new HOME under /tmp/quicbed-browser-*, whose NSS database trusts the
run's CA and nothing else of the run; both are deleted on every exit path. One JSON object per
load on stdout (keys: clients/browser/README.md); exit 0 when every row has error == "", 1
otherwise, 2 on a usage error, 3 for a valid request this client cannot do.

The pure parts (arguments, the row from the page's timing entries, the protocol proof, the
error categories) take plain dicts and import nothing outside the standard library, so the
unit tests load this file on the host, where Playwright is not installed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn
from urllib.parse import urlencode, urlsplit

# qoe.py lives beside this file (/opt/browser/src in the image, where the command is a link).
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import qoe

VERSION = "1.1"
# The binaries themselves, not Debian's /usr/bin wrappers (which add Google API keys, remote
# extensions and GPU rasterization from /etc/chromium.d). Both are built from one Chromium
# source at one version (they share chromium-common): the same network stack. The headless
# shell is the content layer without the full browser's UI and profile services.
BROWSERS = {
    "headless-shell": "/usr/lib/chromium/chromium-headless-shell",
    "chromium-full": "/usr/lib/chromium/chromium",
}
# The full browser stays the default: the headless shell cannot pin TLS 1.2 (below), and a
# comparison across protocols must load every protocol in the same browser.
DEFAULT_BROWSER = "chromium-full"
# The protocols each browser can pin. The headless shell's network context never reads
# --ssl-version-max (a //chrome switch, components/ssl_config): asked for TLS 1.2 it
# negotiated TLS 1.3 in 20 of 20 loads (bench/browser_bench.py), which judge() refused.
# --ssl-version-min=tls1.3 is as unread, but TLS 1.3 is what it offers anyway, and judge()
# proves the version of every resource in every load.
CANNOT_PIN = {"headless-shell": ("tls1.2",)}
PACKAGES = {"headless-shell": "chromium-headless-shell", "chromium-full": "chromium"}  # Debian's
# The headless shell's process model: no zygotes (two processes fewer to fork; the sandbox is
# off under Playwright as root anyway), the compositor's GPU process (software, --disable-gpu)
# inside the browser process, and at most one renderer (a bound only: these same-origin pages
# start one anyway). Measured: three processes instead of six, about the same CPU.
# Background work is already off: Playwright's switches and ours below stop timers,
# backgrounding, component updates, field trials and background networking. chromium-full
# keeps exactly the switches it always had (the "before" of bench/browser_bench.py).
LEAN_SWITCHES = ("--no-zygote", "--in-process-gpu", "--renderer-process-limit=1")
TMP_PREFIX = "quicbed-browser-"
MARKER = "QUICBED_BROWSER_RUN"  # in the environment of every process of one load's browser
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 1, 2, 3
# A load is CPU-bound when a CPU limited it (README "CPU-bound"): the CPUs the browser may run
# on had (almost) no idle time over the load, or the container's CPU quota throttled it, or one
# of the browser's threads ran for (almost) the whole load (it was the critical path).
HOST_IDLE_MIN_PCT = 10.0  # of the allowed CPUs' time over the load
THREAD_BUSY_MAX_PCT = 90.0  # of the load's wall time, one thread
THROTTLED_MAX_PCT = 10.0  # of the load's wall time throttled by the cgroup's quota
CPU_CGROUP_STAT = ("/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpu/cpu.stat")  # cgroup v2, v1
CPU_SAMPLE_S = 0.5
HARD_GRACE_S = 10.0  # beyond --timeout: launch + collection + close, then the watchdog kills
# requested protocol -> (nextHopProtocol every resource must have, CDP securityDetails.protocol)
EXPECTED = {"quic": ("h3", "QUIC"), "tls1.3": ("h2", "TLS 1.3"), "tls1.2": ("h2", "TLS 1.2")}
HTTP_VERSION = {"h3": "3", "h2": "2", "http/1.1": "1.1", "http/1.0": "1.0"}
NO_NETWORK_SCHEMES = ("data:", "blob:", "about:", "chrome:", "chrome-error:", "javascript:")
FAVICON = "*/favicon.ico"
# The fresh profile's preferences: no speculative preconnect (Chromium's loading predictor
# otherwise opens a second TCP+TLS connection to the page's origin at navigation start, which
# it closes unused once the HTTP/2 session exists).
PROFILE_PREFERENCES = {"net": {"network_prediction_options": 2}}
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
    "browser_cpu_ms",
    "browser_cpu_pct",
    "browser",
    "host_idle_pct",
    "busiest_thread_pct",
    "busiest_thread",
    "cpu_wait_ms",
    "cpu_throttled_ms",
    "cpu_bound",
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
)
PLAYER_PAGE = "/player/index.html"  # served by the testbed's servers (servers/player.py)
_QOE_DONE_JS = "window.quicbedQoE !== undefined && window.quicbedQoE.done"


# ------------------------------------------------------------------------------ arguments


class UsageError(Exception):
    """Exit 2: a flag or value this tool does not take."""


class Unsupported(Exception):
    """Exit 3: a valid request this client cannot do."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print the whole usage
        raise UsageError(message)


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
        return value

    return parse


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not JSON: {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


@dataclass(frozen=True)
class Resolve:
    host: str
    port: int
    address: str


def _resolve(text: str) -> Resolve:
    host, sep, rest = text.partition(":")
    port, sep2, address = rest.partition(":")
    if not (host and sep and sep2 and address and port.isdigit() and 0 < int(port) < 65536):
        raise argparse.ArgumentTypeError(f"expected NAME:PORT:ADDRESS, got {text!r}")
    return Resolve(host.lower(), int(port), address.strip("[]"))


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The contract's arguments (clients/tools.py). UsageError for a bad flag or value,
    Unsupported for a valid request this client cannot do."""
    p = _Parser(
        prog="browser_perf",
        add_help=True,
        description="Page loads in a fresh headless Chromium; one JSON row per load.",
    )
    p.add_argument("--url", required=True)
    p.add_argument(
        "--resolve",
        type=_resolve,
        action="append",
        default=[],
        metavar="NAME:PORT:ADDRESS",
        help="the only name resolution (no DNS)",
    )
    p.add_argument("--cacert", required=True, help="the CA the browser trusts (PEM)")
    p.add_argument(
        "-n",
        "--repetitions",
        type=_positive(int),
        default=1,
        help="loads, each in a new browser process with a new profile",
    )
    p.add_argument("--pause", type=_non_negative_int, default=0, metavar="MS", help="pause between loads")
    p.add_argument("--cpu", action="store_true", help="accepted for the contract: CPU is always measured")
    p.add_argument(
        "--timeout",
        type=_positive(float),
        default=30.0,
        metavar="S",
        help="page load timeout (navigation start to the load event)",
    )
    p.add_argument("--protocol", choices=tuple(EXPECTED), default="quic")
    p.add_argument(
        "--browser",
        choices=tuple(BROWSERS),
        default=DEFAULT_BROWSER,
        help="the full Chromium (default) or Debian's chromium-headless-shell (lean: a fifth of "
        "the CPU; QUIC and TLS 1.3 only)",
    )
    p.add_argument("--keylog", metavar="FILE", help="TLS key log (SSLKEYLOGFILE) for captures")
    p.add_argument(
        "--duration",
        type=_positive(float),
        metavar="S",
        help="play the DASH manifest at --url for S seconds of media in the "
        "testbed's dash.js page (" + PLAYER_PAGE + ") instead of loading a page",
    )
    p.add_argument(
        "--player-settings",
        type=_json_object,
        metavar="JSON",
        help="with --duration: dash.js settings (its updateSettings object) merged "
        "into its defaults; the row's player_settings shows those in force",
    )
    p.add_argument("--verbose", action="store_true", help="the browser's arguments on stderr")
    p.add_argument("--version", action="store_true", help="print versions and exit")
    if "--version" in argv:
        return argparse.Namespace(version=True)
    args = p.parse_args(argv)
    url = urlsplit(args.url)
    if url.scheme not in ("https", "http") or not url.hostname:
        raise UsageError(f"--url: not an http(s) URL: {args.url!r}")
    if url.scheme != "https":
        raise Unsupported("only https:// URLs: the load must go over QUIC or TLS")
    if args.duration is not None and args.duration >= args.timeout:
        raise UsageError(f"--timeout {args.timeout:g} must exceed --duration {args.duration:g}")
    if args.player_settings is not None and args.duration is None:
        raise UsageError("--player-settings: only with --duration (a playback)")
    if args.protocol in CANNOT_PIN.get(args.browser, ()):
        raise Unsupported(
            f"--browser {args.browser} cannot pin {args.protocol}: its network context ignores "
            "--ssl-version-max (use --browser chromium-full)"
        )
    if not os.path.isfile(args.cacert):
        raise UsageError(f"--cacert: no such file: {args.cacert}")
    port = url.port or 443
    if not any(r.host == url.hostname.lower() and r.port == port for r in args.resolve):
        raise Unsupported(f"no --resolve for {url.hostname}:{port}: the browser never uses DNS")
    return args


# ------------------------------------------------------------------------------ browser flags


def chromium_args(args: argparse.Namespace) -> list[str]:
    """Chromium's switches: the protocol, name resolution from --resolve only, and nothing that
    reaches outside the testbed. (Playwright adds --headless, --no-sandbox, --user-data-dir,
    --remote-debugging-pipe and its own background-networking switches.)"""
    url = urlsplit(args.url)
    port = url.port or 443
    rules = []
    for r in args.resolve:
        if r.port == port:
            address = f"[{r.address}]" if ":" in r.address else r.address
            rules.append(f"MAP {r.host} {address}")
    rules.append("MAP * ~NOTFOUND")  # any other name: not found, never a DNS query
    flags = [
        "--disable-gpu",
        f"--host-resolver-rules={', '.join(rules)}",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-domain-reliability",
        "--disable-breakpad",
        "--no-first-run",
        "--no-default-browser-check",
        "--no-pings",
        "--metrics-recording-only",
    ]
    if args.protocol == "quic":
        flags += ["--enable-quic", f"--origin-to-force-quic-on={url.hostname}:{port}"]
    else:
        flags.append("--disable-quic")
        flags.append("--ssl-version-min=tls1.3" if args.protocol == "tls1.3" else "--ssl-version-max=tls1.2")
    if args.duration is not None:  # the player starts by itself (muted, as a page may)
        flags.append("--autoplay-policy=no-user-gesture-required")
    if getattr(args, "browser", DEFAULT_BROWSER) == "headless-shell":
        flags += LEAN_SWITCHES
    return flags


# ------------------------------------------------------------------------------ the row


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


def drop_cancelled(perf: dict[str, Any], net: dict[str, Any]) -> int:
    """A player cancels requests (dash.js abandons a segment that arrives too slowly, and its
    reset at the end aborts what is in flight): such a request got no response, so no protocol
    to prove, and no error. Left out of the proof; returns how many there were."""
    cancelled = {
        f.get("url")
        for f in net.get("failures", [])
        if f.get("canceled") or "ERR_ABORTED" in f.get("errorText", "")
    }
    answered = {r.get("url") for r in net.get("responses", [])}
    gone = cancelled - answered
    perf["resources"] = [
        e for e in perf.get("resources") or [] if not (e.get("name") in gone and not e.get("nextHopProtocol"))
    ]
    net["failures"] = [f for f in net.get("failures", []) if f.get("url") not in gone]
    net["requests"] = [u for u in net.get("requests", []) if u not in gone]
    return len(gone)


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
        cpu_bound=False,
    )
    return row


def build_row(row: dict[str, Any], perf: dict[str, Any], net: dict[str, Any]) -> dict[str, Any]:
    """Fill a row from the page's timing entries (`perf`: timeOrigin, navigation, resources,
    fcp, lcp) and the DevTools network record (`net`: document, responses). Times are
    milliseconds from navigation start (performance.timeOrigin), as the browser reports them."""
    nav = perf.get("navigation") or {}
    resources = perf.get("resources") or []
    origin = perf.get("timeOrigin")
    doc = net.get("document") or {}
    security = doc.get("securityDetails") or {}
    hop = nav.get("nextHopProtocol") or doc.get("protocol") or ""
    connect_start, connect_end = nav.get("connectStart"), nav.get("connectEnd")
    secure_start = nav.get("secureConnectionStart")
    row.update(
        tls_version=_tls_version(security.get("protocol", "")),
        http_version=HTTP_VERSION.get(hop, hop),
        cipher=security.get("cipher") or "",
        tls_group=security.get("keyExchangeGroup") or "",
        remote_ip=doc.get("remoteIPAddress") or row.get("remote_ip"),
        remote_port=doc.get("remotePort") or row.get("remote_port"),
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
    )
    return row


def add_cpu(row: dict[str, Any], cpu_ms: float | None) -> None:
    """browser_cpu_ms over the load; its share of one core over page_load_time_ms (shown, not
    the flag: eleven processes on two cores can use 150 % of a core without waiting)."""
    row["browser_cpu_ms"] = _ms(cpu_ms)
    load = row.get("page_load_time_ms")
    if cpu_ms is not None and load:
        row["browser_cpu_pct"] = round(100.0 * cpu_ms / load, 1)


@dataclass(frozen=True)
class CpuSnapshot:
    """What limits a load, read at its start and its end: the allowed CPUs' jiffies (all,
    idle), every browser thread's CPU and run-queue wait (ns), the cgroup's throttled time."""

    wall_s: float
    cpu_jiffies: tuple[int, int]
    threads: dict[tuple[int, int], tuple[str, int, int]]  # (pid, tid) -> (name, run ns, wait ns)
    throttled_ns: int | None


def cpu_limits(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, Any]:
    """The row's CPU columns from two snapshots, and cpu_bound: the allowed CPUs idle under
    HOST_IDLE_MIN_PCT of their time, or one browser thread busy over THREAD_BUSY_MAX_PCT of
    the wall time, or the quota throttling over THROTTLED_MAX_PCT of it."""
    wall_ms = max(1e-3, (after.wall_s - before.wall_s) * 1e3)
    d_all = after.cpu_jiffies[0] - before.cpu_jiffies[0]
    d_idle = after.cpu_jiffies[1] - before.cpu_jiffies[1]
    idle_pct = round(100.0 * d_idle / d_all, 1) if d_all > 0 else None
    busiest, busiest_ns, wait_ns = "", 0, 0
    for key, (name, run_ns, wait) in after.threads.items():
        run0, wait0 = before.threads.get(key, (name, 0, 0))[1:]  # a thread born in the load: all
        wait_ns += max(0, wait - wait0)
        if run_ns - run0 > busiest_ns:
            busiest, busiest_ns = name, run_ns - run0
    throttled_ms = None
    if after.throttled_ns is not None and before.throttled_ns is not None:
        throttled_ms = round((after.throttled_ns - before.throttled_ns) / 1e6, 1)
    busiest_pct = round(100.0 * busiest_ns / 1e6 / wall_ms, 1)
    bound = (
        (idle_pct is not None and idle_pct < HOST_IDLE_MIN_PCT)
        or busiest_pct >= THREAD_BUSY_MAX_PCT
        or (throttled_ms is not None and 100.0 * throttled_ms / wall_ms >= THROTTLED_MAX_PCT)
    )
    return {
        "host_idle_pct": idle_pct,
        "busiest_thread_pct": busiest_pct,
        "busiest_thread": busiest,
        "cpu_wait_ms": round(wait_ns / 1e6, 1),
        "cpu_throttled_ms": throttled_ms,
        "cpu_bound": bool(bound),
    }


def _short(url: str, page: str) -> str:
    base = page.rsplit("/", 1)[0] + "/"
    return url[len(base) :] if url.startswith(base) else url


def judge(protocol: str, page_url: str, perf: dict[str, Any], net: dict[str, Any]) -> str:
    """The protocol proof: "" when the document and every subresource came from the page's
    host over the requested protocol (Resource Timing's nextHopProtocol and DevTools' response
    protocol and TLS version agree), else a `protocol: ...` error."""
    want_hop, want_security = EXPECTED[protocol]
    page = urlsplit(page_url)
    origin = (page.scheme, page.hostname, page.port or 443)
    problems: list[str] = []
    for url in [*net.get("requests", []), *(e.get("name", "") for e in perf.get("resources", []))]:
        if url.startswith(NO_NETWORK_SCHEMES):
            continue
        u = urlsplit(url)
        if (u.scheme, u.hostname, u.port or 443) != origin:
            problems.append(f"{url} is not from {page.hostname}")
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


# ------------------------------------------------------------------------------ /proc

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def marked_pids(token: str) -> list[int]:
    """Every process of this load's browser: those whose environment carries the load's marker
    (the browser, its crashpad handlers even when reparented to init) or whose command line
    names the load's directory (Chromium starts its zygotes, utilities and renderers with an
    environment of its own, but with --user-data-dir), and all their descendants."""
    env_needle = f"{MARKER}={token}\0".encode()
    cmd_needle = f"/tmp/{token}".encode()
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        fields = _stat_fields(pid)
        if not fields or len(fields) < 2:
            continue
        parents[pid] = int(fields[1])
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if cmd_needle in f.read():
                    found.add(pid)
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if env_needle in f.read() + b"\0":
                    found.add(pid)
        except OSError:
            continue
    grown = True
    while grown:
        extra = {pid for pid, ppid in parents.items() if ppid in found and pid not in found}
        found |= extra
        grown = bool(extra)
    found.discard(os.getpid())
    return sorted(found)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def process_cpu_s(pids: list[int]) -> float:
    """utime + stime of these processes and of the children they reaped, in seconds."""
    ticks = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields and fields[0] != "Z":
            ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return ticks * _TICK_S


def allowed_cpu_jiffies(text: str, cpus: set[int]) -> tuple[int, int]:
    """(all, idle + iowait) jiffies of these CPUs from /proc/stat's text (a container sees
    the host's: the CPUs it may run on are the ones its processes wait for)."""
    total = idle = 0
    for line in text.splitlines():
        name, *values = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        numbers = [int(x) for x in values[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(numbers)
        idle += numbers[3] + numbers[4]
    return total, idle


def _thread_times(pids: list[int]) -> dict[tuple[int, int], tuple[str, int, int]]:
    """Every thread of these processes: (name, ns on a CPU, ns waiting in a run queue), from
    /proc/<pid>/task/<tid>/schedstat (nanoseconds, unlike stat's 10 ms ticks)."""
    out: dict[tuple[int, int], tuple[str, int, int]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, ValueError):
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        run_ns, wait_ns = (int(x) for x in f.read().split()[:2])
                    with open(f"/proc/{pid}/task/{tid}/comm") as f:
                        name = f.read().strip()
                    out[(pid, int(tid))] = (name, run_ns, wait_ns)
    return out


def _throttled_ns() -> int | None:
    """The container's CPU-quota throttled time (cgroup v2 throttled_usec, v1 throttled_time)."""
    for path in CPU_CGROUP_STAT:
        with contextlib.suppress(OSError), open(path) as f:
            fields = dict(line.split() for line in f if len(line.split()) == 2)
            if "throttled_usec" in fields:
                return int(fields["throttled_usec"]) * 1000
            if "throttled_time" in fields:
                return int(fields["throttled_time"])
    return None


def cpu_snapshot(pids: list[int]) -> CpuSnapshot:
    with open("/proc/stat") as f:
        jiffies = allowed_cpu_jiffies(f.read(), os.sched_getaffinity(0))
    return CpuSnapshot(time.monotonic(), jiffies, _thread_times(pids), _throttled_ns())


def _system_jiffies() -> tuple[int, int]:
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return sum(values), values[3] + (values[4] if len(values) > 4 else 0)


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and len(fields) > 1 and fields[1] == str(pid):
                kids.append(int(entry))
    return kids


def _socket_inodes(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    return inodes


def _hex_endpoint(text: str) -> tuple[str, int]:
    address, port = text.split(":")
    if len(address) == 8:
        ip = ".".join(str(b) for b in bytes.fromhex(address)[::-1])
    else:  # IPv6: four little-endian 32-bit words
        raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, 32, 8))
        import ipaddress

        ip = str(ipaddress.IPv6Address(raw))
        ip = ip.removeprefix("::ffff:")
    return ip, int(port, 16)


def local_endpoints(pids: list[int], remote_ip: str, remote_port: int) -> list[tuple[str, int]]:
    """The local (ip, port) of the browser's sockets connected to the server (TCP, or the
    connected UDP socket of a QUIC connection), from /proc/net."""
    inodes = _socket_inodes(pids)
    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        with contextlib.suppress(OSError), open(f"/proc/net/{table}") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if len(cols) < 10 or cols[9] not in inodes:
                    continue
                with contextlib.suppress(ValueError):
                    remote = _hex_endpoint(cols[2])
                    if remote == (remote_ip, remote_port):
                        found.append(_hex_endpoint(cols[1]))
    return sorted(set(found))


def kill_marked(token: str, rounds: int = 20) -> None:
    """SIGKILL every process of this load's browser until none is left (a process forked while
    killing is found in the next round)."""
    for _ in range(rounds):
        pids = [p for p in marked_pids(token) if p != os.getpid()]
        live = [p for p in pids if (_stat_fields(p) or ["Z"])[0] != "Z"]
        if not live:
            return
        for pid in live:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


# ------------------------------------------------------------------------------ one load

_PAGE_TIMINGS_JS = """
async (wait) => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const nav = performance.getEntriesByType('navigation')[0];
  for (let i = 0; wait && i < 200 && nav && !(nav.loadEventEnd > 0); i++) await sleep(5);
  const fcpOf = () => {
    const e = performance.getEntriesByName('first-contentful-paint')[0];
    return e ? e.startTime : null;
  };
  let lcp = null;
  const po = new PerformanceObserver(list => {
    const es = list.getEntries();
    if (es.length) lcp = es[es.length - 1].startTime;
  });
  po.observe({type: 'largest-contentful-paint', buffered: true});
  // Buffered entries arrive in a later task; paint may trail the load event by a frame.
  const frame = () => new Promise(r => {
    requestAnimationFrame(() => r());
    setTimeout(r, 100);
  });
  for (let i = 0; wait && i < 20 && (fcpOf() === null || lcp === null); i++) await frame();
  await frame();
  po.disconnect();
  const keep = e => e.toJSON();
  return {timeOrigin: performance.timeOrigin, navigation: nav ? keep(nav) : null,
          resources: performance.getEntriesByType('resource').map(keep),
          fcp: fcpOf(), lcp: lcp, userAgent: navigator.userAgent};
}
"""


@dataclass
class Load:
    """One page load in one fresh browser: its temp directory, its processes, its row."""

    args: argparse.Namespace
    rep: int
    token: str = ""
    tmp: str = ""
    row: dict[str, Any] = field(default_factory=dict)
    net: dict[str, Any] = field(
        default_factory=lambda: {
            "document": None,
            "responses": [],
            "requests": [],
            "failures": [],
            "pending": {},
        }
    )
    watchdog_fired: bool = False
    cpu_samples: list[dict[str, Any]] = field(default_factory=list)
    _sampling: threading.Event = field(default_factory=threading.Event)

    def prepare(self) -> dict[str, str]:
        """The fresh HOME (an NSS database trusting the CA), profile and TMPDIR; the
        browser's environment."""
        self.tmp = tempfile.mkdtemp(prefix=TMP_PREFIX, dir="/tmp")
        self.token = os.path.basename(self.tmp)
        home = os.path.join(self.tmp, "home")
        nssdb = os.path.join(home, ".pki", "nssdb")
        tmpdir = os.path.join(self.tmp, "tmp")
        for d in (nssdb, tmpdir, os.path.join(self.tmp, "profile", "Default")):
            os.makedirs(d, mode=0o700)
        with open(os.path.join(self.tmp, "profile", "Default", "Preferences"), "w") as f:
            json.dump(PROFILE_PREFERENCES, f)
        for argv in (
            ["certutil", "-d", f"sql:{nssdb}", "-N", "--empty-password"],
            ["certutil", "-d", f"sql:{nssdb}", "-A", "-t", "C,,", "-n", "quicbed", "-i", self.args.cacert],
        ):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            if proc.returncode != 0:
                raise LoadError(
                    f"tls: certutil could not trust {self.args.cacert}: "
                    f"{(proc.stderr or proc.stdout).strip()}"
                )
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": tmpdir,
            "XDG_CONFIG_HOME": os.path.join(home, ".config"),
            "XDG_CACHE_HOME": os.path.join(home, ".cache"),
            "LANG": "C.UTF-8",
            MARKER: self.token,
        }
        if self.args.keylog:
            env["SSLKEYLOGFILE"] = os.path.abspath(self.args.keylog)
        return env

    # -- DevTools network record
    def on_request(self, event: dict[str, Any]) -> None:
        url = event.get("request", {}).get("url", "")
        self.net["requests"].append(url)
        self.net["pending"][event.get("requestId")] = url

    def on_response(self, event: dict[str, Any]) -> None:
        response = dict(event.get("response", {}))
        response.pop("headers", None)
        response.pop("requestHeaders", None)
        self.net["responses"].append(response)
        if event.get("type") == "Document" and self.net["document"] is None:
            self.net["document"] = response

    def on_finished(self, event: dict[str, Any]) -> None:
        self.net["pending"].pop(event.get("requestId"), None)

    def on_failed(self, event: dict[str, Any]) -> None:
        url = self.net["pending"].pop(event.get("requestId"), "")
        self.net["failures"].append(
            {"url": url, "errorText": event.get("errorText", ""), "canceled": event.get("canceled", False)}
        )

    # -- CPU
    def sample_cpu(self) -> None:
        ncpu = os.cpu_count() or 1
        start = time.monotonic()
        last_proc = process_cpu_s(marked_pids(self.token))
        last_all, last_idle = _system_jiffies()
        while not self._sampling.wait(CPU_SAMPLE_S):
            proc = process_cpu_s(marked_pids(self.token))
            total, idle = _system_jiffies()
            d_all = max(1, total - last_all)
            self.cpu_samples.append(
                {
                    "t": round(time.monotonic() - start, 3),
                    "proc_pct": round(100.0 * (proc - last_proc) / (d_all * _TICK_S / ncpu), 1),
                    "sys_busy_pct": round(100.0 * (d_all - (idle - last_idle)) / d_all, 1),
                }
            )
            last_proc, last_all, last_idle = proc, total, idle

    def run(self, versions: dict[str, str]) -> dict[str, Any]:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright

        args = self.args
        env = self.prepare()
        # Playwright's driver (node) keeps its own temp files under TMPDIR: ours, per load.
        os.environ["TMPDIR"] = env["TMPDIR"]
        launch_args = chromium_args(args)
        if args.verbose:
            print(f"browser_perf: {BROWSERS[args.browser]} {' '.join(launch_args)}", file=sys.stderr)
        sampler = threading.Thread(target=self.sample_cpu, daemon=True)
        with sync_playwright() as pw:
            try:
                context = pw.chromium.launch_persistent_context(
                    os.path.join(self.tmp, "profile"),
                    executable_path=BROWSERS[args.browser],
                    headless=True,
                    args=launch_args,
                    env=env,
                    timeout=min(30.0, args.timeout + 5) * 1000,
                    handle_sigint=False,
                    handle_sigterm=False,
                    handle_sighup=False,
                    service_workers="block",
                    accept_downloads=False,
                )
            except PlaywrightError as e:
                raise LoadError(f"browser: launch failed: {one_line(str(e), 200)}") from None
            page = None
            try:
                page = context.pages[0] if context.pages else context.new_page()
                cdp = context.new_cdp_session(page)
                product = cdp.send("Browser.getVersion").get("product", "")
                version = product.split("/", 1)[-1] if "/" in product else versions["chromium"]
                self.row.update(
                    tool_version=version,
                    library=f"{PACKAGES[args.browser]} {version}; playwright {versions['playwright']}",
                )
                cdp.on("Network.requestWillBeSent", self.on_request)
                cdp.on("Network.responseReceived", self.on_response)
                cdp.on("Network.loadingFinished", self.on_finished)
                cdp.on("Network.loadingFailed", self.on_failed)
                cdp.send("Network.enable")
                # The favicon is the browser's own fetch, not the page's: after the load event,
                # on a connection of its own (another network partition). Never sent.
                cdp.send("Network.setBlockedURLs", {"urls": [FAVICON]})
                pids = marked_pids(self.token)
                cpu0, snap0 = process_cpu_s(pids), cpu_snapshot(pids)
                sampler.start()
                response = None
                started = time.monotonic()
                try:
                    response = page.goto(self.page_url(), wait_until="load", timeout=args.timeout * 1000)
                    if args.duration is not None:  # the playback, within the same deadline
                        left = args.timeout - (time.monotonic() - started)
                        page.wait_for_function(_QOE_DONE_JS, timeout=max(left, 0.1) * 1000, polling=500)
                finally:
                    pids = marked_pids(self.token)
                    cpu1, snap1 = process_cpu_s(pids), cpu_snapshot(pids)
                    self._sampling.set()
                    self.row["cpu"] = self.cpu_samples
                doc = self.net["document"] or {}
                if doc.get("remoteIPAddress"):
                    ends = local_endpoints(
                        marked_pids(self.token), doc["remoteIPAddress"], int(doc.get("remotePort") or 0)
                    )
                    if args.verbose:
                        print(f"browser_perf: local endpoints {ends}", file=sys.stderr)
                    if len(ends) == 1:  # several connections: which was the document's?
                        self.row["local_ip"], self.row["local_port"] = ends[0]
                perf = page.evaluate(_PAGE_TIMINGS_JS, True)
                drop_favicon(perf, self.net)
                if args.duration is not None:
                    self.row["cancelled_requests"] = drop_cancelled(perf, self.net)
                if args.verbose:
                    self.describe(perf)
                build_row(self.row, perf, self.net)
                add_cpu(self.row, (cpu1 - cpu0) * 1000.0)
                self.row.update(cpu_limits(snap0, snap1))
                status = response.status if response is not None else 0
                error = ""
                if status >= 400 or status == 0:
                    error = f"http: status {status} for the document"
                error = (
                    error
                    or judge(args.protocol, self.page_url(), perf, self.net)
                    or http_problems(perf, self.net, self.page_url())
                )
                if args.duration is not None:
                    error = (
                        self.add_playback(page.evaluate("window.quicbedQoE"), (cpu1 - cpu0) * 1000.0) or error
                    )
                self.row["error"] = error
            except PlaywrightError as e:
                raise LoadError(self.failure(str(e), page)) from None
            finally:
                self._sampling.set()
                with contextlib.suppress(Exception):
                    context.close()
        return self.row

    def page_url(self) -> str:
        """What the browser opens: --url, or with --duration the player page playing it."""
        if self.args.duration is None:
            return self.args.url
        url = urlsplit(self.args.url)
        params = {"mpd": url.path, "duration": f"{self.args.duration:g}"}
        if self.args.player_settings is not None:
            params["settings"] = json.dumps(self.args.player_settings, separators=(",", ":"))
        query = urlencode(params)
        return f"{url.scheme}://{url.netloc}{PLAYER_PAGE}?{query}"

    def add_playback(self, record: dict[str, Any], cpu_ms: float) -> str:
        """The playback's QoE and trace into the row; its error, if the player had one."""
        for key in PAGE_ONLY_KEYS:
            self.row[key] = None
        self.row.update(
            qoe.summarize(record), trace=qoe.trace_since_play(record), t_done=round(time.time(), 6)
        )
        played_ms = 1000.0 * (record.get("played_s") or 0) + (self.row["stall_total_ms"] or 0)
        if played_ms:  # cpu_bound: cpu_limits over the playback, as for a page
            self.row["browser_cpu_pct"] = round(100.0 * cpu_ms / played_ms, 1)
        if record.get("error"):
            return one_line(record["error"])
        if self.row["startup_delay_ms"] is None:
            return "player: no frame was rendered"
        return ""

    def describe(self, perf: dict[str, Any]) -> None:
        """--verbose: what the browser fetched and over what, on stderr."""
        processes = marked_pids(self.token)
        print(
            f"browser_perf: {len(processes)} browser processes; requests "
            f"{self.net['requests']}; failures {self.net['failures']}",
            file=sys.stderr,
        )
        for r in self.net["responses"]:
            print(
                f"browser_perf: {r.get('status')} {r.get('protocol')} conn "
                f"{r.get('connectionId')} reused {r.get('connectionReused')} "
                f"{r.get('url')} timing {json.dumps(r.get('timing'))}",
                file=sys.stderr,
            )
        for e in [perf.get("navigation") or {}, *perf.get("resources", [])]:
            print(
                f"browser_perf: {e.get('nextHopProtocol')} {e.get('name')} "
                + " ".join(
                    f"{k}={e.get(k)}"
                    for k in (
                        "startTime",
                        "connectStart",
                        "secureConnectionStart",
                        "connectEnd",
                        "requestStart",
                        "responseStart",
                        "responseEnd",
                        "encodedBodySize",
                    )
                ),
                file=sys.stderr,
            )

    def failure(self, message: str, page: Any) -> str:
        """The error of a load that raised, with what the page reached if it still answers."""
        if self.watchdog_fired:
            return (
                f"timeout: no load event within {self.args.timeout:g} s " f"(browser killed by the watchdog)"
            )
        error = categorize(message)
        if error.startswith("timeout"):
            pending = [_short(u, self.args.url) for u in self.net["pending"].values()]
            error = f"timeout: no load event within {self.args.timeout:g} s" + (
                f"; unfinished: {', '.join(pending[:4])}" if pending else ""
            )
        if re.search(r"ERR_QUIC_(PROTOCOL_ERROR|HANDSHAKE_FAILED)", error) and self.net["document"] is None:
            error = self.diagnose_quic(error)
        if page is not None and self.net["document"] is not None:
            with contextlib.suppress(Exception):
                perf = page.evaluate(_PAGE_TIMINGS_JS, False)
                drop_favicon(perf, self.net)
                if (perf.get("navigation") or {}).get("name", "").startswith("http"):
                    build_row(self.row, perf, self.net)
                    for key in ("t_done", "download_time_ms", "page_load_time_ms", "throughput_mbps"):
                        self.row[key] = None
        return error

    def diagnose_quic(self, error: str) -> str:
        """Chromium reports a QUIC handshake that failed on the server's certificate as
        ERR_QUIC_PROTOCOL_ERROR (the reason is only in its NetLog, not kept here: it costs CPU
        in every load). One curl HTTP/3 handshake with the same CA and address tells."""
        url = urlsplit(self.args.url)
        port = url.port or 443
        resolves = [f"{r.host}:{r.port}:{r.address}" for r in self.args.resolve if r.port == port]
        wait = max(1, min(5, int(self.args.timeout)))
        argv = [
            "curl",
            "-sS",
            "--http3-only",
            "--max-time",
            str(wait),
            "-o",
            "/dev/null",
            "--cacert",
            self.args.cacert,
            *(x for r in resolves for x in ("--resolve", r)),
            self.args.url,
        ]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=wait + 3)
        except (OSError, subprocess.TimeoutExpired):
            return error
        detail = one_line((proc.stderr.strip().splitlines() or [""])[0], 160)
        code = error.split(": ", 1)[-1]
        if proc.returncode in (35, 51, 58, 59, 60, 77, 83, 90, 91):  # curl's TLS/certificate errors
            return f"tls: {code} (curl over HTTP/3 with --cacert: {detail})"
        if proc.returncode == 28:
            return f"timeout: {code} (no answer to a QUIC handshake: {detail})"
        return error

    def cleanup(self) -> None:
        self._sampling.set()
        if self.token:
            kill_marked(self.token)
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            if os.path.exists(self.tmp):  # a process wrote while we removed: once more
                time.sleep(0.1)
                shutil.rmtree(self.tmp, ignore_errors=True)


class LoadError(Exception):
    """A load that gave no page: the row's error (category: detail)."""


# ------------------------------------------------------------------------------ driver

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"load": None, "printed": set(), "failed": False}


def emit(row: dict[str, Any]) -> None:
    """Print a row once per repetition (the main thread and the watchdog may both try)."""
    with _LOCK:
        if row["rep"] in _STATE["printed"]:
            return
        _STATE["printed"].add(row["rep"])
        if row["error"]:
            _STATE["failed"] = True
        keys = (*ROW_KEYS, *PLAYER_KEYS) if "trace" in row else ROW_KEYS
        sys.stdout.write(json.dumps({k: row.get(k) for k in keys}) + "\n")
        sys.stdout.flush()


def _kill_driver() -> None:
    """Playwright's node driver is our child: it goes too when a load is abandoned."""
    for pid in children_of(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _abandon(load: Load, error: str) -> None:
    """The last resort of the watchdog: the main thread is stuck inside Playwright."""
    load.row["error"] = error
    emit(load.row)
    load.cleanup()
    _kill_driver()
    os._exit(EXIT_ERROR)


def _watchdog(load: Load, done: threading.Event, deadline_s: float) -> None:
    if done.wait(deadline_s):
        return
    load.watchdog_fired = True
    kill_marked(load.token)  # Playwright's call fails now; the main thread writes the row
    if not done.wait(HARD_GRACE_S):
        _abandon(
            load,
            f"timeout: no load event within {load.args.timeout:g} s "
            f"(browser killed by the watchdog; driver unresponsive)",
        )


def versions(executable: str) -> dict[str, str]:
    out = {"chromium": "", "playwright": ""}
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        out["playwright"] = version("playwright")
    with contextlib.suppress(Exception):
        text = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=20).stdout
        m = re.search(r"\d+\.\d+\.\d+\.\d+", text)
        out["chromium"] = m.group(0) if m else text.strip()
    return out


def _on_signal(signum: int, frame: Any) -> None:
    """SIGTERM/SIGINT/SIGHUP: close the browser the hard way, remove its files, leave."""
    load = _STATE.get("load")
    if load is not None:
        load.cleanup()
    _kill_driver()
    os._exit(128 + signum)


def run_load(args: argparse.Namespace, rep: int, vers: dict[str, str]) -> dict[str, Any]:
    load = Load(args, rep)
    load.row = empty_row(args.protocol, args.url, rep)
    load.row.update(
        tool_version=vers["chromium"],
        library=f"{PACKAGES[args.browser]} {vers['chromium']}; playwright {vers['playwright']}",
        browser=args.browser,
    )
    _STATE["load"] = load
    done = threading.Event()
    dog = threading.Thread(target=_watchdog, args=(load, done, args.timeout + HARD_GRACE_S), daemon=True)
    dog.start()
    try:
        load.run(vers)
    except LoadError as e:
        load.row["error"] = one_line(str(e))
    except Exception as e:  # any failure of the browser is a row, not a crash
        load.row["error"] = one_line(load.failure(f"{type(e).__name__}: {e}", None))
    finally:
        done.set()
        load.cleanup()
        _STATE["load"] = None
    if load.watchdog_fired and not load.row["error"].startswith("timeout"):
        load.row["error"] = f"timeout: no load event within {args.timeout:g} s (watchdog)"
    load.row["error"] = one_line(load.row["error"])
    return load.row


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
    except UsageError as e:
        print(f"browser_perf: usage error: {e} (see browser_perf --help)", file=sys.stderr)
        return EXIT_USAGE
    except Unsupported as e:
        print(f"browser_perf: unsupported: {e}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    if getattr(args, "version", False) and not hasattr(args, "url"):
        import playwright.sync_api  # noqa: F401 - the check: Playwright imports

        found = {name: versions(path) for name, path in BROWSERS.items()}
        listed = "; ".join(f"{PACKAGES[b]} {v['chromium'] or 'missing'}" for b, v in found.items())
        print(f"browser_perf {VERSION} ({listed}; playwright {found[DEFAULT_BROWSER]['playwright']})")
        return EXIT_OK if all(v["chromium"] and v["playwright"] for v in found.values()) else EXIT_ERROR
    vers = versions(BROWSERS[args.browser])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    for rep in range(args.repetitions):
        if rep and args.pause:
            time.sleep(args.pause / 1000.0)
        emit(run_load(args, rep, vers))
    return EXIT_ERROR if _STATE["failed"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
