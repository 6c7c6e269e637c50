"""The testbed's own cost on this machine (prints figures; asserts nothing).

1. Path bring-up (containers, router, links, both servers' containers) and teardown, n times.
2. One calibration of the india path.
3. A quick experiment (experiments/ci/handshake.yaml) through the runner: per tool, the median
   per-trial overhead (the runner's wall time − the tool's transfer time) and where the
   condition's wall time went (analysis/overhead.py, as the run summary prints it).
4. With --runs RUN_ID...: finished runs (e.g. a quick `quicbed reproduce`): their wall time
   against the sum of their transfers plus calibrations.

    .venv/bin/python bench/overhead_bench.py [--reps 3] [--runs RUN_ID ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from rich.console import Console

from quicbed.analysis.overhead import account, summary_lines
from quicbed.experiments.executor import TestbedExecutor
from quicbed.experiments.options import PathOptions
from quicbed.experiments.runner import run_experiment
from quicbed.experiments.schema import load_experiment
from quicbed.paths import CACHE, REPO, RESULTS, STATE
from quicbed.servers.testbed import served_testbed
from quicbed.topology.calibrate import calibrate
from quicbed.topology.profiles import load_profile

QUICK = REPO / "experiments" / "ci" / "handshake.yaml"


def bringup(reps: int, backend: str) -> tuple[list[float], list[float], float]:
    ups, downs, calibration = [], [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(reps):
            t0 = time.monotonic()
            with served_testbed(
                load_profile("india"),
                ["caddy", "nginx"],
                log_root=Path(tmp),
                pki_dir=STATE / "pki" / "overhead-bench",
                content_dir=CACHE / "content",
                backend=backend,
            ) as (tb, _):
                ups.append(time.monotonic() - t0)
                if i == 0:
                    t1 = time.monotonic()
                    calibrate(tb)
                    calibration = time.monotonic() - t1
                t2 = time.monotonic()
            downs.append(time.monotonic() - t2)
    return ups, downs, calibration


def quick_run(backend: str) -> tuple[list[dict], dict]:
    exp = load_experiment(QUICK)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        console = Console(stderr=True, quiet=True)
        run_experiment(
            exp,
            TestbedExecutor(exp, run_dir, PathOptions(backend=backend), console=console),
            run_dir,
            progress=False,
            console=console,
        )
        rows = [
            json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines() if line.strip()
        ]
        return rows, json.loads((run_dir / "manifest.json").read_text())


def per_tool(rows: list[dict]) -> None:
    print("\n| client | trials | median wall − transfer (s) | max (s) | median transfer (s) |")
    print("|---|---|---|---|---|")
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(str(row.get("client")), []).append(row)
    for client, group in groups.items():
        over = [r["wall_s"] - r["transfer_s"] for r in group if r.get("transfer_s") is not None]
        transfer = [r["transfer_s"] for r in group if r.get("transfer_s") is not None]
        if over:
            print(
                f"| {client} | {len(group)} | {statistics.median(over):.3f} | {max(over):.3f} "
                f"| {statistics.median(transfer):.3f} |"
            )


def finished_runs(run_ids: list[str]) -> None:
    print(
        "\n| run | wall (s) | Σ transfers (s) | Σ calibrations (s) | wall ÷ (transfers + " "calibrations) |"
    )
    print("|---|---|---|---|---|")
    for run_id in run_ids:
        run_dir = Path(run_id) if Path(run_id).is_dir() else RESULTS / run_id
        manifest = json.loads((run_dir / "manifest.json").read_text())
        rows = [
            json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines() if line.strip()
        ]
        accounts = account(rows, manifest)
        wall = sum(
            _seconds(s["started_at"], s["ended_at"]) for s in manifest["sessions"] if s.get("ended_at")
        )
        transfers = sum(a.transfer_s for a in accounts)
        calibrations = sum(a.setup.get("calibration_s", 0.0) for a in accounts)
        base = transfers + calibrations
        print(
            f"| {run_dir.name} | {wall:.0f} | {transfers:.0f} | {calibrations:.0f} | " f"{wall / base:.2f} |"
            if base
            else f"| {run_dir.name} | {wall:.0f} | - | - | - |"
        )


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="bring-ups to time")
    parser.add_argument("--runs", nargs="*", default=[], help="finished runs to account for")
    parser.add_argument(
        "--backend", default="auto", help="auto, or a link backend by name (quicbed doctor lists them)"
    )
    args = parser.parse_args()
    ups, downs, calibration = bringup(args.reps, args.backend)
    print("| step | median (s) | min | max |\n|---|---|---|---|")
    for name, values in (
        ("bring-up (client, router, caddy + nginx)", ups),
        ("teardown", downs),
        ("calibration (india)", [calibration]),
    ):
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | " f"{max(values):.2f} |")
    rows, manifest = quick_run(args.backend)
    per_tool(rows)
    print()
    for line in summary_lines(account(rows, manifest)):
        print(line)
    if args.runs:
        finished_runs(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
