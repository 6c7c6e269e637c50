"""Auto repetitions on the real path: QUIC's handshake against TLS 1.3's over india's 80 ms,
decided round by round; the run stops at the rounds the sequential test needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_process import quicbed

from quicbed.analysis.decisions import DECIDED, fewest_rounds

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

EXPERIMENT = """\
name: auto-handshake
profiles: [india]
servers: [caddy]
clients: [{tool: tls_perf, tls: "1.3", http: "2"}, {tool: quic_perf}]
workload: {kind: web, objects: [index.html]}
repetitions: {auto: {min: 3, max: 30}}
decide:
  - {metric: connection_time, a: quic, b: tls1.3}
"""


def test_a_one_rtt_difference_stops_the_run_where_the_test_decides(tmp_path: Path) -> None:
    experiment = tmp_path / "auto.yaml"
    experiment.write_text(EXPERIMENT)
    proc = quicbed("run", str(experiment), "--no-progress", env={"QUICBED_RESULTS": str(tmp_path / "r")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "r").iterdir()
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    # One RTT apart on an 80 ms path: every round agrees, so the floor of the test decides.
    floor = fewest_rounds(0.01)
    assert all(r["error"] is None for r in rows)
    quic = {r["repetition"]: r["connection_time_ms"] for r in rows if r["protocol"] == "quic"}
    tls = {r["repetition"]: r["connection_time_ms"] for r in rows if r["protocol"] == "tls1.3"}
    assert sorted(quic) == sorted(tls) == list(range(floor)), (quic, tls)
    assert all(quic[k] < tls[k] for k in quic), (quic, tls)
    (decision,) = json.loads((run_dir / "manifest.json").read_text())["decisions"]
    assert (decision["decision"], decision["rounds"], decision["why"]) == ("A < B", floor, DECIDED)
    assert f"{2 * (30 - floor)} not needed (decided)" in proc.stdout
    assert (
        f"c0 caddy index.html: quic vs tls1.3 connection_time: which is lower? quic lower after {floor}"
        in (proc.stdout)
    )
