"""The browsers' background work, quiet against loud (issue 63, decision 2; prints figures,
asserts nothing).

Per path (india and germany by default), browser (Chromium, Firefox) and arm, N loads of one
landing page in a fresh browser each, the arms and browsers interleaved load by load:
- quiet (after): the launch every run uses, the quieting switches (Chromium's QUIET_SWITCHES and
  QUIET_FEATURES, merged into Playwright's --disable-features) or prefs (Firefox's QUIET_PREFS);
- loud (before): QUICBED_BROWSER_QUIET=0, the same browser without them (Chromium also without
  Playwright's copies of them; Firefox also without the remote agent's recommended prefs).
Per cell: the browser's CPU over the timed load (browser_cpu_ms: every browser process, just
before navigation to the load event), the CPU-bound share (the rows' cpu_bound), the threads'
run-queue wait (cpu_wait_ms), the host's idle share, the page-load time, and the packets on the
client's emulated interface over the browser's whole life (start to exit: background traffic
would show there, whichever host it named); where the load's CPU went (process kind, busiest
threads); then quiet − loud with a 95 % bootstrap CI. The header gives the host's CPU steal
over the bench: timings under steal are not the browser's.

    .venv/bin/python bench/browser_quiet_bench.py [--reps 10] [--profiles india germany]
        [--browsers chromium firefox] [--protocol quic] [--page pages/news] [--compare flags]

--compare settle: both arms quiet, navigating at once (--settle 0) against after the wait for a
quiet browser (the drivers' default, clients/browser/proc_watch.py settle_until_quiet).

Run it under the path lock (flock /tmp/quicbed-path.lock ...); the browser image must hold the
drivers as edited (images/build.sh browser).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time

from browser_bench import browser_testbed, busiest_threads, cell, cpu_by_kind  # beside this file

from quicbed.analysis.stats import median_diff_ci
from quicbed.clients.tools import tool_argv
from quicbed.hostload import cpu_jiffies, steal_share
from quicbed.topology.calibrate import check_rtt

# arm -> (QUICBED_BROWSER_QUIET of the clients/browser drivers, --settle ms; None: its default,
# wait until the fresh browser is quiet, capped).
ARMS: dict[str, tuple[str, int | None]] = {"loud": ("0", 0), "quiet": ("1", 0), "settled": ("1", None)}
# --compare -> (before, after): the quieting flags, or the wait for a quiet browser (both quiet).
COMPARE = {"flags": ("loud", "quiet"), "settle": ("quiet", "settled")}
INTERFACE = "client-eth0"  # the client's end of the emulated link
Cell = tuple[str, str, str]  # (profile, browser, arm)


def packets(dev: str) -> int:
    """Packets received + sent on INTERFACE, from one /proc/net/dev line."""
    fields = dev.split(":", 1)[1].split()
    return int(fields[1]) + int(fields[9])


def one_load(tb, command: list[str], arm: str) -> dict | None:
    """One load in the arm's browser: its row, with the packets of the browser's whole life."""
    dev = f"grep '{INTERFACE}:' /proc/net/dev"
    quiet, settle = ARMS[arm]
    command = command if settle is None else [*command, "--settle", str(settle)]
    shell = f"{dev}; QUICBED_BROWSER_QUIET={quiet} {shlex.join(command)}; {dev}"
    out = tb.client.exec(["sh", "-c", shell], timeout=150).stdout.splitlines()
    devs = [line for line in out if f"{INTERFACE}:" in line]
    rows = [json.loads(line) for line in out if line.startswith("{")]
    if len(devs) != 2 or len(rows) != 1:
        print(f"  {arm}: no row ({out[-3:]})", file=sys.stderr)
        return None
    row = rows[0]
    row["packets"] = packets(devs[1]) - packets(devs[0])
    if row["error"]:
        print(f"  {arm}: {row['error']}", file=sys.stderr)
        return None
    return row


def run_path(profile_name: str, args: argparse.Namespace, cells: dict[Cell, list[dict]]) -> str:
    """N loads per browser and arm on one path, interleaved; the path's line for the table."""
    with browser_testbed(profile_name, args.server) as (tb, address):
        calibration = check_rtt(tb, 20)
        path = f"{profile_name} via {tb.backend.name}, RTT {calibration.measured:.1f} ms"
        print(path, file=sys.stderr)
        for rep in range(args.reps):
            for browser in args.browsers:
                # The arm that goes first alternates: neither always follows the other browser.
                arms = COMPARE[args.compare]
                for arm in arms if rep % 2 else reversed(arms):
                    command = tool_argv(
                        browser, f"web/{args.page}/index.html", address, options={"protocol": args.protocol}
                    )
                    row = one_load(tb, command, arm)
                    if row is not None:
                        cells.setdefault((profile_name, browser, arm), []).append(row)
            print(f"  {profile_name}: {rep + 1}/{args.reps}", file=sys.stderr)
    return path


def report(cells: dict[Cell, list[dict]], paths: list[str], args: argparse.Namespace, steal: str) -> None:
    print(
        f"\n{'; '.join(paths)}. {args.server}, web/{args.page} over {args.protocol}, "
        f"{args.reps} loads per browser, path and arm, interleaved; {steal}. Median [IQR].\n"
    )
    print(
        "| path | browser | arm | loads | browser CPU ms/load | CPU-bound | run-queue wait ms "
        "| host idle % | page load ms | packets/browser (min–max) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (profile, browser, arm), rows in sorted(cells.items()):
        bound = sum(bool(r["cpu_bound"]) for r in rows)
        pkts = [r["packets"] for r in rows]
        print(
            f"| {profile} | {browser} | {arm} | {len(rows)} "
            f"| {cell([r['browser_cpu_ms'] for r in rows])} "
            f"| {bound}/{len(rows)} ({100 * bound / len(rows):.0f} %) "
            f"| {cell([r['cpu_wait_ms'] for r in rows if r['cpu_wait_ms'] is not None], '.1f')} "
            f"| {cell([r['host_idle_pct'] for r in rows if r['host_idle_pct'] is not None])} "
            f"| {cell([r['page_load_time_ms'] for r in rows])} "
            f"| {statistics.median(pkts):.0f} ({min(pkts)}–{max(pkts)}) |"
        )
    print("\nWhere the timed load's CPU went (ms on a CPU, schedstat; medians over loads, 0 where absent):\n")
    print("| path | browser | arm | by process kind | busiest threads (thread @ process) |")
    print("|---|---|---|---|---|")
    for (profile, browser, arm), rows in sorted(cells.items()):
        print(
            f"| {profile} | {browser} | {arm} | {cpu_by_kind(rows, top=4)} | {busiest_threads(rows, top=4)} |"
        )
    before, after = COMPARE[args.compare]
    print(f"\n{after} − {before}, median [95 % bootstrap CI]:\n")
    print("| path | browser | browser CPU ms/load | page load ms | packets/browser |")
    print("|---|---|---|---|---|")
    for profile in args.profiles:
        for browser in args.browsers:
            a = cells.get((profile, browser, after), [])
            b = cells.get((profile, browser, before), [])
            diffs = [
                median_diff_ci([r[key] for r in a], [r[key] for r in b])
                for key in ("browser_cpu_ms", "page_load_time_ms", "packets")
            ]
            text = " | ".join(f"{d.value:+.0f} [{d.lo:+.0f}, {d.hi:+.0f}]" for d in diffs)
            print(f"| {profile} | {browser} | {text} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=10, help="loads per browser, path and arm")
    parser.add_argument("--profiles", nargs="+", default=["india", "germany"])
    browsers = ["chromium", "firefox"]
    parser.add_argument("--browsers", nargs="+", default=browsers, choices=browsers)
    parser.add_argument("--protocol", default="quic", choices=["quic", "tls1.3", "tls1.2"])
    parser.add_argument("--page", default="pages/news", help="a landing page (the quick reproduce's)")
    parser.add_argument("--server", default="nginx")
    parser.add_argument(
        "--compare", default="flags", choices=list(COMPARE), help="flags: loud, quiet; settle: quiet, settled"
    )
    args = parser.parse_args(argv)
    cells: dict[Cell, list[dict]] = {}
    started, before = time.monotonic(), cpu_jiffies()
    paths = [run_path(profile, args, cells) for profile in args.profiles]
    share = steal_share(before, cpu_jiffies())
    steal = "steal " + ("unknown" if share is None else f"{100 * share:.2f} % of the busy CPU")
    print(f"bench: {time.monotonic() - started:.0f} s; {steal}", file=sys.stderr)
    report(cells, paths, args, f"{steal}, {time.monotonic() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
