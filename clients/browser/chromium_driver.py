"""The Chromium driver: one page load (or dash.js playback) in a fresh headless Chromium,
Debian's full browser or its chromium-headless-shell, driven by Playwright for Python over the
DevTools pipe. Playwright is imported only inside Load.run (the unit tests load this on the
host, where it is not installed)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cloud_fetch import BLANK_HTML, FETCH_JS, blank_url, build_cloud_row, cloud_error, file_only
from load_common import _PAGE_TIMINGS_JS, _QOE_DONE_JS, BrowserLoad, browser_env, page_origins
from page_row import (
    LoadError,
    _short,
    add_cpu,
    build_row,
    categorize,
    drop_cancelled,
    drop_favicon,
    empty_row,
    http_problems,
    judge,
    one_line,
)
from proc_watch import (
    cpu_limits,
    cpu_snapshot,
    local_endpoints,
    marked_pids,
    process_cpu_s,
)

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
CANNOT_PIN = {
    "headless-shell": {
        "tls1.2": "--browser headless-shell cannot pin tls1.2: its network context ignores "
        "--ssl-version-max (use --browser chromium-full)"
    }
}
PACKAGES = {"headless-shell": "chromium-headless-shell", "chromium-full": "chromium"}  # Debian's
# The headless shell's process model: no zygotes (two processes fewer to fork; the sandbox is
# off under Playwright as root anyway), the compositor's GPU process (software, --disable-gpu)
# inside the browser process, and at most one renderer (a bound only: these same-origin pages
# start one anyway). Measured: three processes instead of six, about the same CPU.
# Background work is off in both browsers (QUIET_SWITCHES below). chromium-full takes no
# process switch of these (the "before" of bench/browser_bench.py).
LEAN_SWITCHES = ("--no-zygote", "--in-process-gpu", "--renderer-process-limit=1")
FAVICON = "*/favicon.ico"
# Quieting: the browser's own background work, switched off as page-load tools do (Playwright,
# chrome-launcher, WebPageTest, browsertime), so that it neither runs inside the timed load nor
# sends a packet (bench/browser_quiet_bench.py measures them; bench/README.md).
# Playwright passes most of these itself; listed here, they hold whatever Playwright does.
QUIET_SWITCHES: tuple[str, ...] = (
    # The browser's own network services: background fetches (variations seed, promos),
    # component updates (CRLSet, CT log list...), sync, Domain Reliability's beacons, the
    # client-side phishing classifier. Each names a host outside the testbed: MAP * ~NOTFOUND
    # refuses it, so they cost CPU and send nothing.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    # Metrics recorded, never uploaded; no crash reporter (breakpad's handler).
    "--metrics-recording-only",
    "--disable-breakpad",
    # A fresh profile every load: no first-run work, default-browser check, default apps or
    # extensions (each a process or a profile write at start).
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-default-apps",
    "--disable-extensions",
    # The build's features as shipped, not the field-trial testing config's experiments: the
    # same browser in every load.
    "--disable-field-trial-config",
    # No hyperlink-auditing pings (<a ping>).
    "--no-pings",
)
# Features off, for the same reasons: the translate ranker and its language model, optimization
# hints' fetches, the media router's (Cast) discovery, autofill's server queries, the CT log
# list's updater. Chromium reads only the last --disable-features, and Playwright passes one:
# ours repeats Playwright's list (disabled_features()).
QUIET_FEATURES: tuple[str, ...] = (
    "Translate",
    "OptimizationHints",
    "MediaRouter",
    "AutofillServerCommunication",
    "CertificateTransparencyComponentUpdater",
)
# Playwright's own --disable-features (PLAYWRIGHT_VERSION in versions.env: 1.65.2, its
# chromiumSwitches.ts): HttpsUpgrades, PaintHolding and the others change what a load does, so
# they must survive our --disable-features. tests/clients/test_playwright_features.py holds
# this copy to the list in the browser image's Playwright.
PLAYWRIGHT_DISABLED_FEATURES: tuple[str, ...] = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
)
# bench/browser_quiet_bench.py's "before": QUICBED_BROWSER_QUIET=0 launches without the quieting
# (ours and Playwright's copies of it). Never set by a run.
QUIET_ENV = "QUICBED_BROWSER_QUIET"
# The fresh profile's preferences: no speculative preconnect (Chromium's loading predictor
# otherwise opens a second TCP+TLS connection to the page's origin at navigation start, which
# it closes unused once the HTTP/2 session exists).
PROFILE_PREFERENCES = {"net": {"network_prediction_options": 2}}


def chromium_args(args: argparse.Namespace) -> list[str]:
    """Chromium's switches: the protocol, name resolution from --resolve only, and nothing that
    reaches outside the testbed, the quieting switches. (Playwright adds --headless,
    --no-sandbox, --user-data-dir, --remote-debugging-pipe and its own switches before ours.)"""
    url = urlsplit(args.url)
    port = url.port or 443
    rules = []
    for r in args.resolve:
        if r.port == port:
            address = f"[{r.address}]" if ":" in r.address else r.address
            rules.append(f"MAP {r.host} {address}")
    rules.append("MAP * ~NOTFOUND")  # any other name: not found, never a DNS query
    flags = ["--disable-gpu", f"--host-resolver-rules={', '.join(rules)}"]
    if quiet():
        flags += [*QUIET_SWITCHES, "--disable-features=" + ",".join(disabled_features(QUIET_FEATURES))]
    else:  # the bench's "before": Playwright's features less the quieting ones
        loud = tuple(f for f in PLAYWRIGHT_DISABLED_FEATURES if f not in QUIET_FEATURES)
        flags.append("--disable-features=" + ",".join(loud))
    if args.protocol == "quic":
        # Every origin's first request over QUIC, as if each had announced h3 (a replayed page's
        # origins: one entry each, comma-separated).
        forced = ",".join(f"{host}:{port}" for host in page_origins(args))
        flags += ["--enable-quic", f"--origin-to-force-quic-on={forced}"]
    else:
        flags.append("--disable-quic")
        flags.append("--ssl-version-min=tls1.3" if args.protocol == "tls1.3" else "--ssl-version-max=tls1.2")
    if args.duration is not None:  # the player starts by itself (muted, as a page may)
        flags.append("--autoplay-policy=no-user-gesture-required")
    if getattr(args, "browser", DEFAULT_BROWSER) == "headless-shell":
        flags += LEAN_SWITCHES
    return flags


def quiet() -> bool:
    """Whether the quieting switches apply: always, but in bench/browser_quiet_bench.py's
    "before" arm."""
    return os.environ.get(QUIET_ENV, "1") != "0"


def disabled_features(ours: tuple[str, ...]) -> tuple[str, ...]:
    """Playwright's features and ours, once each: one --disable-features that keeps both."""
    return tuple(dict.fromkeys([*PLAYWRIGHT_DISABLED_FEATURES, *ours]))


def ignored_defaults() -> list[str] | None:
    """Playwright's own copies of the quieting switches, dropped only in the bench's "before"
    (its --disable-features is overridden by ours, the last one); None: all of its defaults."""
    return None if quiet() else list(QUIET_SWITCHES)


@dataclass
class Load(BrowserLoad):
    """One page load in one fresh Chromium (Playwright, DevTools)."""

    def prepare(self) -> dict[str, str]:
        """The fresh HOME (an NSS database trusting the CA), profile and TMPDIR; the
        browser's environment."""
        self.make_tmp()
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
        env = browser_env(home, tmpdir, self.token, self.args.keylog)
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
                    ignore_default_args=ignored_defaults(),
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
                if getattr(args, "workload", "web") == "cloud":
                    self.fetch_file(page)
                    return self.row
                self.settle()  # the browser's start-up work before the timed window
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
                    or judge(args.protocol, self.page_url(), perf, self.net, frozenset(page_origins(args)))
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

    def fetch_file(self, page: Any) -> None:
        """--workload cloud: the file fetched by fetch() in a blank page of its origin, its
        body read to the end and dropped (cloud_fetch.py says why this way). The blank page is
        answered by the browser (a route removed before the fetch: the file's request is never
        intercepted), so the file's fetch opens the only connection to the server."""
        args = self.args
        blank = blank_url(args.url)
        page.route(blank, lambda route: route.fulfill(status=200, content_type="text/html", body=BLANK_HTML))
        page.goto(blank, wait_until="load", timeout=args.timeout * 1000)
        page.unroute(blank)
        self.settle()  # the browser's and the blank page's start-up work before the transfer
        pids = marked_pids(self.token)
        cpu0, snap0 = process_cpu_s(pids), cpu_snapshot(pids)
        threading.Thread(target=self.sample_cpu, daemon=True).start()
        try:
            result = page.evaluate(FETCH_JS, [args.url, args.timeout * 1000])
        finally:
            pids = marked_pids(self.token)
            cpu1, snap1 = process_cpu_s(pids), cpu_snapshot(pids)
            self._sampling.set()
            self.row["cpu"] = self.cpu_samples
        net = file_only(self.net, args.url)
        drop_favicon({}, net)
        response: dict[str, Any] = next(iter(net["responses"]), {})
        if response.get("remoteIPAddress"):  # the connection is still open: its local end
            ends = local_endpoints(pids, response["remoteIPAddress"], int(response.get("remotePort") or 0))
            if len(ends) == 1:
                self.row["local_ip"], self.row["local_port"] = ends[0]
        if args.verbose:
            print(f"browser_perf: fetch {json.dumps(result)}; DevTools {json.dumps(net)}", file=sys.stderr)
        build_cloud_row(self.row, result, net)
        cpu_ms = (cpu1 - cpu0) * 1000.0
        self.row["browser_cpu_ms"] = round(cpu_ms, 3)
        if self.row["download_time_ms"]:  # of one core, over the download (shown, not the flag)
            self.row["browser_cpu_pct"] = round(100.0 * cpu_ms / self.row["download_time_ms"], 1)
        self.row.update(cpu_limits(snap0, snap1))
        error = cloud_error(args.protocol, args.url, result, net)
        if re.search(r"ERR_QUIC_(PROTOCOL_ERROR|HANDSHAKE_FAILED)", error) and not net["responses"]:
            error = self.diagnose_quic(error)
        self.row["error"] = error

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
        page_load = getattr(self.args, "workload", "web") != "cloud"  # a fetch has no page row
        if page_load and page is not None and self.net["document"] is not None:
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


def unsupported(args: argparse.Namespace) -> str:
    """Why this valid request cannot be done in Chromium ("" when it can)."""
    return ""


def new_load(args: argparse.Namespace, rep: int, vers: dict[str, str]) -> Load:
    """A load with its row's identity filled in (the version the browser reports replaces it)."""
    load = Load(args, rep)
    load.row = empty_row(args.protocol, args.url, rep)
    load.row.update(
        tool_version=vers["chromium"],
        library=f"{PACKAGES[args.browser]} {vers['chromium']}; playwright {vers['playwright']}",
        browser=args.browser,
    )
    return load


def version_line() -> tuple[str, bool]:
    """browser_perf --version's part for Chromium, and whether all of it is there."""
    import playwright.sync_api  # noqa: F401 - the check: Playwright imports

    found = {name: versions(name) for name in BROWSERS}
    listed = "; ".join(f"{PACKAGES[b]} {v['chromium'] or 'missing'}" for b, v in found.items())
    text = f"{listed}; playwright {found[DEFAULT_BROWSER]['playwright']}"
    return text, all(v["chromium"] and v["playwright"] for v in found.values())


def versions(browser: str) -> dict[str, str]:
    executable = BROWSERS[browser]
    out = {"chromium": "", "playwright": ""}
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        out["playwright"] = version("playwright")
    with contextlib.suppress(Exception):
        text = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=20).stdout
        m = re.search(r"\d+\.\d+\.\d+\.\d+", text)
        out["chromium"] = m.group(0) if m else text.strip()
    return out
