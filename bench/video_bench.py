"""The quick video sweep on this machine (prints figures; asserts nothing).

Runs `quicbed run experiments/paper/video.yaml --quick` (or reads a finished run with --run)
and prints:
1. its wall time and where it went (bring-up, calibration, server start, playback, tool
   start/exit: analysis/overhead.py), against the media time played;
2. how many trials were CPU-bound (the browser, the client's or a server's container at or
   above the CPU_BOUND share of a core), per protocol and loss rate, with the browser's CPU;
3. the streaming table the report shows (startup, stalls, switches, lowest rendition) per
   profile, loss rate and protocol: medians over the sessions, n per cell.

    .venv/bin/python bench/video_bench.py [--run RUN_ID] [--file experiments/paper/video.yaml]

What the testbed does about CPU-bound playback: nothing is dropped. Every row carries
`cpu_bound` and `browser_cpu_pct`, the report lists such trials under "CPU-bound trials (kept,
but suspect)", and Chromium decodes in software (`--disable-gpu`), as a headless browser on a
server would; the ladder tops out at 720p, which one core decodes in real time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from quicbed.analysis.load import load_runs, resolve_run_dir
from quicbed.analysis.overhead import account
from quicbed.experiments.store import load_rows
from quicbed.paths import REPO, RESULTS
from quicbed.rowschema import MANIFEST_FILE

VIDEO = REPO / "experiments" / "paper" / "video.yaml"
QUICBED = REPO / ".venv" / "bin" / "quicbed"


def run_sweep(file: Path, backend: str) -> tuple[str, float]:
    """The quick sweep through the CLI, as a user runs it; its run id and wall time."""
    before = {p.name for p in RESULTS.glob("*")}
    t0 = time.monotonic()
    subprocess.run([str(QUICBED), "run", str(file), "--quick", "--backend", backend], check=False)
    wall = time.monotonic() - t0
    new = sorted({p.name for p in RESULTS.glob("*")} - before)
    if not new:
        sys.exit("video_bench: the run wrote no result directory")
    return new[-1], wall


def wall_time(run_dir: Path) -> float | None:
    """From the manifest's sessions (a resumed run counts its sessions' times, not the
    pause between them)."""
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text())
    spans = [(s.get("started_at"), s.get("ended_at")) for s in manifest.get("sessions", [])]
    total = 0.0
    for start, end in spans:
        if start and end:
            total += (pd.Timestamp(end) - pd.Timestamp(start)).total_seconds()
    return total or None


def where_it_went(run_dir: Path) -> None:
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text())
    accounts = account(load_rows(run_dir)[0], manifest)
    setup: dict[str, float] = {}
    for acc in accounts:
        for key, value in acc.setup.items():
            setup[key] = setup.get(key, 0.0) + value
    playback = sum(acc.transfer_s for acc in accounts)
    tools = sum(acc.tool_s for acc in accounts)
    runner = sum(acc.runner_s for acc in accounts)
    total = sum(acc.total_s for acc in accounts)
    print(
        f"conditions {len(accounts)}, trials {sum(a.trials for a in accounts)}; accounted "
        f"{total:.0f} s = "
        + " + ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.0f} s" for k, v in setup.items())
        + f" + playback {playback:.0f} s + tool start/exit {tools:.0f} s + runner {runner:.0f} s"
    )


def cpu_table(df: pd.DataFrame) -> None:
    rows = df[df["workload"] == "streaming"].copy()
    if rows.empty:
        print("no playback rows")
        return
    rows["loss_pct"] = rows["loss_pct"].fillna(0)
    print("\n| loss % | protocol | sessions | CPU-bound | browser CPU % of a core (median) |")
    print("|---|---|---|---|---|")
    for (loss, protocol), g in rows.groupby(["loss_pct", "protocol"]):
        bound = int(g["cpu_bound"].fillna(False).astype(bool).sum())
        cpu = pd.to_numeric(g.get("browser_cpu_pct"), errors="coerce").median()
        print(f"| {loss:g} | {protocol} | {len(g)} | {bound} | {cpu:.0f} |")
    share = rows["cpu_bound"].fillna(False).astype(bool).mean()
    print(f"\nCPU-bound share of playbacks: {share:.0%} ({int(share * len(rows))}/{len(rows)})")


def streaming_table(df: pd.DataFrame) -> None:
    rows = df[df["workload"] == "streaming"].copy()
    if rows.empty:
        return
    rows["loss_pct"] = rows["loss_pct"].fillna(0)
    print(
        "\n| profile | loss % | protocol | n | startup ms | stalls | stall time ms | "
        "switches | lowest | mean height |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (profile, loss, protocol), g in rows.groupby(["profile", "loss_pct", "protocol"], sort=False):
        med = {
            c: pd.to_numeric(g[c], errors="coerce").median()
            for c in ("startup_delay_ms", "stall_count", "stall_total_ms", "quality_switches", "mean_height")
        }
        lowest = min(g["lowest_quality"].dropna(), key=lambda q: int(str(q)[:-1]), default="-")
        print(
            f"| {profile} | {loss:g} | {protocol} | {len(g)} | {med['startup_delay_ms']:.0f} "
            f"| {med['stall_count']:g} | {med['stall_total_ms']:.0f} | "
            f"{med['quality_switches']:g} | {lowest} | {med['mean_height']:.0f} |"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", help="a finished run id or directory instead of a new sweep")
    p.add_argument("--file", type=Path, default=VIDEO)
    p.add_argument(
        "--backend", default="auto", help="auto, or a link backend by name (quicbed doctor lists them)"
    )
    args = p.parse_args()
    measured = None
    run = args.run
    if run is None:
        run, measured = run_sweep(args.file, args.backend)
    run_dir = resolve_run_dir(run)
    df, _ = load_runs([str(run_dir)])
    wall = measured or wall_time(run_dir)
    played = pd.to_numeric(df.get("played_s"), errors="coerce").sum()
    print(
        f"run {run_dir.name}: wall {wall / 60:.1f} min" if wall else f"run {run_dir.name}",
        f"for {played / 60:.1f} min of media played; failed trials " f"{int(df['failed'].sum())}/{len(df)}",
    )
    where_it_went(run_dir)
    ok = df[~df["failed"]]
    cpu_table(ok)
    streaming_table(ok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
