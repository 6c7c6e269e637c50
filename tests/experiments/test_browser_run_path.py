"""`quicbed run --check` of the browser experiments on the real path, as `make reproduce`
runs them (until now only it did): a 2-trial Chromium page-load experiment and a 1-playback
DASH video experiment, each judged by its own expectations (handshake RTTs) and its rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quicbed import cli, paths

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

PAGES = """\
name: browser-run
profiles: [india]
servers: [nginx]
clients: [{tool: chromium, protocol: [quic, tls1.3]}]
workload: {kind: web, objects: [pages/news]}
repetitions: 1
expect:
  # One connection per page: 1 RTT for QUIC, 2 for TLS 1.3 over TCP, plus the browser's own
  # time on 2 cores (5-25 ms at 80 ms: bench/browser_bench.py).
  - "0.95 < chromium_quic.connection_time.median / rtt < 1.5"
  - "1.95 < chromium_tls13.connection_time.median / rtt < 2.5"
  - "chromium_quic.page_load_time.count + chromium_tls13.page_load_time.count == 2"
"""
VIDEO = """\
name: video-run
profiles: [india]
servers: [nginx]
clients: [{tool: chromium, protocol: [quic]}]
workload: {kind: video, modes: [dash], duration_s: 8}
repetitions: 1
expect:
  - "0.95 < chromium_quic.connection_time.median / rtt < 1.5"
"""


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, capsys: pytest.CaptureFixture[str]
) -> tuple[list[dict], str]:
    monkeypatch.setattr(paths, "RESULTS", tmp_path / "results")
    file = tmp_path / "experiment.yaml"
    file.write_text(text)
    code = cli.main(["run", str(file), "--no-progress", "--check"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    rows = [json.loads(ln) for ln in (run_dir / "rows.jsonl").read_text().splitlines()]
    assert all(r["error"] is None for r in rows), rows
    return rows, out


def test_a_chromium_page_load_experiment_runs_and_checks(tmp_path: Path, monkeypatch, capsys) -> None:
    rows, out = _run(tmp_path, monkeypatch, PAGES, capsys)
    assert "3/3 expectations passed" in out, out[-2000:]
    assert sorted(r["protocol"] for r in rows) == ["quic", "tls1.3"]
    for row in rows:
        assert row["connections"] == 1 and row["resources"] > 1, row
        assert set(row["resource_protocols"]) == {"h3" if row["protocol"] == "quic" else "h2"}, row


def test_a_dash_playback_experiment_runs_and_checks(tmp_path: Path, monkeypatch, capsys) -> None:
    rows, out = _run(tmp_path, monkeypatch, VIDEO, capsys)
    assert "1/1 expectations passed" in out, out[-2000:]
    (row,) = rows
    # 20 Mbit/s without loss carries the ladder's top: it starts within seconds, never stalls.
    assert 0 < row["startup_delay_ms"] < 5000 and row["stall_total_ms"] == 0, row
    assert row["played_s"] >= 7.5, row
