"""The Firefox client (browser_perf --browser firefox, the tool `firefox`) on the emulated india
path (80 ms), one bring-up for all: every request over the protocol asked for (Firefox's own
report and nginx's access log), a fresh full handshake in every load, no packet of the
browser's to anywhere but the server, and the error rows (server down, a wrong CA, a page that
never loads, the browser killed), after each of which nothing of the browser is left.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from served_india import served_india

from quicbed.clients.tools import TOOLS
from quicbed.servers.accesslog import read_access_log
from quicbed.servers.descriptors import get_server
from quicbed.servers.lifecycle import start_server, stop_server
from quicbed.servers.testbed import CLIENT_PKI, SERVER_NAME
from quicbed.topology.net import ADDRESSES, server_address
from quicbed.workloads import object_bytes, web

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

MEDIA = "pages/media"
HOP = {"quic": "h3", "tls1.3": "h2", "tls1.2": "h2"}
PROTO = {"h3": "HTTP/3.0", "h2": "HTTP/2.0"}
TLS = {"quic": "TLSv1.3", "tls1.3": "TLSv1.3", "tls1.2": "TLSv1.2"}
HANDSHAKE_RTTS = {"quic": 1, "tls1.3": 2, "tls1.2": 3}  # Firefox: no TLS 1.2 False Start (measured)


@dataclass
class Path_:
    tb: object
    hosts: dict
    rtt: float
    logs: Path

    @property
    def address(self) -> str:
        return server_address(0)


@pytest.fixture(scope="module")
def path(tmp_path_factory, clean_slate):
    tmp = tmp_path_factory.mktemp("firefox")
    # the browser image, as the client container
    with served_india(tmp, ["nginx"], client_image=TOOLS["firefox"].image) as (tb, hosts, rtt):
        yield Path_(tb, hosts, rtt, tmp / "logs")


def _argv(path: Path_, protocol: str, reps: int = 1, timeout: int = 30, cacert: str = "") -> list[str]:
    return TOOLS["firefox"].argv(
        f"https://{SERVER_NAME}/web/{MEDIA}/index.html",
        f"{SERVER_NAME}:443:{path.address}",
        cacert or f"{CLIENT_PKI}/ca.pem",
        timeout,
        {"protocol": protocol},
        repetitions=reps,
        cpu=False,
    )


def _run(path: Path_, argv: list[str], timeout: float = 120) -> tuple[list[dict], object]:
    proc = path.tb.client.exec(argv, timeout=timeout)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return rows, proc


def _log(path: Path_) -> list[dict]:
    return read_access_log(path.logs / "nginx", get_server("nginx"))


def _leftovers(path: Path_) -> list[str]:
    procs = path.tb.client.exec(["ps", "-eo", "stat=,comm=,args="]).stdout
    dirs = path.tb.client.exec(["sh", "-c", "ls -d /tmp/quicbed-browser-* 2>/dev/null"]).stdout
    return [line for line in procs.splitlines() if "firefox" in line.lower()] + dirs.split()


def _page_files() -> set[str]:
    prefix = f"web/{MEDIA}/"
    return {f"/{rel}" for rel in web.web_files() if rel.startswith(prefix)}


# ------------------------------------------------------------------------------ protocol


@pytest.mark.parametrize("protocol", ["quic", "tls1.3", "tls1.2"])
def test_every_load_is_a_fresh_handshake_over_the_asked_protocol(path: Path_, protocol: str) -> None:
    """Two loads, two browsers: every resource over the protocol asked (Resource Timing and
    BiDi), the same in nginx's log with the pinned TLS version, two full handshakes of n RTT
    (none resumed), two client ports, the page's bytes."""
    before = len(_log(path))
    rows, proc = _run(path, _argv(path, protocol, reps=2))
    assert proc.returncode == 0 and len(rows) == 2, (proc.returncode, proc.stderr[-800:], rows)
    assert all(r["error"] == "" for r in rows), rows
    hop, assets = HOP[protocol], len(_page_files()) - 1
    n, rtt = HANDSHAKE_RTTS[protocol], path.rtt
    ratios = [r["connection_time_ms"] / rtt for r in rows]
    print(
        f"firefox {protocol}: connection ÷ RTT {[round(x, 3) for x in ratios]}, "
        f"load ms {[r['page_load_time_ms'] for r in rows]}"
    )
    for row in rows:
        assert row["tool"] == "firefox" and row["browser"] == "firefox"
        assert row["resource_protocols"] == {hop: assets + 1}, row["resource_protocols"]
        assert row["resources"] == assets and row["http_version"] == hop[1:]
        assert row["bytes"] == object_bytes("web", MEDIA)
        assert row["remote_ip"] == path.address and row["tls_version"] == TLS[protocol]
        assert row["tool_version"] and row["tool_version"] in row["library"]
        assert row["ttfb_ms"] - row["connection_time_ms"] >= 0.95 * rtt
    assert all(n - 0.05 <= x <= n + 0.6 for x in ratios), ratios
    assert len({r["local_port"] for r in rows}) == 2 and all(r["local_port"] for r in rows)
    time.sleep(0.3)  # the access log line of the last response
    entries = _log(path)[before:]
    assert sorted(e["path"] for e in entries) == sorted([*_page_files()] * 2), entries
    assert {(e["proto"], e["tls"], e["status"]) for e in entries} == {(PROTO[hop], TLS[protocol], 200)}
    assert not any(e["resumed"] for e in entries), entries


def test_no_packet_leaves_the_testbed(path: Path_) -> None:
    """A capture on every interface of the client but loopback (Firefox's BiDi socket) over a
    QUIC and a TLS load, from the browser's start to its end: every packet is between the
    client and the server's port 443 (or the client's ICMP answers to the server); no DNS, no
    telemetry, no update check, nothing else. And to the server, only the two measured
    connections, from the ports the rows name: Firefox's own Remote Settings fetches, sent to
    the server by network.dns.forceResolve, were 13 TLS handshakes on the path in every load."""
    script = (
        "tcpdump -i any -n -l -U -w /tmp/ff.pcap 'not host 127.0.0.1 and not ip6 host ::1' "
        "2>/dev/null & cap=$!; sleep 1; "
        f"{' '.join(_argv(path, 'quic'))} >/tmp/ff.json; {' '.join(_argv(path, 'tls1.3'))} >>/tmp/ff.json; "
        "sleep 1; kill $cap; wait $cap; tcpdump -n -r /tmp/ff.pcap 2>/dev/null"
    )
    out = path.tb.client.exec(["sh", "-c", script], timeout=180).stdout
    rows = [json.loads(line) for line in path.tb.client.exec(["cat", "/tmp/ff.json"]).stdout.splitlines()]
    # Both loads worked: the browser reached the server only through what the profile allows.
    assert [(r["protocol"], r["error"]) for r in rows] == [("quic", ""), ("tls1.3", "")], rows
    lines = [line for line in out.splitlines() if line.strip()]
    server = re.escape(path.address)
    ok = re.compile(r"IP6? (\S+) > (\S+): ")
    strays = []
    for line in lines:
        m = ok.search(line)
        if not m:
            if "ARP" in line:  # the link's own neighbour resolution, not the browser's
                continue
            strays.append(line)
            continue
        ends = (m.group(1), m.group(2).rstrip(":"))
        if any(re.fullmatch(rf"{server}\.443", e) for e in ends):
            continue
        # The client's port-unreachable answers to the server's last QUIC packets, after the
        # browser (and its socket) is gone: between the two hosts, nothing else.
        if " ICMP " in line and path.address in ends:
            continue
        strays.append(line)
    print(f"{len(lines)} packets captured, {len(strays)} not to or from {path.address}:443")
    assert len(lines) > 20, out[-2000:]
    assert any(" UDP" in line or "quic" in line.lower() for line in lines)
    assert strays == [], strays[:10]
    client = re.compile(rf"IP6? {re.escape(ADDRESSES['client'])}\.(\d+) > ")
    on_wire = {
        ("udp" if " UDP" in line else "tcp", int(m.group(1))) for line in lines if (m := client.search(line))
    }
    assert on_wire == {("udp", rows[0]["local_port"]), ("tcp", rows[1]["local_port"])}, on_wire


# ------------------------------------------------------------------------------ errors


@contextmanager
def _paused(container: str):
    subprocess.run(["docker", "pause", container], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["docker", "unpause", container], check=True, capture_output=True)


def _error_row(path: Path_, argv: list[str]) -> tuple[dict, float]:
    start = time.monotonic()
    rows, proc = _run(path, argv)
    wall = time.monotonic() - start
    assert proc.returncode == 1 and len(rows) == 1, (proc.returncode, proc.stderr[-500:], rows)
    (row,) = rows
    assert row["error"] and "\n" not in row["error"] and row["tool"] == "firefox"
    assert _leftovers(path) == []
    return row, wall


# QUIC: neqo takes no ICMP port-unreachable as a refusal and, with the h3 mapping, Firefox
# does not retry over TCP before the timeout (measured: 30 of 30 s): a timeout row, not connect.
@pytest.mark.parametrize(("protocol", "category"), [("quic", "timeout: "), ("tls1.3", "connect: ")])
def test_server_down_is_an_error_row(path: Path_, protocol: str, category: str) -> None:
    container = path.hosts["nginx"].container
    stop_server(container, "nginx")
    try:
        row, _ = _error_row(path, _argv(path, protocol, timeout=6))
    finally:
        start_server(container, "nginx", timeout=30)
    assert row["error"].startswith(category), row["error"]


def _other_ca(path: Path_) -> str:
    path.tb.client.exec(
        [
            "sh",
            "-c",
            "test -s /tmp/other-ca.pem || openssl req -x509 -newkey ec "
            "-pkeyopt ec_paramgen_curve:P-256 -nodes -keyout /tmp/other-ca.key "
            "-out /tmp/other-ca.pem -days 2 -subj /CN=other 2>/dev/null",
        ],
        check=True,
    )
    return "/tmp/other-ca.pem"


@pytest.mark.parametrize("protocol", ["quic", "tls1.2"])
def test_a_ca_that_did_not_sign_the_server_is_a_tls_error(path: Path_, protocol: str) -> None:
    row, _ = _error_row(path, _argv(path, protocol, cacert=_other_ca(path)))
    assert row["error"].startswith("tls: "), row["error"]
    assert row["page_load_time_ms"] is None and row["http_status"] == 0


def test_a_page_that_never_loads_times_out(path: Path_) -> None:
    with _paused(path.hosts["nginx"].container):
        row, wall = _error_row(path, _argv(path, "tls1.3", timeout=4))
    assert row["error"].startswith("timeout: "), row["error"]
    assert wall < 4 + 10  # the runner gives up at timeout + 15 s


def test_a_browser_killed_mid_load_is_a_browser_error(path: Path_) -> None:
    """The browser's main process killed while the server does not answer (paused)."""
    script = (
        f"{' '.join(_argv(path, 'tls1.3', timeout=20))} >/tmp/bg.json 2>/tmp/bg.err & bp=$!; "
        "i=0; while ! pgrep -x firefox-esr >/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; "
        "sleep 2; pkill -9 -x firefox-esr; wait $bp; echo \"exit=$?\"; cat /tmp/bg.json"
    )
    with _paused(path.hosts["nginx"].container):
        out = path.tb.client.exec(["sh", "-c", script], timeout=120).stdout
    status, _, rows = out.partition("\n")
    assert status == "exit=1", out
    row = json.loads(rows)
    assert row["error"].startswith("browser: "), row["error"]
    assert _leftovers(path) == []
