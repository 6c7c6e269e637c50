"""What capture costs a trial (prints figures; asserts nothing).

Two runs of the same small experiment on the same path, one with `--capture qlog,pcap,keys`
and one without (each its own bring-up and calibration, capture first): connection time,
TTFB and download time per client, medians with bootstrap 95 % CIs (analysis/stats.py). The
goal: the medians agree within their CIs. Then, with capture, the trial's wall time with and
without the capture's own time (capture_s: tcpdump started and seen listening, stopped and
flushed, the server's qlog collected) and the disk a trial's files take.

    flock /tmp/quicbed-path.lock .venv/bin/python bench/capture_bench.py [--reps 10] [--object 1MB]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from quicbed import rowschema
from quicbed.analysis.stats import Estimate, median_ci

EXPERIMENT = """\
name: capture-bench
profiles: [{profile}]
servers: [caddy]
clients:
  - {{tool: tls_perf, tls: "1.3", http: "2"}}
  - {{tool: quic_perf, backend: [libcurl, ngtcp2]}}
workload: {{kind: cloud, files: [{obj}]}}
repetitions: {reps}
"""
METRICS = ("connection_time_ms", "ttfb_ms", "download_time_ms")


def run(file: Path, results: Path, capture: str) -> list[dict]:
    env = {**os.environ, "QUICBED_RESULTS": str(results)}
    argv = [sys.executable, "-m", "quicbed.cli", "run", str(file), "--no-progress", "--capture", capture]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"quicbed run failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    return [json.loads(line) for line in (run_dir / rowschema.ROWS_FILE).read_text().splitlines()]


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
    print("\n| client | wall_s (median) | capture_s (median) | wall + capture | disk per trial (KiB) |")
    print("|---|---|---|---|---|")
    for client in sorted({r["client"] for r in captured}):
        rows = [r for r in captured if r["client"] == client]
        wall = statistics.median(r["wall_s"] for r in rows)
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
    with tempfile.TemporaryDirectory(prefix="capture-bench-") as tmp:
        file = Path(tmp) / "capture-bench.yaml"
        file.write_text(EXPERIMENT.format(profile=args.profile, obj=args.object, reps=args.reps))
        with_dir, without_dir = Path(tmp) / "with", Path(tmp) / "without"
        captured = run(file, with_dir, "qlog,pcap,keys")
        plain = run(file, without_dir, "none")
        print(f"{args.profile}, caddy, cloud {args.object}, {args.reps} trials per client and arm\n")
        timing_table(plain, captured)
        (run_dir,) = [p for p in with_dir.iterdir() if p.is_dir()]
        cost_table(captured, run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
