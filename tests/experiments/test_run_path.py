"""`quicbed run` on the real path: the CI experiment passes its expectations, and a run
killed with SIGKILL mid-way resumes to exactly one row per trial."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import figure_data
import numpy as np
import pytest
from contention import remeasured, trials_steal

from quicbed.analysis.physics import HANDSHAKE_RTTS, wire_within
from quicbed.analysis.report import write_report
from quicbed.paths import REPO
from quicbed.topology.clean import clean, leftovers

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

CI_EXPERIMENT = REPO / "experiments" / "ci" / "handshake.yaml"
TRIALS = 20  # 1 condition x 1 server x 4 clients x 1 object x 5 repetitions


def _quicbed(*args: str, results: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "QUICBED_RESULTS": str(results), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "quicbed.cli", *args, "--no-progress"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _rows(run_dir: Path) -> list[dict]:
    lines = (run_dir / "rows.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@dataclass
class CiRun:
    returncode: int
    out: str
    results: Path


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory: pytest.TempPathFactory, clean_slate: None) -> CiRun:
    """One complete `quicbed run --check` of the CI experiment, shared by the module's tests
    (whichever runs first, or alone, makes it)."""
    results = tmp_path_factory.mktemp("ci-run")
    proc = _quicbed("run", str(CI_EXPERIMENT), "--check", results=results)
    out, _ = proc.communicate(timeout=600)
    return CiRun(proc.returncode, out, results)


def _ca_of(run_dir: Path) -> str:
    calibration = json.loads((run_dir / "manifest.json").read_text())["conditions"]["c0"]
    ca = calibration["calibration"]["ca_sha256"]
    assert isinstance(ca, str) and ca, calibration
    return ca


def test_ci_experiment_passes_its_expectations(ci_run: CiRun) -> None:
    assert ci_run.returncode == 0, ci_run.out[-3000:]
    assert "4/4 expectations passed" in ci_run.out
    (run_dir,) = [p for p in ci_run.results.iterdir() if p.is_dir()]
    rows = _rows(run_dir)
    assert len(rows) == TRIALS and all(r["error"] is None for r in rows)
    # The testbed's own cost per trial (tool start, docker exec, bookkeeping) stays small: a
    # trial is its transfer, not a DNS timeout (5 s before) or a server start (seconds). The
    # figure itself (about 0.1 s) is bench/overhead_bench.py's: a 2-core VM's scheduler moves
    # one trial's maximum, not the typical one.
    for client in {r["client"] for r in rows}:
        overhead = [r["wall_s"] - r["transfer_s"] for r in rows if r["client"] == client]
        assert statistics.median(overhead) < 0.5 and max(overhead) < 2.0, (client, overhead)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    calibration = manifest["conditions"]["c0"]["calibration"]
    assert calibration["passed"] and not calibration["forced"]
    # The report renders from this real run: every figure exists and the HTML links it.
    with figure_data.captured() as drawn:
        html = write_report([str(run_dir)])
    figures = sorted((html.parent / "figures").glob("*.png"))
    assert figures, "no figures"
    text = html.read_text()
    for figure in figures:
        assert f"figures/{figure.name}" in text
    _figures_plot_the_rows(drawn, rows)


def _figures_plot_the_rows(drawn: dict, rows: list[dict]) -> None:
    """What the report drew from the real run, judged by its data, not its file size: every
    panel has points, and the connection-time CDF has one line per protocol over exactly
    that protocol's trials (sorted, from 0 to 1)."""
    for name, figure in drawn.items():
        for ax in figure_data.panels(figure):
            lines = [*figure_data.series(ax).values(), *figure_data.traces(ax)]
            assert any(len(figure_data.finite(p)) for p in lines), (name, ax.get_title())
    (ax,) = figure_data.panels(drawn["cdf_connection_time_timing_ms"])  # one condition: india
    lines = figure_data.series(ax)
    by_protocol = {
        p: sorted(r["connection_time_ms"] for r in rows if r["protocol"] == p)
        for p in {r["protocol"] for r in rows}
    }
    assert len(lines) == len(by_protocol) == 3, list(lines)
    labels = {"quic": "QUIC", "tls1.3": "TLS 1.3", "tls1.2": "TLS 1.2"}
    for protocol, values in by_protocol.items():
        points = lines[f"{labels[protocol]} (n={len(values)})"]
        np.testing.assert_allclose(points[1:, 0], values, err_msg=protocol)
        assert points[0, 1] == 0 and points[-1, 1] == 1, protocol


def test_rows_carry_the_handshake_on_the_wire(ci_run: CiRun, tmp_path: Path) -> None:
    """Every perf-tool row of the run carries its handshake as captures at both ends saw it
    (issue 62, decision 6; experiments/capture.py HandshakeCapture): the server's turns are
    small, the path's round trips within 1 % of 1 (QUIC), 2 (TLS 1.3) and 3 (TLS 1.2) RTT,
    and connection_time_ms stays the tool's raw figure beside them. The run is the module's;
    on a contended host (the steal over its trials, the rows' CPU-bound flags) a fresh run is
    judged."""
    runs = [ci_run]

    def measure() -> list[dict]:
        if not runs:  # the second attempt: a run of its own
            results = tmp_path / "again"
            proc = _quicbed("run", str(CI_EXPERIMENT), results=results)
            out, _ = proc.communicate(timeout=600)
            runs.append(CiRun(proc.returncode, out, results))
        run = runs.pop()
        assert run.returncode == 0, run.out[-3000:]
        (run_dir,) = [p for p in run.results.iterdir() if p.is_dir()]
        rows = _rows(run_dir)
        _print_wire(rows)
        return rows

    def judge(rows: list[dict]) -> None:
        for r in rows:
            assert "handshake" not in (r.get("capture_missing") or {}), r["capture_missing"]
            assert r["connection_time_ms"] == pytest.approx((r["t_handshake"] - r["t_start"]) * 1e3, abs=0.01)
            assert 0 <= r["server_turn_ms"] < 0.1 * r["calib_rtt_ms"], r
            assert 0 <= r["client_turn_ms"] < r["connection_time_ms"] - r["calib_rtt_ms"], r
        for protocol, n in HANDSHAKE_RTTS.items():
            wire = statistics.median(r["wire_rtts"] for r in rows if r["protocol"] == protocol)
            assert wire_within(n, wire), (protocol, wire)

    def cpu_bound(rows: list[dict]) -> bool:
        return any(r["cpu_bound"] for r in rows)

    what = "the CI run's handshakes on the wire"
    remeasured(what, measure, judge, cpu_bound=cpu_bound, steal_of=trials_steal)


def _print_wire(rows: list[dict]) -> None:
    """Each client's medians: the turns, the wire's RTTs, the raw ones, and the captures' cost."""
    for client in sorted({r["client"] for r in rows}):
        mine = [r for r in rows if r["client"] == client]

        def med(key: str, of: list[dict] = mine) -> float:
            values = [r[key] for r in of if r.get(key) is not None]
            return statistics.median(values) if values else float("nan")

        raw = statistics.median(r["connection_time_ms"] / r["calib_rtt_ms"] for r in mine)
        print(
            f"{client:<16} wire {med('wire_rtts'):.4f} RTT, raw {raw:.4f}; turns: client "
            f"{med('client_turn_ms'):.2f} ms, server {med('server_turn_ms'):.2f} ms; "
            f"capture_s {med('capture_s') * 1e3:.0f} ms; steal {med('host_steal_pct'):.1f} %"
        )


def test_killed_run_resumes_to_exactly_one_row_per_trial(tmp_path: Path, ci_run: CiRun) -> None:
    proc = _quicbed("run", str(CI_EXPERIMENT), results=tmp_path)
    deadline = time.monotonic() + 300
    run_dir = None
    while time.monotonic() < deadline:
        dirs = [p for p in tmp_path.iterdir() if p.is_dir()]
        if dirs and (dirs[0] / "rows.jsonl").exists() and len(_rows(dirs[0])) >= 5:
            run_dir = dirs[0]
            break
        time.sleep(0.2)
    assert run_dir is not None, "the run never wrote rows"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(_rows(run_dir))
    assert 5 <= done_before < TRIALS
    clean()
    assert leftovers() == []
    resumed = _quicbed("run", str(CI_EXPERIMENT), "--resume", run_dir.name, results=tmp_path)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    rows = _rows(run_dir)
    ids = [r["trial_id"] for r in rows]
    assert len(ids) == TRIALS and len(set(ids)) == TRIALS
    # A fresh run made a fresh CA (the resumed run kept its own): not the complete run's.
    assert ci_run.returncode == 0, ci_run.out[-3000:]
    (other,) = [p for p in ci_run.results.iterdir() if p.is_dir()]
    assert _ca_of(run_dir) != _ca_of(other)
