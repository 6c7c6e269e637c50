"""A replayed page on an emulated path: QUIC's page-load gain over TLS 1.3 on a page of many
origins against the same page from one origin (prints figures; asserts nothing).

The shipped median desktop page (workloads/pages/median-desktop.har: 71 requests, 20 origins)
is served by the replay server (stacks/quicgo, quicgo_replay), each origin at its own address
with its own certificate (servers/testbed.py). Its one-origin twin (workloads/replay.py
one_origin: the same responses, all from the landing origin) is served the same way. Per
browser, N loads of each page over QUIC and over TLS 1.3 (the protocols and browsers
interleaved; the pages one after the other, each on its own path), each in a fresh browser:
page-load time (median, 95 % bootstrap CI), QUIC's gain (TLS 1.3's median - QUIC's) and the
many-origin gain less the one-origin gain with its CI; per load the connections opened, the
origins, the CPU-bound share and where the browser's CPU went (cpu_by_process, medians).

    .venv/bin/python bench/replay_page_bench.py [--reps 10] [--profile india]
                                                [--browsers chromium firefox]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from quicbed.analysis.stats import bootstrap_distribution, interval, median_ci, quantile_stat
from quicbed.clients.tools import TOOLS, page_argv
from quicbed.paths import REPO
from quicbed.servers.testbed import ReplaySite, served_testbed
from quicbed.topology.calibrate import check_rtt
from quicbed.topology.profiles import load_profile
from quicbed.workloads.har import Page, load_har, one_origin
from quicbed.workloads.replay import ReplayPlan, plan_replay, site_address, write_site

PAGE = REPO / "workloads" / "pages" / "median-desktop.har"
PROTOCOLS = ("quic", "tls1.3")
SERVER = "quicgo"


def argv(tool: str, page: Page, plan: ReplayPlan, protocol: str) -> list[str]:
    url = f"{page.landing.origin}{page.landing.path}"
    return page_argv(tool, url, plan.resolves(), options={"protocol": protocol}, timeout_s=60)


def load(tb, command: list[str]) -> dict:
    proc = tb.client.exec(command, timeout=150)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(rows) != 1 or rows[0]["error"]:
        sys.exit(f"a load failed: {rows[-1]['error'] if rows else proc.stderr[-800:]}")
    return rows[0]


def gain_ci(tls: list[float], quic: list[float]) -> tuple[float, float, float]:
    rng = np.random.default_rng(1)
    median = quantile_stat(0.5)
    dist = bootstrap_distribution(np.array(tls), median, 4000, rng) - bootstrap_distribution(
        np.array(quic), median, 4000, rng
    )
    return float(np.median(tls) - np.median(quic)), *interval(dist, 0.95)


def gain_difference_ci(multi: dict[str, list[float]], single: dict[str, list[float]]) -> tuple[float, ...]:
    """(many-origin gain - one-origin gain), with a CI from resampling the four sets apart."""
    rng = np.random.default_rng(2)
    median = quantile_stat(0.5)

    def boot(values: list[float]) -> np.ndarray:
        return bootstrap_distribution(np.array(values), median, 4000, rng)

    dist = (boot(multi["tls1.3"]) - boot(multi["quic"])) - (boot(single["tls1.3"]) - boot(single["quic"]))
    value = (np.median(multi["tls1.3"]) - np.median(multi["quic"])) - (
        np.median(single["tls1.3"]) - np.median(single["quic"])
    )
    return float(value), *interval(dist, 0.95)


def main(args_list: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=10, help="loads per page, protocol and browser")
    parser.add_argument("--profile", default="india")
    parser.add_argument("--browsers", nargs="+", default=["chromium"], choices=["chromium", "firefox"])
    args = parser.parse_args(args_list)
    many = load_har(PAGE)
    single = one_origin(many)
    pages = {"many origins": (many, plan_replay(many)), "one origin": (single, plan_replay(single))}
    rows: dict[tuple[str, str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="replay-page-bench-") as tmp:
        for label, (page, plan) in pages.items():
            site = Path(tmp) / label.replace(" ", "-")
            write_site(plan, page, site / "site")
            with served_testbed(
                load_profile(args.profile),
                [SERVER],
                log_root=site / "logs",
                pki_dir=site / "pki",
                content_dir=site / "site",
                client_image=TOOLS["chromium"].image,
                start=True,
                replay=ReplaySite(site / "site", plan.hosts()),
            ) as (tb, _):
                rtt = check_rtt(tb, 20)
                print(f"{label}: {len(plan.sites)} origins from {site_address(0)}; {rtt}", file=sys.stderr)
                for rep in range(args.reps):
                    for browser in args.browsers:
                        for protocol in PROTOCOLS:
                            row = load(tb, argv(browser, page, plan, protocol))
                            rows.setdefault((label, browser, protocol), []).append(row)
                    print(f"  {label}: {rep + 1}/{args.reps}", file=sys.stderr)
    report(rows, args)
    return 0


def report(rows: dict[tuple[str, str, str], list[dict]], args: argparse.Namespace) -> None:
    print(f"## Page loads of {PAGE.name}, {args.profile}, {args.reps} loads per cell\n")
    print("| page | browser | protocol | load ms (median [95 % CI]) | connections | origins | bytes "
          "| CPU-bound | CPU ms by process (median) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for (label, browser, protocol), cell in rows.items():
        plt = median_ci([r["page_load_time_ms"] for r in cell])
        conns = statistics.median(r["connections"] for r in cell)
        bound = sum(bool(r["cpu_bound"]) for r in cell)
        kinds = sorted({k for r in cell for k in r.get("cpu_by_process") or {}})
        cpu = {k: statistics.median((r.get("cpu_by_process") or {}).get(k, 0.0) for r in cell) for k in kinds}
        by_process = ", ".join(f"{k} {v:.0f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])[:4])
        print(
            f"| {label} | {browser} | {protocol} | {plt.value:.0f} [{plt.lo:.0f}, {plt.hi:.0f}] | {conns:g} "
            f"| {cell[0]['origins']} | {cell[0]['bytes']} | {bound}/{len(cell)} | {by_process} |"
        )
    print("\n## QUIC's gain over TLS 1.3 (median load time, TLS 1.3 - QUIC)\n")
    print("| browser | many origins ms [CI] | one origin ms [CI] | difference ms [CI] |")
    print("|---|---|---|---|")
    for browser in args.browsers:
        times = {
            label: {p: [r["page_load_time_ms"] for r in rows[(label, browser, p)]] for p in PROTOCOLS}
            for label in ("many origins", "one origin")
        }
        gains = [gain_ci(t["tls1.3"], t["quic"]) for t in times.values()]
        diff = gain_difference_ci(times["many origins"], times["one origin"])
        cells = " | ".join(f"{g:.0f} [{lo:.0f}, {hi:.0f}]" for g, lo, hi in (*gains, diff))
        print(f"| {browser} | {cells} |")


if __name__ == "__main__":
    raise SystemExit(main())
