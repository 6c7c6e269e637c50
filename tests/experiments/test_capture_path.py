"""`quicbed run --capture qlog,pcap,keys` on the real india path: every trial's directory holds
what its stacks can write, the row names those files and says why the rest is missing, the
key log decrypts the capture (tshark in the client image), and the qlog files pass the
validator. One run of 6 trials (caddy and nginx; TLS 1.3/HTTP 2, QUIC via libcurl and via
ngtcp2), shared by the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from quicbed import rowschema
from quicbed.analysis.qlog import check_qlog
from quicbed.clients.perf.wirecheck import tshark_fields_argv
from quicbed.clients.tools import CLIENT_IMAGE

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

EXPERIMENT = """\
name: capture-path
profiles: [india]
servers: [caddy, nginx]
clients:
  - {tool: tls_perf, tls: "1.3", http: "2"}
  - {tool: quic_perf, backend: [libcurl, ngtcp2]}
workload: {kind: web, objects: [index.html]}
repetitions: 1
"""
REQUEST_PATH = "/web/index.html"


@dataclass
class CaptureRun:
    returncode: int
    out: str
    run_dir: Path
    rows: list[dict]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, clean_slate: None) -> CaptureRun:
    tmp = tmp_path_factory.mktemp("capture")
    (tmp / "capture.yaml").write_text(EXPERIMENT)
    env = {**os.environ, "QUICBED_RESULTS": str(tmp / "results"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "quicbed.cli", "run", str(tmp / "capture.yaml")]
        + ["--capture", "qlog,pcap,keys", "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (run_dir,) = (tmp / "results").iterdir()
    rows = [json.loads(line) for line in (run_dir / rowschema.ROWS_FILE).read_text().splitlines()]
    return CaptureRun(proc.returncode, proc.stdout + proc.stderr, run_dir, rows)


def expected(row: dict) -> tuple[set[str], set[str]]:
    """The capture files a trial's stacks can write, and the kinds they cannot."""
    quic = row["protocol"] == "quic"
    files = {"pcap", "keys"} | ({"qlog/client"} if quic else set())
    if quic and row["server"] == "caddy":
        files.add("qlog/server")
    return files, {"pcap", "keys", "qlog/client", "qlog/server"} - files


def test_every_trial_has_its_files_and_says_what_is_missing(run: CaptureRun) -> None:
    assert run.returncode == 0, run.out[-3000:]
    assert len(run.rows) == 6 and all(r["error"] is None for r in run.rows)
    manifest = json.loads((run.run_dir / rowschema.MANIFEST_FILE).read_text())
    assert manifest["capture"] == ["keys", "pcap", "qlog"]
    for row in run.rows:
        files, missing = expected(row)
        trial_dir = rowschema.capture_dir(row["trial_id"])
        assert sorted(row["capture_files"]) == sorted(
            f"{trial_dir}/{rowschema.CAPTURE_FILES[k]}" for k in files
        ), row["trial_id"]
        assert all((run.run_dir / f).stat().st_size > 0 for f in row["capture_files"])
        assert set(row["capture_missing"]) == missing, row["capture_missing"]
        if row["protocol"] != "quic":
            assert "TCP" in row["capture_missing"]["qlog/server"]
        elif row["server"] == "nginx":
            assert "nginx 1.26" in row["capture_missing"]["qlog/server"]
        # The capture's own time is kept apart from the trial's.
        assert 0 < row["capture_s"] < 5 and row["wall_s"] < row["tool_wall_s"] + 2.0


def _tshark(run_dir: Path, trial_dir: str, fields: list[str], display: str) -> str:
    where = f"/run/{trial_dir}"
    argv = ["docker", "run", "--rm", "--network", "none", "-v", f"{run_dir}:/run:ro", CLIENT_IMAGE]
    argv += tshark_fields_argv(f"{where}/client.pcap", f"{where}/keys.log", fields, display)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("client", ["quic-h3", "quic-h3-ngtcp2", "tls1.3-h2"])
def test_the_key_log_decrypts_the_request(run: CaptureRun, client: str) -> None:
    (row,) = [r for r in run.rows if r["client"] == client and r["server"] == "caddy"]
    trial_dir = rowschema.capture_dir(row["trial_id"])
    if row["protocol"] == "quic":  # the HTTP/3 HEADERS frame, QPACK-decoded
        out = _tshark(run.run_dir, trial_dir, ["http3.headers.header.value"], "http3.frame_type == 1")
    else:
        out = _tshark(run.run_dir, trial_dir, ["http2.headers.path"], "http2.type == 1")
    assert REQUEST_PATH in out, out[-2000:]


def test_qlog_files_pass_the_validator(run: CaptureRun) -> None:
    checked = 0
    for row in run.rows:
        for rel in row["capture_files"]:
            if not rel.endswith(".sqlog"):
                continue
            result = check_qlog((run.run_dir / rel).read_bytes())
            assert result.ok and result.events > 10, (rel, result.problems[:5])
            side = "client" if rel.endswith("client.sqlog") else "server"
            assert set(result.vantage_points) == {side}, (rel, result.vantage_points)
            checked += 1
    assert checked == 6  # 4 QUIC trials' client files, and the server files of the 2 on caddy
