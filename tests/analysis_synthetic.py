"""Synthetic runs for the analysis tests (tests only): a run directory written from a model
with known parameters, shaped like the runner's output (manifest.json, rows.jsonl, parquet).

Model: connection time = k·RTT·(1 + noise) with k = 1/2/3 for QUIC/TLS 1.3/TLS 1.2;
TTFB = connection + RTT; download = TTFB + size / rate. Cloud throughput favours QUIC up
to 20 MB and TLS 1.2 above; QUIC's client CPU is ~2× on large files. Streaming: QUIC starts
faster and stalls seldom and shorter under loss. Page loads (a browser's rows of the web workload): the
perf tools' timings, TLS 1.2 one RTT shorter (False Start), and the load two RTT after.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from quicbed import rowschema, runmanifest
from quicbed.workloads.cloud import CLOUD_SIZES as FILE_BYTES

HANDSHAKE_K = {"quic": 1, "tls1.3": 2, "tls1.2": 3}
CLIENTS = {"quic": "quic-h3", "tls1.3": "tls1.3-h2", "tls1.2": "tls1.2-h2"}
CONDITIONS = {  # name: (rtt_ms, down, up, loss)
    "india": (80.0, 20.0, 20.0, 0.0),
    "germany": (6.0, 500.0, 500.0, 0.0),
}
MiB = 2**20  # the content server's "MB"
CLOUD_SIZES = {
    "1KB": 1024,
    "1MB": MiB,
    "10MB": 10 * MiB,
    "20MB": 20 * MiB,
    "50MB": 50 * MiB,
    "200MB": 200 * MiB,
}
VERSIONS = {"CADDY_VERSION": "v2.11.9", "NGINX_VERSION": "1.26.3"}


@dataclass
class Model:
    repetitions: int = 20
    workloads: tuple[str, ...] = ("web", "cloud", "video", "streaming", "pageload")
    conditions: dict[str, tuple[float, float, float, float]] = field(default_factory=lambda: dict(CONDITIONS))
    noise: float = 0.05
    failed: int = 2  # trials with an error
    seed: int = 1


def base_row(run_id: str, condition: str, params: tuple, protocol: str, rep: int) -> dict:
    rtt, down, up, loss = params
    return {
        "run_id": run_id,
        "condition": condition,
        "profile": condition,
        "rtt_ms": rtt,
        "rate_down_mbit": down,
        "rate_up_mbit": up,
        "loss_pct": loss,
        "server": "caddy",
        "client": CLIENTS[protocol],
        "protocol": protocol,
        "repetition": rep,
        "tool": "synthetic",
        "tls_version": "1.3" if protocol != "tls1.2" else "1.2",
        "http_version": "3" if protocol == "quic" else "2",
        "http_status": 200,
        "cpu": [],
        "cpu_client_pct": 10.0,
        "cpu_server_pct": 5.0,
        "cpu_bound": False,
        "calib_rtt_ms": rtt * 1.01,
        "calib_passed": True,
        "calib_forced": False,
        "error": "",
    }


def timing(rng: np.random.Generator, m: Model, rtt: float, protocol: str, size: float, rate: float) -> dict:
    # the calibrated path (1 % above the profile, as base_row says), never shorter than k RTT
    # (transmission and the server add a little), plus 0.3 ms of client time
    path = HANDSHAKE_K[protocol] * rtt * 1.01 * (1 + abs(m.noise * rng.standard_normal()) / 3)
    conn = path + 0.3
    ttfb = conn + rtt * (1 + m.noise * rng.random())
    download = ttfb + size * 8 / (rate * 1e3)
    return {
        "connection_time_ms": conn,
        "client_cpu_ms": 0.3,
        "ttfb_ms": ttfb,
        "download_time_ms": download,
        "bytes": size,
        "throughput_mbps": size * 8 / (download * 1e3),
    }


def cloud_rate(rate: float, protocol: str, size: float) -> float:
    # QUIC ahead up to 20 MB, TCP ahead above it (the paper's direction).
    if size <= 20 * MiB:
        return rate * (0.9 if protocol == "quic" else 0.6)
    return rate * (0.6 if protocol == "quic" else 0.9)


def cpu_trace(rng: np.random.Generator, protocol: str, seconds: float) -> list[dict]:
    level = 90.0 if protocol == "quic" else 50.0
    return [
        {"t": t, "proc_pct": float(level + 5 * rng.standard_normal()), "sys_busy_pct": 60.0}
        for t in np.arange(0, min(seconds, 20), 0.5)
    ]


def web_rows(rng, m, base, params) -> list[dict]:
    rtt, down = params[0], params[1]
    return [
        {
            **base,
            "workload": "web",
            "object": "index.html",
            **timing(rng, m, rtt, base["protocol"], 40e3, down),
        }
    ]


def cloud_rows(rng, m, base, params) -> list[dict]:
    rtt, down, protocol = params[0], params[1], base["protocol"]
    rows = []
    for name, size in CLOUD_SIZES.items():
        row = {
            **base,
            "workload": "cloud",
            "object": name,
            **timing(rng, m, rtt, protocol, size, cloud_rate(down, protocol, size)),
        }
        if size >= 50 * MiB:
            row["cpu"] = cpu_trace(rng, protocol, row["download_time_ms"] / 1e3)
            row["cpu_client_pct"] = float(np.median([s["proc_pct"] for s in row["cpu"]]))
            row["cpu_bound"] = row["cpu_client_pct"] > 85
        rows.append(row)
    return rows


def video_rows(rng, m, base, params) -> list[dict]:
    rtt, down, protocol = params[0], params[1], base["protocol"]
    row = {
        **base,
        "workload": "video",
        "object": "video+audio",
        **timing(rng, m, rtt, protocol, 30e6, down * (0.7 if protocol == "quic" else 0.9)),
    }
    return [row]


def streaming_rows(rng, m, base, params) -> list[dict]:
    if base["protocol"] == "tls1.2":
        return []  # Chrome streams over TLS 1.3 or QUIC
    rows = []
    quic = base["protocol"] == "quic"
    for loss in (0.0, 1.0, 5.0, 10.0):
        factor = 1 + loss / 5 * (0.6 if quic else 1.0)
        stalls = int(rng.poisson(loss / (8 if quic else 2)))  # QUIC seldom stalls (measured 2026-11-29)
        durations = list(rng.gamma(4, (150 if quic else 225), size=stalls))
        startup = 600 * factor * (1 + 0.05 * rng.standard_normal())
        switches = int(rng.poisson(1 + loss))  # drawn after the startup, as before: same runs
        rows.append(
            {
                **base,
                "workload": "streaming",
                "object": "dash",
                "loss_pct": loss,
                "startup_delay_ms": startup,
                "stall_count": stalls,
                "stall_durations_ms": durations,
                "stall_total_ms": float(sum(durations)),
                "quality_switches": switches,
                "switches_up": switches // 3,  # loss mostly switches down
                "switches_down": switches - switches // 3,
                "first_rendition": "360p",  # both protocols start alike: no rendition line
                "lowest_quality": "144p" if loss >= 5 else "480p",
            }
        )
    return rows


def pageload_rows(rng, m, base, params) -> list[dict]:
    """A page load in a browser: TLS 1.2 costs 2 RTT there (False Start), and the page's
    five subresources come over the page's connection after the HTML."""
    rtt, down, protocol = params[0], params[1], base["protocol"]
    t = timing(rng, m, rtt, protocol, 40e3, down)
    if protocol == "tls1.2":
        t = {k: v - rtt if k.endswith("_ms") and k != "client_cpu_ms" else v for k, v in t.items()}
    load = t["download_time_ms"] + 2 * rtt + 60
    return [
        {
            **base,
            **t,
            "workload": "web",
            "object": "index.html",
            "tool": "chromium",
            "client": f"chromium-{protocol}",
            "throughput_mbps": None,
            "client_cpu_ms": None,
            "page_load_time_ms": load,
            "dom_content_loaded_ms": load - 20,
            "fcp_ms": load - 30,
            "lcp_ms": load - 25,
            "resources": 5,
            "connections": 1,
            "resource_protocols": {"h3" if protocol == "quic" else "h2": 6},
            "browser_cpu_ms": 0.4 * load,
            "browser_cpu_pct": 40.0,
        }
    ]


BUILDERS = {
    "web": web_rows,
    "cloud": cloud_rows,
    "video": video_rows,
    "streaming": streaming_rows,
    "pageload": pageload_rows,
}


def make_rows(run_id: str, m: Model) -> list[dict[str, Any]]:
    rng = np.random.default_rng(m.seed)
    rows = []
    for condition, params in m.conditions.items():
        for rep in range(m.repetitions):
            for protocol in HANDSHAKE_K:
                base = base_row(run_id, condition, params, protocol, rep)
                for workload in m.workloads:
                    rows += BUILDERS[workload](rng, m, base, params)
    for i, row in enumerate(rows):
        row["trial_id"] = f"{run_id}-{i:05d}"
    for row in rows[: m.failed]:
        row.update(error="curl: (28) Operation timed out", connection_time_ms=None)
    return rows


def manifest(
    run_id: str,
    m: Model,
    versions: dict[str, str] | None = None,
    failing: str | None = None,
    ids: dict[str, str] | None = None,
) -> dict:
    """The runner's manifest (quicbed/runmanifest.py): conditions keyed by id (`ids`: name ->
    id; default the names), each with the executor's calibration summary and the whole
    record one level down; condition `failing`'s goodput check failed and forced."""

    def condition(name: str, p: tuple) -> dict:
        ok = name != failing
        checks = [
            {
                "metric": "rtt_median_ms",
                "direction": "both",
                "configured": p[0],
                "measured": p[0] * 1.02,
                "tolerance": "±2 ms",
                "passed": True,
            },
            *(
                {
                    "metric": "goodput_mbit",
                    "direction": direction,
                    "configured": rate,
                    "measured": rate * (0.95 if ok else 0.5),
                    "tolerance": "90%..102% of rate",
                    "passed": ok,
                }
                for direction, rate in (("down", p[1]), ("up", p[2]))
            ),
            *(
                {"metric": "loss_pct", "direction": d, "configured": p[3], "measured": p[3], "passed": True}
                for d in ("down", "up")
            ),
        ]
        return {
            "label": name,
            "profile": name,
            "link": {
                "name": name,
                "rtt_ms": p[0],
                "down": {"rate_mbit": p[1], "loss_pct": p[3]},
                "up": {"rate_mbit": p[2], "loss_pct": p[3]},
            },
            "calibration": {
                "rtt_ms": p[0] * 1.01,
                "passed": ok,
                "forced": not ok,
                "calibration": {"profile": name, "backend": "uml", "checks": checks, "passed": ok},
            },
        }

    ids = ids or {name: name for name in m.conditions}
    return {
        runmanifest.VERSION_KEY: runmanifest.MANIFEST_VERSION,
        "run_id": run_id,
        "experiment": "synthetic",
        "git": {"commit": "0123abc"},
        "host": {"kernel": "6.1.176"},
        "versions": versions or VERSIONS,
        "executor": {"backend": "uml"},
        "seed": m.seed,
        "status": "complete",
        "sessions": [{"pid": 1}],
        "started_at": "2026-11-22T00:00:00Z",
        "ended_at": "2026-11-22T01:00:00Z",
        "conditions": {ids[name]: condition(name, p) for name, p in m.conditions.items()},
    }


def playback_trace(row: dict[str, Any], seconds: int = 30) -> list[dict[str, Any]]:
    """A per-second trace as the player writes it (workloads/player/qoe.js): the buffer fills
    at one second a second up to 12, each stall empties it for its duration, and the bitrate
    falls with loss."""
    stalled = set()
    for i, duration in enumerate(row["stall_durations_ms"]):
        start = 6 + 7 * i
        stalled |= set(range(start, start + max(1, round(duration / 1000))))
    kbps = 2500 if row["loss_pct"] == 0 else 700 if row["loss_pct"] < 5 else 150
    trace, buffer = [], 0.0
    for t in range(1, seconds + 1):
        buffer = 0.0 if t in stalled else min(12.0, buffer + 1.0)
        trace.append(
            {
                "t_s": float(t),
                "buffer_s": buffer,
                "bitrate_kbps": kbps,
                "height": int(kbps > 1000) * 720 or 144,
                "stalled": t in stalled,
                "position_s": float(t),
            }
        )
    return trace


def write_traces(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    """Each playback's trace beside the rows, named in its row as the runner does."""
    for row in rows:
        if row["workload"] == "streaming":
            row["trace_file"] = rowschema.trace_path(row["trial_id"])
            path = run_dir / row["trace_file"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(playback_trace(row)))


def write_run(
    root: Path,
    run_id: str,
    m: Model | None = None,
    *,
    parquet: bool = True,
    torn_tail: bool = False,
    versions: dict[str, str] | None = None,
    runner_style: bool = False,
    failing: str | None = None,
) -> Path:
    """Write results/<run_id>/ under root; returns the run directory. runner_style: rows and
    manifest as the experiment runner writes them (condition ids c0.. plus labels), with
    the calibration of condition `failing` failed and forced."""
    m = m or Model()
    run_dir = root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = make_rows(run_id, m)
    write_traces(run_dir, rows)
    if runner_style:
        ids = {name: f"c{i}" for i, name in enumerate(m.conditions)}
        for row in rows:
            row.update(
                condition=ids[row["condition"]],
                condition_label=row["condition"],
                calib_forced=row["condition"] == failing,
            )
        info = manifest(run_id, m, versions, failing, ids)
    else:
        info = manifest(run_id, m, versions)
    (run_dir / "manifest.json").write_text(json.dumps(info, indent=1))
    lines = [json.dumps(r) for r in rows]
    tail = '{"run_id": "' + run_id + '", "trial_' if torn_tail else ""
    (run_dir / "rows.jsonl").write_text("\n".join(lines) + "\n" + tail)
    if parquet:
        pd.DataFrame(rows).to_parquet(run_dir / "rows.parquet")
    return run_dir


# Paths of the cloud findings' two regimes (analysis/claims.py RECEIVER_CPU_MBIT): this
# testbed's germany, where both protocols fill the link, and germany-lab, where the
# receiver's CPU can set the rate. (CONDITIONS' "germany" has germany-lab's figures.)
GERMANY = ("germany", 20.0, 100.0)  # name, rtt_ms, rate_mbit
GERMANY_LAB = ("germany-lab", 6.0, 500.0)


@dataclass(frozen=True)
class Side:
    """One protocol's cloud trials in cloud_rounds: its goodput and both ends' CPU (% of one
    core): the client is the receiver, the server the sender."""

    mbit: float
    client_pct: float = 20.0
    server_pct: float = 20.0


def cloud_rounds(
    path: tuple[str, float, float],
    sides: dict[str, Side],
    files: tuple[str, ...] = ("50MB", "100MB"),
    rounds: int = 12,
    server: str = "caddy",
) -> list[dict[str, Any]]:
    """Rounds of paired cloud trials on one path, as analysis/load.py leaves them (the facet,
    object_bytes, transfer_cpu_pct), one per protocol, file and round. A trial is CPU-bound
    when an end used 90 % of a core or more, as the executor flags it. Each round adds a
    little to every side's goodput alike, so the pairs keep their sign and no two rounds
    tie; the CPU figures stay as given."""
    name, rtt, rate = path
    rows = []
    for rep, obj, (protocol, side) in itertools.product(range(rounds), files, sides.items()):
        rows.append(
            {
                "run_id": "r1",
                "trial_id": f"{name}/{server}/{protocol}/{obj}/r{rep}",
                "condition": name,
                "condition_label": name,
                "profile": name,
                "facet": f"{name} · {server}",
                "server": server,
                "client": CLIENTS[protocol],
                "protocol": protocol,
                "tool": "quic_perf" if protocol == "quic" else "tls_perf",
                "workload": "cloud",
                "object": obj,
                "object_bytes": float(FILE_BYTES[obj]),
                "repetition": rep,
                "rtt_ms": rtt,
                "rate_down_mbit": rate,
                "error": "",
                "failed": False,
                "throughput_mbps": side.mbit + 0.1 * rep,
                "cpu_client_pct": side.client_pct,
                "transfer_cpu_pct": side.client_pct,
                "cpu_server_pct": side.server_pct,
                "cpu_bound": max(side.client_pct, side.server_pct) >= 90.0,
            }
        )
    return rows
