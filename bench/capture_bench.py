"""What capture costs a trial (prints figures; asserts nothing).

One bring-up of the path, one calibration, one Caddy started with its qlog on; then every
trial twice in a row, with `capture: [qlog, pcap, keys]` and without, alternating which goes
first, so both arms see the same path and the same host load (other work on a 2-core host
moves a run's medians by a few ms). Connection time, TTFB and download time per client,
medians with bootstrap 95 % CIs (analysis/stats.py); the goal: the medians agree within their
CIs. The server writes qlog in both arms (it is started once); what it costs is in neither
difference. Then, with capture: the trial's wall time, the capture's own time (capture_s:
tcpdump started and seen listening, stopped and flushed, the server's qlog collected; not in
wall_s) and the disk a trial's files take.

    flock /tmp/quicbed-path.lock .venv/bin/python bench/capture_bench.py [--reps 10] [--object 1MB]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from quicbed.analysis.stats import Estimate, median_ci
from quicbed.experiments.executor import TestbedExecutor
from quicbed.experiments.matrix import conditions, trials
from quicbed.experiments.runner import TrialError, make_row
from quicbed.experiments.schema import parse_experiment

EXPERIMENT = """\
name: capture-bench
profiles: [{profile}]
servers: [caddy]
clients:
  - {{tool: tls_perf, tls: "1.3", http: "2"}}
  - {{tool: quic_perf, backend: [libcurl, ngtcp2]}}
workload: {{kind: cloud, files: [{obj}]}}
repetitions: {reps}
capture: [qlog, pcap, keys]
"""
METRICS = ("connection_time_ms", "ttfb_ms", "download_time_ms")
KINDS = ("keys", "pcap", "qlog")


def measure(text: str, run_dir: Path) -> tuple[list[dict], list[dict], float]:
    """Rows with and without capture, every trial once each, in alternating order."""
    exp = parse_experiment(text, "capture-bench.yaml")
    executor = TestbedExecutor(exp, run_dir, console=Console(stderr=True, quiet=True))
    (cond,) = conditions(exp)
    arms: dict[str, list[dict]] = {"with": [], "without": []}
    with executor.condition(cond) as calib:
        for i, trial in enumerate(trials(exp, cond)):
            for arm in ("with", "without") if i % 2 == 0 else ("without", "with"):
                exp.capture = KINDS if arm == "with" else ()
                executor.ensure_server(trial.server)
                try:
                    row = make_row(run_dir.name, trial, executor.run_trial(trial), {})
                except TrialError as exc:  # counted, not measured
                    print(f"{trial.trial_id} ({arm}): {exc.reason}", file=sys.stderr)
                    continue
                arms[arm].append(row)
    return arms["with"], arms["without"], float(calib["rtt_ms"])


def fmt(e: Estimate) -> str:
    return f"{e.value:.1f} [{e.lo:.1f}, {e.hi:.1f}]"


def overlap(a: Estimate, b: Estimate) -> bool:
    return a.lo <= b.hi and b.lo <= a.hi


def timing_table(plain: list[dict], captured: list[dict]) -> None:
    print("| client | metric | without capture: median [95 % CI] ms | with capture | agree |")
    print("|---|---|---|---|---|")
    for client in sorted({r["client"] for r in plain}):
        for metric in METRICS:
            a = median_ci([r[metric] for r in plain if r["client"] == client])
            b = median_ci([r[metric] for r in captured if r["client"] == client])
            print(f"| {client} | {metric[:-3]} | {fmt(a)} | {fmt(b)} | {'yes' if overlap(a, b) else 'NO'} |")


def cost_table(captured: list[dict], run_dir_of: Path) -> None:
    print("\n| client | tool_wall_s (median) | capture_s (median) | wall + capture | disk per trial (KiB) |")
    print("|---|---|---|---|---|")
    for client in sorted({r["client"] for r in captured}):
        rows = [r for r in captured if r["client"] == client]
        wall = statistics.median(r["tool_wall_s"] for r in rows)
        cap = statistics.median(r["capture_s"] for r in rows)
        disk = statistics.median(
            sum((run_dir_of / f).stat().st_size for f in r["capture_files"]) for r in rows
        )
        print(f"| {client} | {wall:.3f} | {cap:.3f} | {wall + cap:.3f} | {disk / 1024:.0f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--object", default="1MB", help="the cloud file each trial fetches")
    ap.add_argument("--profile", default="india")
    args = ap.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix="capture-bench-"))
    try:
        text = EXPERIMENT.format(profile=args.profile, obj=args.object, reps=args.reps)
        captured, plain, rtt = measure(text, run_dir)
        print(f"{args.profile} (calibrated RTT {rtt:.1f} ms), caddy, cloud {args.object}, ", end="")
        print(f"{args.reps} trials per client and arm, interleaved\n")
        timing_table(plain, captured)
        cost_table(captured, run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
