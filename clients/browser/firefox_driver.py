"""The Firefox driver (`--browser firefox`, the tool `firefox`): one page load in a fresh
headless firefox-esr (Debian trixie's), its own QUIC stack (neqo) and TLS (NSS), driven over
WebDriver BiDi, which Firefox's remote agent speaks natively (bidi_client.py): no geckodriver,
Selenium or Playwright. The same row and error rows as Chromium's (page_row.py); where Firefox
has no equivalent of a Chromium column, the row says so (clients/firefox/README.md).

Contract, as Chromium's: a fresh profile per load whose NSS database trusts the run's CA;
QUIC forced for every origin (network.http.http3.alt-svc-mapping-for-testing), or TCP with
the TLS version pinned (security.tls.version.min = max); every name resolves to --resolve's
address without DNS (network.dns.forceResolve, TRR off), or, for a replayed page's several
addresses, from the container's hosts file, which must agree with --resolve; nothing leaves
the testbed (PREFS).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bidi_client import BidiClosed, BidiError, BidiSession
from load_common import _PAGE_TIMINGS_JS, BrowserLoad, browser_env, page_origins
from page_row import LoadError, add_cpu, build_row, drop_favicon, empty_row, http_problems, judge, one_line
from proc_watch import (
    cpu_limits,
    cpu_snapshot,
    local_endpoints,
    marked_pids,
    process_cpu_s,
)

# The binary itself (Debian's /usr/bin/firefox-esr is a link to it).
BROWSERS = {"firefox": "/usr/lib/firefox-esr/firefox-esr"}
PACKAGE = "firefox-esr"
CANNOT_PIN: dict[str, dict[str, str]] = {}
LAUNCH_TIMEOUT_S = 30.0
# How long after the load event the row waits for responses still in flight (await_responses).
AFTER_LOAD_S = 5.0
_LISTENING = re.compile(r"WebDriver BiDi listening on (ws://\S+)")
# security.tls.version.*: 3 = TLS 1.2, 4 = TLS 1.3
TLS_PREF = {"tls1.3": 4, "tls1.2": 3}
# What every load needs, quiet or not: nothing speculative on the measured path (predictor,
# prefetch, speculative connections, the favicon guess: /favicon.ico is no resource of the
# page), no certificate-status fetch inside a handshake (OCSP, CRLite), no DNS over HTTPS or
# proxy, the start page blank, timing at its real precision (Firefox rounds and jitters timers
# to 1 ms by default), and HTTP/3 kept on for the run's CA, a root of our own (Firefox would
# otherwise turn HTTP/3 off for it).
LOAD_PREFS: dict[str, Any] = {
    "network.predictor.enabled": False,
    "network.prefetch-next": False,
    "network.dns.disablePrefetch": True,
    "network.http.speculative-parallel-limit": 0,
    "browser.urlbar.speculativeConnect.enabled": False,
    "browser.places.speculativeConnect.enabled": False,
    "browser.chrome.site_icons": False,
    "browser.chrome.guess_favicon": False,
    "security.OCSP.enabled": 0,
    "security.pki.crlite_mode": 0,
    "network.trr.mode": 5,  # DNS over HTTPS off, by choice
    "network.proxy.type": 0,
    "browser.startup.page": 0,
    "browser.startup.homepage": "about:blank",
    "privacy.reduceTimerPrecision": False,
    "network.http.http3.disable_when_third_party_roots_found": False,
}
# Quieting: Firefox's own background services off, as page-load tools do (browsertime,
# WebPageTest, Playwright's Firefox; the remote agent's "recommended" automation prefs hold
# many of them too), so that none runs inside the timed load or sends a packet. Each would
# reach a Mozilla host, which network.dns.forceResolve sends to the server: handshakes on the
# measured path (bench/browser_quiet_bench.py counts the packets; bench/README.md).
QUIET_PREFS: tuple[tuple[str, Any], ...] = (
    # Telemetry, the health report and their pings: no upload, no archive.
    ("toolkit.telemetry.enabled", False),
    ("toolkit.telemetry.unified", False),
    ("toolkit.telemetry.archive.enabled", False),
    ("toolkit.telemetry.server", ""),
    ("toolkit.telemetry.shutdownPingSender.enabled", False),
    ("toolkit.telemetry.firstShutdownPing.enabled", False),
    ("toolkit.telemetry.reportingpolicy.firstRun", False),
    ("toolkit.coverage.endpoint.base", ""),
    ("datareporting.healthreport.uploadEnabled", False),
    ("datareporting.policy.dataSubmissionEnabled", False),
    ("datareporting.policy.firstRunURL", ""),
    ("browser.ping-centre.telemetry", False),
    ("browser.tabs.crashReporting.sendReport", False),
    # Updates of the application, add-ons, system add-ons, search engines and region.
    ("app.update.auto", False),
    ("app.update.enabled", False),
    ("app.update.disabledForTesting", True),
    ("extensions.update.enabled", False),
    ("extensions.getAddons.cache.enabled", False),
    ("extensions.blocklist.enabled", False),
    ("extensions.systemAddon.update.enabled", False),
    ("browser.search.update", False),
    ("browser.region.update.enabled", False),
    ("browser.region.network.url", ""),
    # Studies and remote configuration: Normandy, Shield, Nimbus, Remote Settings and what it
    # feeds (CRLite filters, intermediates).
    ("app.normandy.enabled", False),
    ("app.normandy.api_url", ""),
    ("app.shield.optoutstudies.enabled", False),
    ("messaging-system.rsexperimentloader.enabled", False),
    ("services.settings.server", "data:,"),
    ("security.remote_settings.crlite_filters.enabled", False),
    ("security.remote_settings.intermediates.enabled", False),
    # Safe Browsing's list updates and lookups.
    ("browser.safebrowsing.malware.enabled", False),
    ("browser.safebrowsing.phishing.enabled", False),
    ("browser.safebrowsing.downloads.enabled", False),
    ("browser.safebrowsing.downloads.remote.enabled", False),
    ("browser.safebrowsing.blockedURIs.enabled", False),
    ("browser.safebrowsing.provider.google4.updateURL", ""),
    ("browser.safebrowsing.provider.mozilla.updateURL", ""),
    # Captive-portal detection and the connectivity check (detectportal.firefox.com), the
    # MITM-detection priming request.
    ("network.captive-portal-service.enabled", False),
    ("network.connectivity-service.enabled", False),
    ("security.certerrors.mitm.priming.enabled", False),
    # Push, geolocation, media plug-in (GMP) downloads.
    ("dom.push.enabled", False),
    ("dom.push.connection.enabled", False),
    ("dom.push.serverURL", ""),
    ("geo.enabled", False),
    ("geo.provider.network.url", ""),
    ("media.gmp-manager.url", ""),
    ("media.gmp-provider.enabled", False),
    # The new-tab page and its feeds: Pocket, top sites, sponsored content; the welcome page,
    # the default-browser check, the translation and ML engines (models from Remote Settings).
    ("browser.newtabpage.enabled", False),
    ("extensions.pocket.enabled", False),
    ("browser.newtabpage.activity-stream.feeds.section.topstories", False),
    ("browser.newtabpage.activity-stream.feeds.telemetry", False),
    ("browser.newtabpage.activity-stream.telemetry", False),
    ("browser.newtabpage.activity-stream.showSponsored", False),
    ("browser.newtabpage.activity-stream.showSponsoredTopSites", False),
    ("browser.topsites.contile.enabled", False),
    ("browser.aboutwelcome.enabled", False),
    ("browser.shell.checkDefaultBrowser", False),
    ("browser.translations.enable", False),
    ("browser.ml.enable", False),
)
# Every pref of a normal load (the unit tests and clients/firefox/README.md name this).
PREFS: dict[str, Any] = {**LOAD_PREFS, **dict(QUIET_PREFS)}
# bench/browser_quiet_bench.py's "before": QUICBED_BROWSER_QUIET=0 leaves QUIET_PREFS out and
# turns the remote agent's recommended prefs off too. Never set by a run.
QUIET_ENV = "QUICBED_BROWSER_QUIET"
LOUD_PREFS: dict[str, Any] = {"remote.prefs.recommended": False}


def unsupported(args: argparse.Namespace) -> str:
    """Why this valid request cannot be done in Firefox ("" when it can)."""
    if args.duration is not None:
        return "--browser firefox: page loads only (the dash.js playback runs in Chromium)"
    if getattr(args, "workload", "web") == "cloud":
        return "--browser firefox: page loads only (the cloud download runs in Chromium)"
    wrong = [r for r in _resolves(args) if _hosts_file_address(r.host) != r.address]
    if len(_addresses(args)) > 1 and wrong:
        # network.dns.forceResolve takes one address for every name; several come from the
        # container's hosts file (the testbed writes a replayed page's origins there).
        r = wrong[0]
        return (
            f"--browser firefox: several --resolve addresses need each name in the hosts file, "
            f"and {r.host} resolves to {_hosts_file_address(r.host) or 'nothing'}, not {r.address}"
        )
    return ""


def _resolves(args: argparse.Namespace) -> list[Any]:
    port = urlsplit(args.url).port or 443
    return [r for r in args.resolve if r.port == port]


def _addresses(args: argparse.Namespace) -> set[str]:
    return {r.address for r in _resolves(args)}


def _hosts_file_address(name: str) -> str:
    """The address the system resolver gives `name` (the container's hosts file: its resolver
    is a loopback address where nothing listens, topology/net.py NO_RESOLVER); "" for none."""
    try:
        infos = socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return ""
    return str(infos[0][4][0]) if infos else ""


def quiet() -> bool:
    """Whether QUIET_PREFS apply: always, but in bench/browser_quiet_bench.py's "before" arm."""
    return os.environ.get(QUIET_ENV, "1") != "0"


def firefox_prefs(args: argparse.Namespace) -> dict[str, Any]:
    """The fresh profile's prefs (user.js): the protocol, name resolution, nothing outside."""
    url = urlsplit(args.url)
    port = url.port or 443
    prefs = dict(PREFS) if quiet() else {**LOAD_PREFS, **LOUD_PREFS}
    addresses = _addresses(args)
    if len(addresses) == 1:
        prefs["network.dns.forceResolve"] = next(iter(addresses))  # every name, no DNS query
    if args.protocol == "quic":
        prefs["network.http.http3.enable"] = True
        # As if every origin had announced h3 on its port: each first request goes over QUIC.
        prefs["network.http.http3.alt-svc-mapping-for-testing"] = ",".join(
            f"{host};h3=:{port}" for host in page_origins(args)
        )
    else:
        prefs["network.http.http3.enable"] = False
        prefs["security.tls.version.min"] = TLS_PREF[args.protocol]
        prefs["security.tls.version.max"] = TLS_PREF[args.protocol]
    return prefs


# A port nothing in the client container listens on, and not one of the fetch standard's
# blocked ports (Firefox refuses 9, say, before it opens a channel).
CLOSED_LOOPBACK_URL = "https://127.0.0.1:2/"


def open_alt_svc_store(bidi: BidiSession, context: str) -> None:
    """Firefox reads its Alt-Svc store from the profile asynchronously, and a request made
    before the store is ready ignores alt-svc-mapping-for-testing (MOZ_LOG=nsHttp:5 says "skip
    when storage is not ready"): the document would go over TCP and only the page's resources
    over QUIC. One request refused on the container's loopback opens the store, and sends no
    packet on the emulated path."""
    with contextlib.suppress(BidiError, TimeoutError):
        bidi.send(
            "browsingContext.navigate",
            {"context": context, "url": CLOSED_LOOPBACK_URL, "wait": "complete"},
            timeout=10,
        )


def user_js(prefs: dict[str, Any]) -> str:
    return "".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in prefs.items())


# Firefox's error pages (about:neterror?e=CODE, about:certerror) -> the row's category.
_ERROR_PAGE_CATEGORIES = {
    "nssBadCert": "tls",
    "nssFailure2": "tls",
    "sslv3Used": "tls",
    "inadequateSecurityError": "tls",
    "netTimeout": "timeout",
    "connectionFailure": "connect",
    "netReset": "connect",
    "netInterrupt": "connect",
    "netOffline": "connect",
    "dnsNotFound": "connect",
    "unknownProtocolFound": "protocol",
    "corruptedContentErrorv2": "http",
    "contentEncodingError": "http",
}


# Gecko's network errors (BiDi's navigate error, "Error: NS_ERROR_...") -> the row's category;
# any NSS error (SEC_ERROR_*, SSL_ERROR_*, NS_ERROR_MODULE_SECURITY) is tls.
_NS_CATEGORIES = (
    (re.compile(r"SEC_ERROR_|SSL_ERROR_|NS_ERROR_MODULE_SECURITY|MOZILLA_PKIX_ERROR_"), "tls"),
    (re.compile(r"NS_ERROR_NET_TIMEOUT|NS_ERROR_NET_TIMEOUT_EXTERNAL"), "timeout"),
    (
        re.compile(
            r"NS_ERROR_(CONNECTION_REFUSED|NET_RESET|NET_INTERRUPT|NET_PARTIAL_TRANSFER|OFFLINE|"
            r"UNKNOWN_HOST|DNS_LOOKUP_QUEUE_FULL|PROXY_|NET_HTTP3_PROTOCOL_ERROR|SOCKET_|"
            r"PORT_ACCESS_NOT_ALLOWED|NET_INADEQUATE_SECURITY)"
        ),
        "connect",
    ),
    (re.compile(r"NS_ERROR_(UNKNOWN_PROTOCOL|MALFORMED_URI)"), "protocol"),
    (re.compile(r"NS_ERROR_(CORRUPTED_CONTENT|INVALID_CONTENT_ENCODING|NET_EMPTY_RESPONSE)"), "http"),
)


def categorize_firefox(message: str) -> str:
    """A failed navigation's `category: detail` from the BiDi error Firefox gave: a Gecko
    error code (NS_ERROR_*, an NSS code inside it) or the error page it reached."""
    text = " ".join(str(message).split())
    nss = re.search(r"\b((?:SEC|SSL|MOZILLA_PKIX)_ERROR_[A-Z0-9_]+)", text)
    if nss:
        return f"tls: {nss.group(1)}"
    code = re.search(r"\b(NS_ERROR_[A-Z0-9_]+)", text)
    if code:
        for pattern, category in _NS_CATEGORIES:
            if pattern.search(code.group(1)):
                return f"{category}: {code.group(1)}"
        return f"browser: {code.group(1)}"
    m = re.search(r"about:(neterror|certerror)\?([^\s]*)", text)
    if m:
        page = (parse_qs(m.group(2)).get("e") or [""])[0]
        if m.group(1) == "certerror":
            return f"tls: {page or 'certerror'} (Firefox's certificate error page)"
        category = _ERROR_PAGE_CATEGORIES.get(page, "connect")
        return f"{category}: {page} (Firefox's network error page)"
    return "browser: " + one_line(text, 300)


@dataclass
class FirefoxLoad(BrowserLoad):
    """One page load in one fresh firefox-esr over WebDriver BiDi."""

    stderr_lines: list[str] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None
    documents: list[dict[str, Any]] = field(default_factory=list)

    def prepare(self) -> tuple[str, dict[str, str]]:
        """The fresh profile (user.js, an NSS database trusting the CA), HOME and TMPDIR."""
        self.make_tmp()
        profile = os.path.join(self.tmp, "profile")
        home = os.path.join(self.tmp, "home")
        tmpdir = os.path.join(self.tmp, "tmp")
        for d in (profile, home, tmpdir):
            os.makedirs(d, mode=0o700)
        with open(os.path.join(profile, "user.js"), "w") as f:
            f.write(user_js(firefox_prefs(self.args)))
        for argv in (
            ["certutil", "-d", f"sql:{profile}", "-N", "--empty-password"],
            ["certutil", "-d", f"sql:{profile}", "-A", "-t", "C,,", "-n", "quicbed", "-i", self.args.cacert],
        ):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            if proc.returncode != 0:
                why = (proc.stderr or proc.stdout).strip()
                raise LoadError(f"tls: certutil could not trust {self.args.cacert}: {why}")
        env = browser_env(
            home,
            tmpdir,
            self.token,
            self.args.keylog,
            MOZ_HEADLESS="1",
            MOZ_CRASHREPORTER_DISABLE="1",
            MOZ_DISABLE_AUTO_SAFE_MODE="1",
            # A release build ignores services.settings.server unless this is set, and would
            # fetch Remote Settings from firefox.settings.services.mozilla.com, which
            # network.dns.forceResolve sends to the server: TLS handshakes on the measured path.
            MOZ_REMOTE_SETTINGS_DEVTOOLS="1",
        )
        return profile, env

    def launch(self, profile: str, env: dict[str, str]) -> str:
        """Start Firefox with its remote agent on a free port; its WebSocket URL."""
        argv = [
            BROWSERS["firefox"],
            "--headless",
            "--no-remote",
            "--profile",
            profile,
            "--remote-debugging-port",
            "0",
            "about:blank",
        ]
        if self.args.verbose:
            print(f"browser_perf: {' '.join(argv)}", flush=True, file=sys.stderr)
        try:
            self.process = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as e:
            raise LoadError(f"browser: launch failed: {e}") from None
        found: list[str] = []
        ready = threading.Event()

        def read_stderr() -> None:
            assert self.process is not None and self.process.stderr is not None
            for line in self.process.stderr:
                self.stderr_lines = [*self.stderr_lines[-40:], line.rstrip()]
                m = _LISTENING.search(line)
                if m and not found:
                    found.append(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read_stderr, daemon=True).start()
        ready.wait(min(LAUNCH_TIMEOUT_S, self.args.timeout + 5))
        if not found:
            tail = "; ".join(self.stderr_lines[-3:]) or "no remote agent within the launch timeout"
            raise LoadError(f"browser: launch failed: {one_line(tail, 200)}")
        return found[0].rstrip("/") + "/session"

    # -- the BiDi network record, in the shape page_row.judge reads (DevTools' for Chromium)
    def on_request(self, event: dict[str, Any]) -> None:
        request = event.get("request") or {}
        url = request.get("url", "")
        if event.get("redirectCount", 0) == 0 and url not in self.net["requests"]:
            self.net["requests"].append(url)
        self.net["pending"][request.get("request")] = url

    def on_response(self, event: dict[str, Any]) -> None:
        request, response = event.get("request") or {}, event.get("response") or {}
        url = request.get("url") or response.get("url", "")
        self.net["pending"].pop(request.get("request"), None)
        record = {"url": url, "protocol": response.get("protocol", ""), "status": response.get("status")}
        self.net["responses"].append(record)
        if event.get("navigation") and self.net["document"] is None:
            self.net["document"] = record

    def on_failed(self, event: dict[str, Any]) -> None:
        request = event.get("request") or {}
        url = self.net["pending"].pop(request.get("request"), request.get("url", ""))
        self.net["failures"].append({"url": url, "errorText": event.get("errorText", ""), "canceled": False})

    def run(self, versions: dict[str, str]) -> dict[str, Any]:
        profile, env = self.prepare()
        ws_url = self.launch(profile, env)
        try:
            bidi = BidiSession(ws_url)
        except (OSError, BidiClosed) as e:
            raise LoadError(f"browser: no WebDriver BiDi session: {one_line(str(e), 200)}") from None
        try:
            return self.load_page(bidi, versions)
        except BidiClosed as e:
            raise LoadError(f"browser: Firefox went away ({one_line(str(e), 160)})") from None
        finally:
            self._sampling.set()
            bidi.close()

    def load_page(self, bidi: BidiSession, versions: dict[str, str]) -> dict[str, Any]:
        args = self.args
        session = bidi.send("session.new", {"capabilities": {}})
        version = (session.get("capabilities") or {}).get("browserVersion") or versions["firefox"]
        self.row.update(tool_version=version, library=f"{PACKAGE} {version}; webdriver-bidi (built in)")
        context = bidi.send("browsingContext.getTree", {})["contexts"][0]["context"]
        if args.protocol == "quic":
            open_alt_svc_store(bidi, context)
        bidi.on("network.beforeRequestSent", self.on_request)
        bidi.on("network.responseCompleted", self.on_response)
        bidi.on("network.fetchError", self.on_failed)
        bidi.send(
            "session.subscribe",
            {"events": ["network.beforeRequestSent", "network.responseCompleted", "network.fetchError"]},
        )
        self.settle()  # the browser's start-up work before the timed window
        pids = marked_pids(self.token)
        cpu0, snap0 = process_cpu_s(pids), cpu_snapshot(pids)
        threading.Thread(target=self.sample_cpu, daemon=True).start()
        try:
            bidi.send(
                "browsingContext.navigate",
                {"context": context, "url": args.url, "wait": "complete"},
                timeout=args.timeout,
            )
        except TimeoutError:
            pending = list(self.net["pending"].values())
            raise LoadError(
                f"timeout: no load event within {args.timeout:g} s"
                + (f"; unfinished: {', '.join(pending[:4])}" if pending else "")
            ) from None
        except BidiError as e:
            raise LoadError(categorize_firefox(str(e))) from None
        finally:
            pids = marked_pids(self.token)
            cpu1, snap1 = process_cpu_s(pids), cpu_snapshot(pids)
            self._sampling.set()
            self.row["cpu"] = self.cpu_samples
        url = urlsplit(args.url)
        port = url.port or 443
        own = (url.hostname or "").lower()
        address = next(r.address for r in _resolves(args) if r.host == own)
        pids = marked_pids(self.token)
        ends = local_endpoints(pids, address, port, unconnected_udp=args.protocol == "quic")
        # Each origin's own sockets (connected ones: an unconnected QUIC socket names no
        # address, so it is counted once, in connections, and under no origin).
        ends_to = {a: local_endpoints(pids, a, port) for a in sorted(_addresses(args))}
        unattributed = set(ends) - set(ends_to[address])
        self.row.update(remote_ip=address, remote_port=port)
        if len(ends) == 1:
            self.row["local_ip"], self.row["local_port"] = ends[0]
        waited_s = self.await_responses(AFTER_LOAD_S)
        perf = self.page_timings(bidi, context)
        drop_favicon(perf, self.net)
        if args.verbose:
            waited = f"waited {waited_s:.3f} s for responses after the load"
            print(f"browser_perf: endpoints {ends}; {waited}", file=sys.stderr)
            print(f"browser_perf: net {json.dumps(self.net)}", file=sys.stderr)
        build_row(self.row, perf, self.net)
        # BiDi names no connection: count the browser's sockets to each origin's address.
        self.row.update(
            self.tls_columns(),
            connections=sum(len(e) for e in ends_to.values()) + len(unattributed),
            origin_connections=self.origin_connections(ends_to, unattributed, own, len(ends)),
        )
        add_cpu(self.row, (cpu1 - cpu0) * 1000.0)
        self.row.update(cpu_limits(snap0, snap1))
        status = self.row["http_status"]
        error = f"http: status {status} for the document" if status >= 400 or status == 0 else ""
        self.row["error"] = (
            error
            or judge(args.protocol, args.url, perf, self.net, frozenset(page_origins(args)))
            or http_problems(perf, self.net, args.url)
        )
        return self.row

    def origin_connections(
        self, ends_to: dict[str, list[Any]], unattributed: set[Any], own: str, own_count: int
    ) -> dict[str, int]:
        """Host -> the browser's sockets to its address at load end; {} (unknown) when a socket
        names no address: neqo's QUIC sockets are not connect()ed, so over QUIC a replayed
        page's connections are counted in `connections` but under no origin (the server's
        access log counts them per origin)."""
        if len(ends_to) == 1:
            return {own: own_count}
        if unattributed:
            return {}
        return {r.host: len(ends_to[r.address]) for r in sorted(_resolves(self.args), key=lambda r: r.host)}

    def tls_columns(self) -> dict[str, str]:
        """BiDi reports no TLS details (Chromium's come from DevTools' securityDetails): the
        version is the one the profile pins (security.tls.version.min = max; QUIC is TLS 1.3,
        RFC 9001), which the server's access log confirms; cipher and group stay empty."""
        return {
            "tls_version": "TLSv1.2" if self.args.protocol == "tls1.2" else "TLSv1.3",
            "cipher": "",
            "tls_group": "",
        }

    def await_responses(self, limit_s: float) -> float:
        """Wait, at most `limit_s`, until every request the page began has its response: the
        load event does not wait for all of them (a fetch() or a preload may still be in
        flight), and a resource is in Resource Timing only once its response has ended. Read
        too soon, the row misses it (CI, 2026-12-07: 69 resources where the server answered
        70). The timed load is not touched: it ended at the load event."""
        start = time.monotonic()
        while self.net["pending"] and time.monotonic() < start + limit_s:
            time.sleep(0.01)
        return time.monotonic() - start

    def page_timings(self, bidi: BidiSession, context: str) -> dict[str, Any]:
        """The page's timing entries (load_common's script), as JSON through one string."""
        function = f"async (wait) => JSON.stringify(await ({_PAGE_TIMINGS_JS.strip()})(wait))"
        result = bidi.send(
            "script.callFunction",
            {
                "functionDeclaration": function,
                "awaitPromise": True,
                "target": {"context": context},
                "arguments": [{"type": "boolean", "value": True}],
            },
            timeout=15,
        )
        value = (result.get("result") or {}).get("value")
        if result.get("type") == "exception" or not isinstance(value, str):
            details = (result.get("exceptionDetails") or {}).get("text", "")
            raise LoadError(f"browser: the page's timings could not be read: {one_line(details, 160)}")
        perf: dict[str, Any] = json.loads(value)
        return perf

    def failure(self, message: str, page: Any) -> str:
        if self.watchdog_fired:
            return f"timeout: no load event within {self.args.timeout:g} s (browser killed by the watchdog)"
        return categorize_firefox(message)

    def cleanup(self) -> None:
        super().cleanup()
        if self.process is not None:
            with contextlib.suppress(Exception):
                self.process.kill()
                self.process.wait(timeout=5)


def new_load(args: argparse.Namespace, rep: int, vers: dict[str, str]) -> FirefoxLoad:
    load = FirefoxLoad(args, rep)
    load.row = empty_row(args.protocol, args.url, rep)
    load.row.update(
        tool="firefox",
        backend="firefox",
        tool_version=vers["firefox"],
        library=f"{PACKAGE} {vers['firefox']}; webdriver-bidi (built in)",
        browser="firefox",
    )
    return load


def versions(browser: str) -> dict[str, str]:
    out = {"firefox": ""}
    with contextlib.suppress(Exception):
        text = subprocess.run(
            [BROWSERS["firefox"], "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            env={"HOME": "/tmp"},
        ).stdout
        m = re.search(r"\d+\.\d+(\.\d+)?esr", text)
        out["firefox"] = m.group(0) if m else text.strip()
    return out


def version_line() -> tuple[str, bool]:
    v = versions("firefox")["firefox"]
    return f"{PACKAGE} {v or 'missing'}", bool(v)
