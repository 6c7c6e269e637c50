"""The quick video slice with one path and with two at once (prints figures; asserts nothing).

Runs `quicbed run experiments/paper/video.yaml --quick --parallel K` for K = 1 and K = 2 (or
reads finished runs with --runs K1_RUN K2_RUN) and prints, per K:
1. the wall time (and wall(K=2) / wall(K=1); the goal is <= 0.6), the host's busy cores
   over the run (from /proc/stat) and the trials' own CPU (client + server containers);
2. the medians of startup delay, stall time and quality (mean bitrate played) over the
   sessions, with their 95 % bootstrap CIs, and whether each K = 2 median lies within the K = 1
   CI and the other way round; per protocol too (n is small: one session per cell);
3. the trials marked cpu_bound, and the units --parallel measured again alone.

Hold the path lock for the whole run (two sweeps back to back):

    flock /tmp/quicbed-path.lock .venv/bin/python bench/parallel_bench.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from quicbed.analysis.stats import median_ci
from quicbed.experiments.store import load_rows, read_manifest
from quicbed.paths import REPO, RESULTS

VIDEO = REPO / "experiments" / "paper" / "video.yaml"
QUICBED = REPO / ".venv" / "bin" / "quicbed"
METRICS = {
    "startup delay ms": "startup_delay_ms",
    "stalls ms": "stall_total_ms",
    "quality kbit/s": "mean_bitrate_kbps",
}


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole host so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def run_sweep(file: Path, k: int) -> tuple[str, float, float]:
    """The quick sweep through the CLI, as a user runs it: its run id, wall time and the
    host's mean busy cores meanwhile."""
    before = {p.name for p in RESULTS.glob("*")}
    busy0, total0 = busy_jiffies()
    t0 = time.monotonic()
    argv = [str(QUICBED), "run", str(file), "--quick", "--parallel", str(k), "--no-progress"]
    subprocess.run(argv, check=False)
    wall = time.monotonic() - t0
    busy1, total1 = busy_jiffies()
    cores = (busy1 - busy0) / max(1, total1 - total0) * _cpus()
    new = sorted({p.name for p in RESULTS.glob("*")} - before)
    if not new:
        sys.exit("parallel_bench: the run wrote no result directory")
    return new[-1], wall, cores


def _cpus() -> int:
    return sum(
        1 for line in Path("/proc/stat").read_text().splitlines() if line[:3] == "cpu" and line[3:4].isdigit()
    )


def session_wall(run_dir: Path) -> float:
    """The run's own time from its manifest (for --runs)."""
    from datetime import datetime

    m = read_manifest(run_dir)
    spans = [(s["started_at"], s["ended_at"]) for s in m["sessions"] if s.get("ended_at")]
    return sum((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() for a, b in spans)


def estimate(values: list[Any]) -> tuple[float, float, float, int]:
    e = median_ci([v for v in values if v is not None])
    return e.value, e.lo, e.hi, e.n


def report(runs: dict[int, tuple[str, float, float | None]]) -> None:
    rows = {
        k: [r for r in load_rows(RESULTS / run)[0] if r.get("error") is None]
        for k, (run, _, _) in runs.items()
    }
    print("\n== wall time and CPU")
    for k, (run, wall, cores) in runs.items():
        ok = rows[k]
        cpu = sorted((r.get("cpu_client_pct") or 0) + (r.get("cpu_server_pct") or 0) for r in ok)
        trial_cpu = cpu[len(cpu) // 2] / 100 if cpu else float("nan")
        every = load_rows(RESULTS / run)[0]
        bound = sum(bool(r.get("cpu_bound")) for r in every)
        m = read_manifest(RESULTS / run)
        alone = [uid for uid, u in m["units"].items() if (u.get("parallel") or {}).get("rerun_alone")]
        busy = f", host busy {cores:.2f} cores" if cores is not None else ""
        print(
            f"K={k}: {run}: wall {wall:.0f} s{busy}, trial CPU median {trial_cpu:.2f} cores "
            f"(client + server), {len(ok)}/{len(every)} trials ok, {bound} cpu_bound, "
            f"rerun alone: {', '.join(alone) or 'none'}"
        )
    if 1 in runs and 2 in runs:
        print(f"wall(K=2) / wall(K=1) = {runs[2][1] / runs[1][1]:.2f} (goal <= 0.6)")
    for title, group in [
        ("all sessions", None),
        *((f"protocol {p}", p) for p in ("quic", "tls1.3", "tls1.2")),
    ]:
        print(f"\n== medians, 95 % CI ({title})")
        for name, column in METRICS.items():
            est = {
                k: estimate([r.get(column) for r in rs if group is None or r.get("protocol") == group])
                for k, rs in rows.items()
            }
            cells = "   ".join(
                f"K={k}: {v:.0f} [{lo:.0f}, {hi:.0f}] n={n}" for k, (v, lo, hi, n) in est.items()
            )
            agree = ""
            if 1 in est and 2 in est:
                (v1, lo1, hi1, _), (v2, lo2, hi2, _) = est[1], est[2]
                inside = lo1 <= v2 <= hi1 and lo2 <= v1 <= hi2
                agree = "  agree" if inside else "  DIFFER (a median outside the other's CI)"
                if any(x != x for x in (lo1, hi1, lo2, hi2)):  # NaN: fewer than 2 sessions
                    agree = "  (no CI: n < 2)"
            print(f"  {name:<16} {cells}{agree}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", type=Path, default=VIDEO)
    ap.add_argument("--runs", nargs=2, metavar=("K1_RUN", "K2_RUN"), help="report finished runs")
    args = ap.parse_args()
    runs: dict[int, tuple[str, float, float | None]] = {}
    if args.runs:
        for k, run in zip((1, 2), args.runs, strict=True):
            runs[k] = (run, session_wall(RESULTS / run), None)
    else:
        for k in (1, 2):
            runs[k] = run_sweep(args.file, k)
    report(runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
