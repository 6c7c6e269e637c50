"""`quicbed run --parallel 2` on real paths: two conditions, each on its own path in its own
namespaces and containers at once. A Ctrl-C mid-run (SIGINT to the process group, as a
terminal sends it) leaves no namespace, veth, container or process of the run behind; a
SIGKILL of the whole run mid-way resumes, and the rows of both units are there, one per trial.

One experiment, three sessions on the same paths (calibration reuse, tests/README.md, keeps the
later bring-ups to their route and RTT proofs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quicbed.topology.clean import clean, leftovers

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

# Two conditions (one unit each) of 40 short trials: both paths measure for several seconds
# at once, long enough to be stopped mid-way.
TINY = """
name: par-path
profiles:
  - {name: lab, rtt_ms: 20, rate_mbit: 20}
sweep: {loss_pct: [0, 1]}
servers: [caddy]
clients:
  - {tool: tls_perf, tls: ["1.3"], http: "2"}
  - quic_perf
workload: {kind: web, objects: [index.html]}
repetitions: 20
seed: 1
"""
TRIALS = 80
UNITS = {"c0u0", "c1u0"}


def _quicbed(file: Path, results: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "QUICBED_RESULTS": str(results), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "quicbed.cli", "run", str(file), "--parallel", "2", *args, "--no-progress"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the test signals it as a terminal would
    )


def _rows(run_dir: Path) -> list[dict]:
    path = run_dir / "rows.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


def _wait_for_rows(results: Path, more_than: int, timeout: float = 240) -> Path:
    """Until both units have stored more than `more_than` rows each: both paths measuring."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run_dir in (p for p in results.iterdir() if p.is_dir()):
            per_unit = {u: sum(r["unit"] == u for r in _rows(run_dir)) for u in UNITS}
            if all(n > more_than for n in per_unit.values()):
                return run_dir
        time.sleep(0.1)
    raise AssertionError(f"both paths never measured (rows: {[_rows(p) for p in results.iterdir()]})")


def _run_processes(file: Path) -> list[str]:
    """Processes of the run (the command and its forked jobs carry the file in their argv)."""
    proc = subprocess.run(["pgrep", "-af", str(file)], capture_output=True, text=True)
    return [line for line in proc.stdout.splitlines() if "pgrep" not in line]


def test_two_paths_stop_clean_on_ctrl_c_and_a_killed_run_resumes_with_both_units(tmp_path: Path) -> None:
    file, results = tmp_path / "par-path.yaml", tmp_path / "results"
    file.write_text(TINY)
    results.mkdir()

    # 1. Ctrl-C while both paths measure: exit 130, nothing of the run left.
    proc = _quicbed(file, results)
    run_dir = _wait_for_rows(results, 0)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 130, out[-3000:]
    assert f"--resume {run_dir.name}" in out
    assert leftovers() == [], out[-3000:]
    assert _run_processes(file) == []
    first = _rows(run_dir)
    assert len(first) < TRIALS
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["parallel"] == {"k": 2, "paths": 2}
    assert not any(u.get("error") for u in manifest["units"].values())  # stopped, not skipped

    # 2. Resumed, then SIGKILLed (the run and both jobs) while both paths measure again.
    proc = _quicbed(file, results, "--resume", run_dir.name)
    _wait_for_rows(results, max(sum(r["unit"] == u for r in first) for u in UNITS))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    second = _rows(run_dir)
    assert len(first) < len(second) < TRIALS
    clean()  # what a kill -9 leaves, the scoped clean removes
    assert leftovers() == []

    # 3. Resumed to the end: every trial of both units once, measured two paths at a time.
    proc = _quicbed(file, results, "--resume", run_dir.name)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    rows = _rows(run_dir)
    ids = [r["trial_id"] for r in rows]
    assert len(ids) == len(set(ids)) == TRIALS
    assert {r["unit"] for r in rows} == UNITS
    assert all(r["error"] is None for r in rows)
    # Rows say how many paths measured at once: two while both units had trials left; in the
    # last session, as many as units still had.
    assert {r["parallel"] for r in second} == {2}
    left = {r["unit"] for r in rows[len(second) :]}
    assert {r["parallel"] for r in rows[len(second) :]} == {len(left)}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert all(u["calibration"]["passed"] for u in manifest["units"].values())
    assert leftovers() == [] and _run_processes(file) == []
