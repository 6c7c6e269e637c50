"""Cross traffic on the real path (experiments/cross.py): one `quicbed run` whose QUIC download
shares a 10 Mbit/s bottleneck with a TCP BBR flow (iperf3, from the trial's server) for
0-6 s, a QUIC flow (curl over HTTP/3 from the side container) for 1-4 s and 5 KB web fetches
over TLS 1.3 at 2 a second for 0-5 s. Each bulk flow starts
and stops on time at the client, runs the protocol and congestion control it was given, the
row carries the shares, and nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quicbed import rowschema

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

EXPERIMENT = """\
name: cross-path
profiles:
  - {name: shared-10, rate_mbit: 10, rtt_ms: 40}
servers: [caddy]
clients: [{tool: quic_perf}]
workload: {kind: cloud, files: [5MB]}
cross:
  - {kind: bulk, protocol: tcp, cc: bbr, start_s: 0, duration_s: 6}
  - {kind: bulk, protocol: quic, start_s: 1, duration_s: 3}
  - {kind: web, protocol: tcp, rate_per_s: 2, file: 5KB, start_s: 0, duration_s: 5}
repetitions: 1
timeout_s: 40
"""
RTT_S = 0.04
ON_TIME_S = 0.6  # a flow's first packet at the client, against its plan
# Its last: iperf3 starts its clock after about 4 round trips of set-up (control connection,
# parameters, data connection, start), and the last flight takes one more; 10 leave room for
# a busy host (seen: 0.74 s late with two other paths' tests running beside it).
LATE_END_S = ON_TIME_S + 10 * RTT_S


@pytest.fixture(scope="module")
def row(tmp_path_factory: pytest.TempPathFactory, clean_slate: None) -> dict:
    tmp = tmp_path_factory.mktemp("cross")
    (tmp / "cross.yaml").write_text(EXPERIMENT)
    env = {**os.environ, "QUICBED_RESULTS": str(tmp / "results"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "quicbed.cli", "run", str(tmp / "cross.yaml"), "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (run_dir,) = (tmp / "results").iterdir()
    (only,) = [json.loads(line) for line in (run_dir / rowschema.ROWS_FILE).read_text().splitlines()]
    return only


def test_each_flow_runs_what_it_was_given_on_time(row: dict) -> None:
    assert row["error"] is None
    flows = {f["flow"]: f for f in json.loads(row["cross_flows"])}
    tcp, quic = flows["x0"], flows["x1"]
    assert "error" not in tcp and "error" not in quic, flows
    assert tcp["sender_cc"] == "bbr"  # the server namespace's default is cubic: per flow
    assert quic["http_version"] == "3"
    for flow, start, end in ((tcp, 0, 6), (quic, 1, 4)):
        assert abs(flow["started_s"] - start) < ON_TIME_S, flow
        assert end - ON_TIME_S < flow["ended_s"] < end + LATE_END_S, flow
    web = flows["x2"]
    assert web["fetches"] >= 2 and web["fetches_failed"] == 0, web
    # A fresh TLS 1.3 connection and a 5 KB answer: two round trips of 40 ms at least.
    assert web["fetch_ms_median"] >= 2 * RTT_S * 1000, web
    # Fetches start until 5 s; the last may begin just before and run as long as the longest
    # one did (a fresh connection whose SYN met a full queue waits out TCP's 1 s timeout).
    assert web["started_s"] < 5 and web["ended_s"] < 5 + web["fetch_ms_max"] / 1000 + ON_TIME_S, web


def test_the_row_has_the_shares_of_the_bottleneck(row: dict) -> None:
    """Three flows on 10 Mbit/s: together no more than the link (IP bytes at the client,
    with a 3 % allowance for the window's edges), each a real part of it."""
    assert row["trial_mbit"] + row["cross_mbit"] <= 10 * 1.03
    assert row["trial_mbit"] + row["cross_mbit"] >= 10 * 0.85
    assert 0.1 < row["trial_share"] < 0.9
    assert 1 / 3 < row["jain_index"] <= 1
    assert row["cross_window_s"] > 4  # 5 MB at under 10 Mbit/s


def test_nothing_is_left_behind(row: dict) -> None:
    from quicbed.topology.clean import leftovers
    from quicbed.topology.marker import marked_processes

    time.sleep(0.5)
    assert leftovers() == [] and marked_processes() == []
    names = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True)
    assert not [n for n in names.stdout.split() if n.endswith("-cross")]
    assert not list(Path("/tmp").glob("quicbed-cross-*.pcap"))
