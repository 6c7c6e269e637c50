"""Page loads in headless Chromium, and Firefox (clients/browser) on the india path (prints
figures; asserts nothing).

Per browser (before: the full Chromium, `--browser chromium-full`; after: Debian's
chromium-headless-shell with the lean switches, the default) and protocol (QUIC, TLS 1.3, TLS
1.2 over TCP), N loads of one landing page against one server, each in a fresh browser: the
page load time and FCP (median and IQR), the document's connection time ÷ the calibrated RTT
against theory (QUIC 1, TLS 1.3 2, TLS 1.2 2: Chromium always uses False Start), the browser's
own time in the handshake (connection time − n·RTT), client CPU per load and how many loads
were CPU-bound (browser_perf's flag: the allowed CPUs < 10 % idle, a thread busy >= 90 % of
the load, or a throttling quota), and the network behaviour both browsers must share: the
protocol of every resource, connections per load, the TLS group and the page's bytes; and where
each load's CPU went, by process kind and busiest thread (the rows' cpu_by_process and
cpu_top_threads). Then, from captures on the client's emulated interface (decrypted with the
browser's key log, checked by wirecheck.py), the same endpoint time from the wire: handshake
done − the first packet − n × the first RTT on the wire, and the browser's time from
connectStart to its first packet.
Markdown tables on stdout. `--browsers ... firefox` adds Debian's firefox-esr (the tool
`firefox`, clients/firefox/README.md): its TLS 1.2 theory is 3 RTT (no False Start), and BiDi
gives it no TLS group (empty) and no connection ids (sockets at the load event).

    .venv/bin/python bench/browser_bench.py [--reps 20] [--captures 5] [--page pages/media]
                                            [--browsers chromium-full headless-shell firefox]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from quicbed.clients.capture_shell import wirecheck
from quicbed.clients.tools import TOOLS, tool_argv
from quicbed.paths import CACHE
from quicbed.servers.testbed import served_testbed
from quicbed.topology.calibrate import check_rtt
from quicbed.topology.net import server_address
from quicbed.topology.profiles import load_profile
from quicbed.workloads import ensure_content

PROTOCOLS = {"quic": 1, "tls1.3": 2, "tls1.2": 2}  # fresh connection's RTTs in Chromium
THEORY = {("firefox", "tls1.2"): 3}  # Firefox: no TLS False Start (clients/firefox/README.md)
BROWSERS = ("chromium-full", "headless-shell")  # before, after (browser_perf --browser)
# What a browser cannot pin (browser_perf's CANNOT_PIN): a row saying so, no loads.
CANNOT = {("headless-shell", "tls1.2"): "refused (exit 3): the headless shell ignores --ssl-version-max"}


def argv(address: str, page: str, protocol: str, reps: int, browser: str) -> list[str]:
    """browser_perf as the tool `firefox`, or `chromium` with that --browser."""
    tool, options = ("firefox", {}) if browser == "firefox" else ("chromium", {"browser": browser})
    return tool_argv(
        tool, f"web/{page}/index.html", address, options={"protocol": protocol, **options}, repetitions=reps
    )


def loads(tb, command: list[str], reps: int) -> list[dict]:
    proc = tb.client.exec(command, timeout=60 + 20 * reps)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    bad = [r["error"] for r in rows if r["error"]]
    if bad:
        print(f"<!-- {len(bad)} error rows left out: {bad[:3]} -->")
    return [r for r in rows if not r["error"]]


def captured(tb, command: list[str]) -> dict | None:
    """One load under tcpdump on the client's emulated interface, checked by wirecheck.py
    as the path tests check it (clients/capture_shell.py; a browser's TLS 1.2 handshake
    ends with its own Finished: False Start): the row and the wire events."""
    stem = "/tmp/bb"
    shell = wirecheck(" ".join(command), "client-eth0", stem, false_start=True) + f"; cat {stem}.json"
    out = tb.client.exec(["sh", "-c", shell], timeout=120).stdout.strip().splitlines()
    try:
        check, row = json.loads(out[-2]), json.loads(out[-1])
    except (IndexError, json.JSONDecodeError):
        return None
    return None if row["error"] else {"row": row, "wire": check}


@contextlib.contextmanager
def browser_testbed(profile_name: str, server: str, backend: str = "auto") -> Iterator[tuple[Any, str]]:
    """The profile's path with `server` serving the web content and the browser image as the
    client container: (testbed, the server's address). bench/browser_quiet_bench.py uses it too."""
    root = ensure_content(CACHE / "content", {"web"})
    with (
        tempfile.TemporaryDirectory() as tmp,
        served_testbed(
            load_profile(profile_name),
            [server],
            log_root=Path(tmp) / "logs",
            pki_dir=Path(tmp) / "pki",
            content_dir=root,
            start=True,
            backend=backend,
            client_image=TOOLS["chromium"].image,  # the browser image, as the client container
        ) as (tb, hosts),
    ):
        yield tb, server_address(tb.servers.index(hosts[server]))


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def cell(values: list[float], spec: str = ".0f") -> str:
    if not values:
        return "-"
    if len(values) < 2:
        return format(values[0], spec)
    q1, q2, q3 = quartiles(values)
    return f"{q2:{spec}} [{q1:{spec}}–{q3:{spec}}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20, help="loads per protocol")
    parser.add_argument("--captures", type=int, default=5, help="captured loads per protocol")
    parser.add_argument("--page", default="pages/media", help="web object (a landing page)")
    parser.add_argument("--server", default="nginx")
    parser.add_argument("--profile", default="india")
    parser.add_argument(
        "--backend", default="auto", help="auto, or a link backend by name (quicbed doctor lists them)"
    )
    parser.add_argument("--browsers", nargs="+", default=list(BROWSERS), help="before, then after")
    args = parser.parse_args()
    with browser_testbed(args.profile, args.server, args.backend) as (tb, address):
        calibration = check_rtt(tb, 30)
        rtt, configured_ms = calibration.measured, load_profile(args.profile).rtt_ms
        results = {}
        for protocol in PROTOCOLS:  # the browsers alternate per protocol: the same host load
            for browser in args.browsers:
                if (browser, protocol) in CANNOT:
                    continue
                rows = loads(tb, argv(address, args.page, protocol, args.reps, browser), args.reps)
                wires = [
                    c
                    for c in (
                        captured(tb, argv(address, args.page, protocol, 1, browser))
                        for _ in range(args.captures)
                    )
                    if c
                ]
                results[browser, protocol] = rows, wires
        print(
            f"\n{args.profile} via {tb.backend.name}: configured RTT {configured_ms:g} ms, "
            f"calibrated {rtt:.2f} ms ({'passed' if calibration.passed else 'FAILED'}); "
            f"{args.server}, web/{args.page}, {args.reps} loads per browser and protocol, each in "
            f"a fresh browser; {args.captures} more captured. Median [IQR].\n"
        )
        print(
            "| browser | protocol | loads | page load ms | FCP ms | connection ÷ RTT (theory) | "
            "endpoint ms (conn − n·RTT) | endpoint ms, wire | before 1st packet ms | "
            "browser CPU s/load | CPU % of a core | host idle % | busiest thread % | CPU-bound |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (browser, protocol), (rows, wires) in results.items():
            n = THEORY.get((browser, protocol), PROTOCOLS[protocol])
            # Only captures whose start the wire check found (Firefox's came out without one).
            wires = [
                w for w in wires if (w["wire"].get("events", {}).get("start") or {}).get("wire") is not None
            ]
            wire_endpoint = [
                (w["row"]["t_handshake"] - w["wire"]["events"]["start"]["wire"]) * 1e3
                - n * w["wire"]["wire_first_rtt_ms"]
                for w in wires
            ]
            before = [
                (w["wire"]["events"]["start"]["wire"] - w["row"]["t_handshake"]) * 1e3
                + w["row"]["connection_time_ms"]
                for w in wires
            ]
            print(
                f"| {browser} | {protocol} | {len(rows)} "
                f"| {cell([r['page_load_time_ms'] for r in rows])} "
                f"| {cell([r['fcp_ms'] for r in rows if r['fcp_ms'] is not None])} "
                f"| {cell([r['connection_time_ms'] / rtt for r in rows], '.2f')} ({n}) "
                f"| {cell([r['connection_time_ms'] - n * rtt for r in rows], '.1f')} "
                f"| {cell(wire_endpoint, '.1f')} | {cell(before, '.1f')} "
                f"| {cell([r['browser_cpu_ms'] / 1e3 for r in rows], '.2f')} "
                f"| {cell([r['browser_cpu_pct'] for r in rows])} "
                f"| {cell([r['host_idle_pct'] for r in rows if r['host_idle_pct'] is not None])} "
                f"| {cell([r['busiest_thread_pct'] for r in rows])} "
                f"| {sum(bool(r['cpu_bound']) for r in rows)}/{len(rows)} |"
            )
        for browser, protocol in CANNOT:
            if browser in args.browsers:
                print(f"| {browser} | {protocol} | 0 | {CANNOT[browser, protocol]} |" + " |" * 10)
        print("\nThe network behaviour (every distinct value over the loads; the browsers must agree):\n")
        print(
            "| protocol | browser | resource protocols | connections | TLS group | bytes "
            "| conn ÷ RTT, rounded |"
        )
        print("|---|---|---|---|---|---|---|")
        for (browser, protocol), (rows, _) in sorted(results.items(), key=lambda kv: kv[0][1]):
            print(f"| {protocol} | {browser} | " + " | ".join(network_signature(rows, rtt)) + " |")
        print(
            "\nWhere a load's CPU went (ms on a CPU over the load, by the threads' schedstat; the "
            "median over loads, a kind or thread absent from a load counting 0):\n"
        )
        print("| browser | protocol | by process kind | busiest threads (thread @ process) |")
        print("|---|---|---|---|")
        for (browser, protocol), (rows, _) in results.items():
            print(f"| {browser} | {protocol} | {cpu_by_kind(rows)} | {busiest_threads(rows)} |")
    return 0


def cpu_by_kind(rows: list[dict], top: int = 5) -> str:
    kinds = {k for r in rows for k in r.get("cpu_by_process") or {}}
    medians = {k: statistics.median((r.get("cpu_by_process") or {}).get(k, 0.0) for r in rows) for k in kinds}
    ordered = sorted(medians.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{k} {v:.0f}" for k, v in ordered) or "-"


def busiest_threads(rows: list[dict], top: int = 5) -> str:
    times: dict[str, list[float]] = {}
    for r in rows:
        for name, kind, ms in r.get("cpu_top_threads") or []:
            times.setdefault(f"{name} @ {kind}", []).append(ms)
    medians = {k: statistics.median(v + [0.0] * (len(rows) - len(v))) for k, v in times.items()}
    ordered = sorted(medians.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{k} {v:.0f}" for k, v in ordered) or "-"


def network_signature(rows: list[dict], rtt: float) -> list[str]:
    """What must not change with the browser: each column's distinct values over the loads."""

    def distinct(values) -> str:
        return ", ".join(sorted({str(v) for v in values})) or "-"

    return [
        distinct(json.dumps(r["resource_protocols"], sort_keys=True) for r in rows),
        distinct(r["connections"] for r in rows),
        distinct(r["tls_group"] for r in rows),
        distinct(r["bytes"] for r in rows),
        distinct(round(r["connection_time_ms"] / rtt) for r in rows),
    ]


if __name__ == "__main__":
    sys.exit(main())
