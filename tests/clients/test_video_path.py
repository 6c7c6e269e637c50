"""video_download on the emulated india path (80 ms, 20 Mbit/s), nginx serving the 180 s
ladder: the first connection's handshake costs QUIC 1 RTT, TLS 1.3 2 RTT and TLS 1.2 3 RTT
(analysis/physics.py's criterion), TCP's second connection costs the same, and a short run at
0 % loss plays without a stall; on a path slower than the top rendition the playout clock
stalls and the row says so."""

from __future__ import annotations

import json
import statistics

import pytest
from contention import remeasured

from quicbed import servers
from quicbed.analysis.physics import net_connection_rtts, row_connection_within
from quicbed.clients.tools import tool_argv
from quicbed.paths import CACHE
from quicbed.servers.testbed import served_testbed
from quicbed.topology.calibrate import check_rtt
from quicbed.topology.net import server_address
from quicbed.topology.profiles import load_profile
from quicbed.workloads import ensure_content, video

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

# protocol: (arguments, RTTs of a fresh connection)
PROTOCOLS = {
    "quic": (["--transport", "quic"], 1),
    "quic-ngtcp2": (["--transport", "quic", "--backend", "ngtcp2"], 1),
    "tls1.3": (["--transport", "tcp", "--tls", "1.3"], 2),
    "tls1.2": (["--transport", "tcp", "--tls", "1.2"], 3),
}
MEDIA_S, BUFFER_S = 8, 4


def _content():
    root = CACHE / "content"
    ensure_content(root, {"video"})
    return root


@pytest.fixture(scope="module")
def testbed(tmp_path_factory, clean_slate):
    """A path factory: one profile at a time, nginx serving the ladder."""
    root = _content()
    tmp = tmp_path_factory.mktemp("video")

    def up(profile):
        return served_testbed(
            profile,
            ["nginx"],
            log_root=tmp / profile.name / "logs",
            pki_dir=tmp / "pki",
            content_dir=root,
            start=True,
        )

    return up


def _download(tb, hosts, args: list[str], reps: int, duration: float = MEDIA_S) -> list[dict]:
    address = server_address(tb.servers.index(hosts["nginx"]))
    # Idle since the last download: warmed over loopback first, as the runner does
    # (experiments/executor.py _rewarm): an idle server's next handshake ran 1-4 ms late.
    servers.rewarm(hosts["nginx"].container, "nginx")
    # The libcurl QUIC transport is no value of the descriptor's protocol: the flags as given.
    argv = tool_argv(
        "video_download",
        "video/dash/manifest.mpd",
        address,
        timeout_s=120,
        workload_args={"--duration": f"{duration:g}"},
        repetitions=reps,
    )
    argv += ["--buffer", str(BUFFER_S), *args]
    proc = tb.client.exec(argv, timeout=130 * reps)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == reps, (proc.returncode, proc.stderr[-800:])
    return rows


def test_handshakes_cost_their_rtts_and_playout_never_stalls(testbed):
    with testbed(load_profile("india")) as (tb, hosts):
        rtt = check_rtt(tb, 30)
        assert rtt.passed, rtt
        for protocol, (args, expected) in PROTOCOLS.items():

            def handshakes_within(rows: list[dict], protocol: str = protocol, expected: int = expected):
                assert all(r["error"] == "" for r in rows), rows[0]["error"]
                net = statistics.median(
                    net_connection_rtts(r["connection_time_ms"], r["client_cpu_ms"], rtt.measured)
                    for r in rows
                )
                raw = statistics.median(r["connection_time_ms"] for r in rows) / rtt.measured
                assert row_connection_within(expected, net, rtt.measured), (protocol, net, raw)

            # A handshake's few ms above the RTT are the endpoints' CPU: measured on a busy
            # host, they are measured again (CI once saw quic-ngtcp2 at 1.043 RTT, unmetered;
            # 16 loads here: 1.010-1.033, median 1.018).
            rows = remeasured(
                f"video_download {protocol}",
                lambda args=args: _download(tb, hosts, args, reps=3),
                handshakes_within,
                lambda rows: any(r.get("cpu_bound") for r in rows),
                own=[tb.client.container, hosts["nginx"].container],
            )
            second = [r["second_connection_time_ms"] for r in rows]
            if protocol.startswith("quic"):
                assert second == [None] * 3  # both streams on the first connection
            else:  # the audio connection: a full handshake too (no session resumed)
                ratio = statistics.median(second) / rtt.measured
                assert expected * 0.97 <= ratio <= expected * 1.15, (protocol, ratio)
            for r in rows:
                assert (r["stalls"], r["late_segments"], r["stall_ms"]) == (0, 0, 0.0), r
                assert r["segments"] == 2 * MEDIA_S / video.SEGMENT_SECONDS
                assert r["rendition"] == video.LADDER[-1][0]
                # paced: the last segment is asked for when playout reaches MEDIA_S - 2 - 4
                assert r["download_time_ms"] / 1e3 >= MEDIA_S - video.SEGMENT_SECONDS - BUFFER_S
                assert r["video_rate_mbps"] > r["audio_rate_mbps"] > 0


def test_a_path_slower_than_the_rendition_stalls(testbed):
    # 2 Mbit/s: below the top rendition (2.5 Mbit/s) and its audio
    with testbed(load_profile("india", {"down.rate_mbit": "2"})) as (tb, hosts):
        row = _download(tb, hosts, PROTOCOLS["quic-ngtcp2"][0], reps=1, duration=12)[0]
        assert row["error"] == "", row["error"]
        assert row["stalls"] >= 1 and row["stall_ms"] > 1000, row
        assert row["late_segments"] >= row["stalls"]
        # playout took the media plus the stalls: the last segment came after the stalls
        assert row["download_time_ms"] >= row["stall_ms"]
        assert row["throughput_mbps"] < 2
