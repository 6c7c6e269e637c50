"""Each server × protocol over the emulated path: right bytes, and the server's own log shows
the protocol and TLS version the client asked for."""

from __future__ import annotations

import json
import statistics
import subprocess
from typing import Any

import pytest
from contention import remeasured

from quicbed import servers
from quicbed.analysis.physics import HANDSHAKE_RTTS, net_connection_rtts, row_upper_rtts
from quicbed.clients.tools import tool_argv
from quicbed.paths import CACHE, REPO
from quicbed.servers.testbed import served_testbed
from quicbed.topology.calibrate import check_rtt
from quicbed.topology.net import server_address
from quicbed.topology.profiles import load_profile
from quicbed.workloads import cloud, ensure_content, store

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

SERVERS = ["caddy", "nginx", "haproxy", "aioquic", "quiche", "quinn"]
COMPILED = ["aioquic", "quiche", "quinn"]  # images built on demand (images/build.sh NAME)
# (tool, options, access-log protocol, TLS version, handshake RTTs of a fresh connection)
MODES = {
    "h2-tls1.2": (
        "tls_perf",
        {"tls": "1.2", "http": "2"},
        "HTTP/2.0",
        "TLSv1.2",
        HANDSHAKE_RTTS["tls1.2"],
    ),
    "h2-tls1.3": (
        "tls_perf",
        {"tls": "1.3", "http": "2"},
        "HTTP/2.0",
        "TLSv1.3",
        HANDSHAKE_RTTS["tls1.3"],
    ),
    "h3": ("quic_perf", {}, "HTTP/3.0", "TLSv1.3", HANDSHAKE_RTTS["quic"]),
}
# The lower side of a handshake: n RTT less 2 % (net of the client's CPU, time that overlaps a
# flight is taken out too: 2.967 RTT for TLS 1.2 on germany, analysis/physics.py); the upper
# is the project's rule for rows, max(+3 %, +1.5 ms) above n RTT (row_upper_rtts): the
# server's own time stays in, and a server one RTT slow is far outside it.
HANDSHAKE_FLOOR = 0.02


@pytest.fixture(scope="module")
def served(tmp_path_factory, clean_slate):
    build = subprocess.run(
        [str(REPO / "images" / "build.sh"), *COMPILED], capture_output=True, text=True, timeout=3600
    )
    assert build.returncode == 0, build.stderr[-3000:]
    root = CACHE / "content"
    ensure_content(root, {"web", "video"})
    cloud.ensure_files(root, ["1MB"])
    files = store.load_manifest(root)["files"]
    segment = sorted(rel for rel in files if rel.startswith("video/") and rel.endswith(".m4s"))[0]
    objects = {rel: files[rel] for rel in ("web/index.html", "cloud/1MB", segment)}
    tmp = tmp_path_factory.mktemp("served")
    profile = load_profile("germany")
    with served_testbed(
        profile, SERVERS, log_root=tmp / "logs", pki_dir=tmp / "pki", content_dir=root, start=True
    ) as (tb, hosts):
        # The handshakes are judged in RTTs of this path as measured, which calibration's RTT
        # check proves (its tolerance: 0.5 ms at 20 ms), measured again on a contended host
        # (it read 20.4 ms once in CI, right after the three servers started).
        def proven(check: Any) -> None:
            assert check.passed, check

        rtt = remeasured("germany's RTT", lambda: check_rtt(tb, 20), proven).measured
        yield tb, hosts, objects, tmp / "logs", rtt


# The aioquic server is Python: its own handshake work (crypto in a CPU-bound event loop) was
# 1.6-2.8 ms per connection in CI, above the rows' allowance of max(3 %, 1.5 ms) at 20 ms, as
# the server's time stays in a row. Its handshakes are held to whole RTTs instead: a quarter
# of an RTT at most above n, which a missing or extra round trip crosses.
PYTHON_SERVER_EXCESS_RTT = 0.25


def _upper_rtts(server: str, rtts: int, rtt: float) -> float:
    if server == "aioquic":
        return rtts + PYTHON_SERVER_EXCESS_RTT
    return row_upper_rtts(rtts, rtt)


def _spoken(server: str, mode: str) -> bool:
    """Whether the server's descriptor speaks the mode (an HTTP/3-only server: h3 alone)."""
    spec = servers.get_server(server)
    _, _, proto, tls, _ = MODES[mode]
    return proto in spec.http_versions and tls in spec.tls_versions


@pytest.mark.parametrize(
    "server, mode", [(server, mode) for mode in MODES for server in SERVERS if _spoken(server, mode)]
)
def test_server_serves_each_protocol_over_the_path(served, server: str, mode: str) -> None:
    tb, hosts, objects, logs, rtt = served
    tool, options, log_proto, tls, rtts = MODES[mode]
    address = server_address(tb.servers.index(hosts[server]))

    def fetch() -> list[dict]:
        # Idle through the other servers' turns: warmed first over loopback, as the runner
        # warms a server idle before a trial (experiments/executor.py _rewarm).
        servers.rewarm(hosts[server].container, server)
        argvs = [tool_argv(tool, rel, address, options=options, cpu=False) + ["--sha256"] for rel in objects]
        out = [tb.client.exec(argv, timeout=60) for argv in argvs]
        return [json.loads(proc.stdout.splitlines()[-1]) for proc in out]

    def judge(rows: list[dict]) -> None:
        for row, (rel, meta) in zip(rows, objects.items(), strict=True):
            assert row["error"] == "", row["error"]
            assert (row["bytes"], row["sha256"]) == (meta["size"], meta["sha256"]), rel
            assert row["tls_version"] == tls
            assert row["http_version"] == log_proto.split("/")[1].rstrip(".0")
            assert row["remote_ip"] == address
        # Crossed the emulated path, and no more: a fresh handshake costs its n RTTs of the
        # 20 ms link, each connection at least n - 2 %, their median within the rows' rule.
        net = [net_connection_rtts(r["connection_time_ms"], r["client_cpu_ms"], rtt) for r in rows]
        shown = (net, [r["connection_time_ms"] for r in rows], rtt)
        assert min(net) >= rtts * (1 - HANDSHAKE_FLOOR), shown
        assert statistics.median(net) <= _upper_rtts(server, rtts, rtt), shown

    remeasured(
        f"{server} {mode} handshakes", fetch, judge, own=[tb.client.container, hosts[server].container]
    )
    entries = servers.read_access_log(logs / server)[-len(objects) :]
    assert [e["path"].lstrip("/") for e in entries] == list(objects)
    for entry in entries:
        assert (entry["proto"], entry["tls"]) == (log_proto, tls), entry
