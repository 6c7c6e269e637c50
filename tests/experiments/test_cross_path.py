"""Cross traffic on the real path (experiments/cross.py): one `quicbed run` whose QUIC download
shares a 10 Mbit/s bottleneck with a TCP BBR flow (iperf3, from the trial's server) for
0-6 s, a QUIC flow (curl over HTTP/3 from the side container) for 1-4 s and 5 KB web fetches
over TLS 1.3 at 2 a second for 0-5 s. Each bulk flow starts and stops on time at the client,
runs the protocol and congestion control it was given, the row carries the shares, and nothing
is left behind. A second run shares the link between two flows that should share it fairly
(TCP CUBIC beside TCP CUBIC), three times: the median share and its Jain's index are judged
against fair."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from cli_process import quicbed

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


# Two flows that should share fairly: the trial's TCP download and a TCP flow of the same
# congestion control (CUBIC, the kernel's, from the same server namespace) and RTT, from the
# start to past the trial's end. Fair is 1/2 each. One trial's share is a random variable: over
# its 9-10 s, CUBIC's epochs at 10 Mbit/s are about 3 s long, and a handshake packet lost to the
# other flow's slow start costs the trial a 1 s timeout. So the typical share, the median of
# three trials, is judged against fair; each trial only against starving.
# Measured (16 trials, 2026-11-29): 0.43-0.51 at 5 MB, 0.43-0.52 at 10 MB; one CI run, 0.37.
FAIR_EXPERIMENT = """\
name: cross-fair
profiles:
  - {name: shared-10, rate_mbit: 10, rtt_ms: 40}
servers: [caddy]
clients: [{tool: tls_perf, tls: ["1.3"], http: "2"}]
workload: {kind: cloud, files: [5MB]}
cross:
  - {kind: bulk, protocol: tcp, cc: cubic, start_s: 0, duration_s: 12}
repetitions: 3
timeout_s: 40
"""
FAIR_SHARE_BAND = 0.1  # the median trial's share: within this of 1/2
FAIR_JAIN_MIN = 0.96  # what the band gives: Jain's index 1/(2(s^2 + (1-s)^2)) is 0.96 at s = 0.4
STARVED_SHARE = 0.25  # no single trial's flow gets less than half its fair share


def _rows(tmp: Path, experiment: str) -> list[dict]:
    (tmp / "cross.yaml").write_text(experiment)
    proc = quicbed(
        "run", str(tmp / "cross.yaml"), "--no-progress", env={"QUICBED_RESULTS": str(tmp / "results")}
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (run_dir,) = (tmp / "results").iterdir()
    return [json.loads(line) for line in (run_dir / rowschema.ROWS_FILE).read_text().splitlines()]


@pytest.fixture(scope="module")
def row(tmp_path_factory: pytest.TempPathFactory, clean_slate: None) -> dict:
    (only,) = _rows(tmp_path_factory.mktemp("cross"), EXPERIMENT)
    return only


@pytest.fixture(scope="module")
def fair_rows(tmp_path_factory: pytest.TempPathFactory, clean_slate: None) -> list[dict]:
    rows = _rows(tmp_path_factory.mktemp("fair"), FAIR_EXPERIMENT)
    assert len(rows) == 3
    return rows


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
    # Not a fair mix (BBR beside CUBIC, a flow of 3 s): fairness is judged below.
    assert 0.1 < row["trial_share"] < 0.9
    assert row["cross_window_s"] > 4  # 5 MB at under 10 Mbit/s


def test_flows_of_one_congestion_control_share_the_bottleneck_fairly(fair_rows: list[dict]) -> None:
    """Jain's index against fair sharing, not against its floor of 1/n."""
    for fair_row in fair_rows:
        assert fair_row["error"] is None
        (flow,) = json.loads(fair_row["cross_flows"])
        assert flow["sender_cc"] == "cubic" and "error" not in flow, flow
        assert fair_row["trial_mbit"] + fair_row["cross_mbit"] >= 10 * 0.85, fair_row
        assert STARVED_SHARE <= fair_row["trial_share"] <= 1 - STARVED_SHARE, fair_row
    shares = [r["trial_share"] for r in fair_rows]
    typical = sorted(fair_rows, key=lambda r: r["trial_share"])[1]
    assert abs(typical["trial_share"] - 0.5) <= FAIR_SHARE_BAND, shares
    assert FAIR_JAIN_MIN <= typical["jain_index"] <= 1, typical


def test_nothing_is_left_behind(row: dict, fair_rows: list[dict]) -> None:
    from quicbed.topology.clean import leftovers
    from quicbed.topology.marker import marked_processes

    time.sleep(0.5)
    assert leftovers() == [] and marked_processes() == []
    names = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True)
    assert not [n for n in names.stdout.split() if n.endswith("-cross")]
    assert not list(Path("/tmp").glob("quicbed-cross-*.pcap"))
