"""The headless-Chromium client (clients/browser) on the emulated india path (80 ms).

One page load per fresh browser: every request over the protocol asked for (the browser's own
report and the servers' access logs), a fresh connection's cost in RTTs (QUIC 1, TLS 1.3 2,
TLS 1.2 2 because Chromium always uses False Start), the browser's instants against a capture,
each landing page's assets, and the error rows, after each of which nothing of the browser is
left in the client container.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from capture_shell import ARRIVING, attempt_line, tool_earlier_than_wire, wirecheck
from contention import LoadMeter, remeasured
from served_india import served_india

from quicbed.analysis.physics import GOODPUT_OF_MODEL, HANDSHAKE_RTTS, tcp_download_s
from quicbed.clients.tools import TOOLS
from quicbed.servers.accesslog import read_access_log
from quicbed.servers.descriptors import get_server
from quicbed.servers.lifecycle import start_server, stop_server
from quicbed.servers.testbed import CLIENT_PKI, SERVER_NAME
from quicbed.topology.calibrate import GOODPUT_CEILING
from quicbed.topology.net import server_address
from quicbed.topology.profiles import load_profile
from quicbed.workloads import object_bytes, web

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

MEDIA = "pages/media"  # the bench's page: six assets of every kind
CLOUD_FILE = "10MB"  # the cloud download's: 4 s at india's 20 Mbit/s
HOP = {"quic": "h3", "tls1.3": "h2", "tls1.2": "h2"}
PROTO = {"h3": "HTTP/3.0", "h2": "HTTP/2.0"}
TLS = {"quic": "TLSv1.3", "tls1.3": "TLSv1.3", "tls1.2": "TLSv1.2"}
FRESH_RTTS = {"quic": 1, "tls1.3": 2, "tls1.2": 2}  # TLS 1.2: False Start
# How far the browser may put the first byte before its capture: its timing entries are
# coarsened (100 us, with jitter) and made epoch through timeOrigin; far below the 3 ms bound.
SIGN_SLACK_MS = 1.0
ENDPOINT_MAX_RTT = 0.4  # the browser's own time in a handshake, measured ~5-25 ms at 80 ms


@dataclass
class Path_:
    tb: object
    hosts: dict
    rtt: float
    logs: Path

    def address(self, server: str) -> str:
        return server_address(self.tb.servers.index(self.hosts[server]))


@pytest.fixture(scope="module")
def path(tmp_path_factory, clean_slate):
    tmp = tmp_path_factory.mktemp("browser")
    # the browser image, as the client container; the cloud download's file
    with served_india(
        tmp, ["nginx", "caddy"], files=[CLOUD_FILE], client_image=TOOLS["chromium"].image, rtt_samples=30
    ) as (tb, hosts, rtt):
        yield Path_(tb, hosts, rtt, tmp / "logs")


def _url(obj: str) -> str:
    return f"https://{SERVER_NAME}/web/{obj}/index.html"


def _argv(
    path: Path_,
    server: str,
    protocol: str,
    obj: str = MEDIA,
    reps: int = 1,
    timeout: int = 30,
    cacert: str = f"{CLIENT_PKI}/ca.pem",
    address: str = "",
    browser: str = "",
) -> list[str]:
    options = {"protocol": protocol, **({"browser": browser} if browser else {})}
    resolve = f"{SERVER_NAME}:443:{address or path.address(server)}"
    return TOOLS["chromium"].argv(_url(obj), resolve, cacert, timeout, options, repetitions=reps)


def _run(path: Path_, argv: list[str], timeout: float = 120) -> tuple[list[dict], object]:
    proc = path.tb.client.exec(argv, timeout=timeout)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return rows, proc


def _load(path: Path_, server: str, protocol: str, **kw) -> list[dict]:
    rows, proc = _run(path, _argv(path, server, protocol, **kw))
    assert proc.returncode == 0 and rows, (proc.returncode, proc.stderr[-800:], rows[-1:])
    assert all(r["error"] == "" for r in rows), rows
    return rows


def _log(path: Path_, server: str) -> list[dict]:
    return read_access_log(path.logs / server, get_server(server))


def _leftovers(path: Path_) -> list[str]:
    """What a load may leave in the client container: browser processes (Chromium, its
    crashpad handlers, Playwright's node driver) and temp directories."""
    procs = path.tb.client.exec(["ps", "-eo", "stat=,args="]).stdout
    dirs = path.tb.client.exec(
        ["sh", "-c", "ls -d /tmp/quicbed-browser-* /tmp/playwright* " "2>/dev/null"]
    ).stdout
    left = [
        line
        for line in procs.splitlines()
        if any(k in line for k in ("chromium", "chrome_crashpad", "playwright"))
    ]
    return left + dirs.split()


def _page_files(obj: str) -> set[str]:
    prefix = f"web/{obj}/"
    return {f"/{rel}" for rel in web.web_files() if rel.startswith(prefix)}


# ------------------------------------------------------------------------------ protocol


@pytest.mark.parametrize(
    ("server", "protocol"),
    [("nginx", "quic"), ("nginx", "tls1.3"), ("nginx", "tls1.2"), ("caddy", "quic"), ("caddy", "tls1.2")],
)
def test_every_request_goes_over_the_asked_protocol(path: Path_, server: str, protocol: str) -> None:
    before = len(_log(path, server))
    (row,) = _load(path, server, protocol)
    time.sleep(0.3)  # the access log line of the last response
    entries = _log(path, server)[before:]
    hop = HOP[protocol]
    assets = len(_page_files(MEDIA)) - 1
    assert row["resource_protocols"] == {hop: assets + 1}, row["resource_protocols"]
    assert (row["resources"], row["connections"]) == (assets, 1)
    assert (row["http_version"], row["tls_version"]) == (hop[1:], TLS[protocol])
    assert (row["remote_ip"], row["remote_port"]) == (path.address(server), 443)
    assert row["bytes"] == object_bytes("web", MEDIA)  # encodedBodySize: nothing compressed
    assert row["tool_version"].startswith(row["library"].split()[1].rstrip(";"))
    # The server saw exactly the page's requests, each over that protocol and TLS version.
    assert sorted(e["path"] for e in entries) == sorted(_page_files(MEDIA)), entries
    assert {(e["proto"], e["tls"], e["status"]) for e in entries} == {
        (PROTO[hop], TLS[protocol], 200)
    }, entries
    assert not any(e["resumed"] for e in entries)


# ------------------------------------------------------------------------------ cloud


@pytest.mark.parametrize("protocol", ["quic", "tls1.3"])
def test_a_cloud_download_crosses_the_link_at_its_rate(path: Path_, protocol: str) -> None:
    """--workload cloud: the 10 MB file fetched in a blank page of its origin, over the one
    connection the fetch opens, its protocol proven by the browser (Resource Timing, DevTools)
    and by nginx's log, and its goodput within the TCP model of the link (setup RTTs, request,
    slow start, payload at line rate: analysis/physics.py), as the matrix holds every stack to;
    nothing left behind."""
    before = len(_log(path, "nginx"))
    argv = _argv(path, "nginx", protocol)
    argv[argv.index("--url") + 1] = f"https://{SERVER_NAME}/cloud/{CLOUD_FILE}"
    rows, proc = _run(path, [*argv, "--workload", "cloud"])
    assert proc.returncode == 0 and rows, (proc.returncode, proc.stderr[-800:], rows[-1:])
    (row,) = rows
    assert row["error"] == "", row
    size, hop, rate = object_bytes("cloud", CLOUD_FILE), HOP[protocol], load_profile("india").down.rate_mbit
    assert (row["bytes"], row["http_status"]) == (size, 200)
    assert (row["http_version"], row["tls_version"], row["resource_protocols"]) == (
        hop[1:],
        TLS[protocol],
        {hop: 1},
    )
    assert (row["connections"], row["remote_ip"]) == (1, path.address("nginx"))
    assert row["local_port"], row  # the one socket the browser had to the server
    assert row["page_load_time_ms"] is None and row["fcp_ms"] is None  # a transfer, not a page
    # The fetch's own connection: n RTT (plus the browser's own time), then the request's.
    n = FRESH_RTTS[protocol]
    assert n - 0.05 <= row["connection_time_ms"] / path.rtt <= n + 0.6, row["connection_time_ms"]
    assert row["ttfb_ms"] - row["connection_time_ms"] >= 0.95 * path.rtt
    model = tcp_download_s(size, rate, path.rtt, HANDSHAKE_RTTS[protocol])
    of_model = model * 1e3 / row["download_time_ms"]
    print(
        f"cloud {protocol}: {row['throughput_mbps']:.2f} Mbit/s, model/measured {of_model:.3f}, "
        f"browser CPU {row['browser_cpu_ms']:.0f} ms ({row['browser_cpu_pct']} % of a core), "
        f"cpu_bound {row['cpu_bound']}"
    )
    assert GOODPUT_OF_MODEL <= of_model, (of_model, row["download_time_ms"])
    assert row["throughput_mbps"] <= GOODPUT_CEILING * rate
    assert row["browser_cpu_ms"] > 0 and row["browser_cpu_pct"] > 0
    assert abs(row["download_time_ms"] / 1e3 - (row["t_done"] - row["t_start"])) < 0.01
    time.sleep(0.3)  # the access log line of the response
    entries = _log(path, "nginx")[before:]
    assert [(e["path"], e["proto"], e["tls"], e["status"]) for e in entries] == [
        (f"/cloud/{CLOUD_FILE}", PROTO[hop], TLS[protocol], 200)
    ], entries
    assert _leftovers(path) == []


# ------------------------------------------------------------------------------ physics


@pytest.mark.parametrize("protocol", ["quic", "tls1.3", "tls1.2"])
def test_fresh_connections_cost_their_rtts(path: Path_, protocol: str) -> None:
    """Three loads, three browsers: three full handshakes of n RTT plus the browser's own time
    (connectStart to connectEnd of the document, as Chromium reports it)."""
    n, rtt = FRESH_RTTS[protocol], path.rtt
    before = 0

    def measure() -> list[dict]:
        nonlocal before
        before = len(_log(path, "nginx"))  # the judged attempt's log lines only
        rows = _load(path, "nginx", protocol, obj="pages/news", reps=3)
        ratios = [r["connection_time_ms"] / rtt for r in rows]
        # Never shorter than the path's RTTs, whatever the host.
        assert all(n - 0.05 <= x for x in ratios), ratios
        return rows

    def judge(rows: list[dict]) -> None:
        ratios = [r["connection_time_ms"] / rtt for r in rows]
        # Whole RTTs apart; one load may wait longer for a CPU (the renderer starts meanwhile).
        assert all(x <= n + 0.6 for x in ratios), ratios
        endpoint = statistics.median(r["connection_time_ms"] - n * rtt for r in rows)
        print(
            f"{protocol}: connection ÷ RTT {[round(x, 3) for x in ratios]}, "
            f"browser's endpoint time (median) {endpoint:.1f} ms"
        )
        assert endpoint < ENDPOINT_MAX_RTT * rtt

    # The browser's endpoint time is its CPU: a slow spell (fresh processes at 3-4x their
    # cost) or steal makes it long, so such an attempt is measured again on a calm host. Its
    # own start makes its processes wait for each other (PSI about 42 % of a load): that
    # pressure is what is measured here, not a neighbour's, so it does not count.
    hosts = [path.tb.client.container, path.hosts["nginx"].container]
    rows = remeasured(
        f"{protocol} fresh loads",
        measure,
        judge,
        own=hosts,
        meter=lambda own: LoadMeter(own, own_pressure=True),
    )
    assert len(rows) == 3
    # The request follows the handshake: its answer takes at least one more RTT.
    assert all(r["ttfb_ms"] - r["connection_time_ms"] >= 0.95 * rtt for r in rows), rows
    assert [r["rep"] for r in rows] == [0, 1, 2]
    assert len({r["local_port"] for r in rows}) == 3 and all(r["local_port"] for r in rows)
    assert not any(r["resumed"] for r in rows)
    time.sleep(0.3)
    entries = _log(path, "nginx")[before:]
    assert sum(e["path"].endswith("/index.html") for e in entries) == 3
    assert not any(e["resumed"] for e in entries), entries


@pytest.mark.parametrize("protocol", ["quic", "tls1.3", "tls1.2"])
def test_browser_packets_cross_the_emulated_link(path: Path_, protocol: str) -> None:
    """A capture on the client's emulated interface, decrypted with the browser's key log:
    its first RTT is the path's, and the browser's handshake and first-byte instants are the
    wire's within 3 ms. The browser's handshake is its own Finished leaving, in every protocol
    (TLS 1.2: Chromium's False Start, wirecheck.py --false-start). It was once judged against
    the server's Finished arriving, one RTT later, and so held the server's turn too: nginx's
    3.2 ms on a busy CI host failed it (stop 68), though the path and the browser were right.
    A busy host only makes the browser late, so a contended attempt is measured again
    (tests/contention.py), never judged; every attempt is reported, decrypted, and none puts
    the first byte before the capture saw it (the handshake, a packet leaving: no sign)."""
    command = " ".join(_argv(path, "nginx", protocol))
    report: list[str] = []
    shell = wirecheck(command, "client-eth0", "/tmp/bw", false_start=protocol == "tls1.2")

    def measure() -> dict:
        proc = path.tb.client.exec(["sh", "-c", shell], timeout=120)
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        report.append(attempt_line(len(report), result))
        print(f"{protocol} {report[-1]}")
        assert result["decrypted"], (result, report)
        assert tool_earlier_than_wire(result, ARRIVING, SIGN_SLACK_MS) == [], (result, report)
        # Never shorter than the calibrated RTT, whatever the host: a path around the link
        # takes well under 1 ms.
        assert 0.99 * path.rtt <= result["wire_first_rtt_ms"], (result, report)
        return result

    def judge(result: dict) -> None:
        # The first round trip on the wire is the emulated path's, longer only by what a UML
        # router's timers add to one sample (3.6 ms once in CI). A UML router runs at the
        # default priority: a browser starting on both cores delayed its first flights by
        # 23 ms in CI, which is a contended host's figure, measured again.
        assert result["wire_first_rtt_ms"] <= 1.1 * path.rtt, (result, report)
        events = {k: result["events"][k]["delta_ms"] for k in ("handshake", "first_byte")}
        worst = max(abs(events["handshake"]), abs(events["first_byte"]))
        assert worst <= 3.0, report

    remeasured(f"{protocol} browser against wire", measure, judge)


# ------------------------------------------------------------------------------ pages


def test_each_landing_page_fetches_exactly_its_assets(path: Path_) -> None:
    report = []
    for site in web.LANDING_PAGES:
        obj = f"pages/{site}"
        (row,) = _load(path, "nginx", "quic", obj=obj)
        assets = len(_page_files(obj)) - 1
        assert row["resources"] == assets and row["resource_protocols"] == {"h3": assets + 1}
        assert row["bytes"] == object_bytes("web", obj)
        assert row["ttfb_ms"] < row["fcp_ms"] <= row["lcp_ms"], row
        assert row["dom_content_loaded_ms"] <= row["page_load_time_ms"], row
        report.append((site, row["fcp_ms"], row["page_load_time_ms"]))
        # All of a page's assets come in one flight after the HTML: the load event can fire
        # before the frame that paints first (a frame or two); never much later.
        assert row["fcp_ms"] <= row["page_load_time_ms"] + 60, row
    print("fcp / load (ms):", report)


# ------------------------------------------------------------------------------ errors


@contextmanager
def _paused(container: str):
    subprocess.run(["docker", "pause", container], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["docker", "unpause", container], check=True, capture_output=True)


def _error_row(path: Path_, argv: list[str], timeout: float = 120) -> tuple[dict, float]:
    start = time.monotonic()
    rows, proc = _run(path, argv, timeout=timeout)
    wall = time.monotonic() - start
    assert proc.returncode == 1 and len(rows) == 1, (proc.returncode, proc.stderr[-500:], rows)
    (row,) = rows
    assert row["error"] and "\n" not in row["error"]
    assert _leftovers(path) == []
    return row, wall


@pytest.mark.parametrize("protocol", ["quic", "tls1.3"])
def test_server_down_is_a_connect_error(path: Path_, protocol: str) -> None:
    container = path.hosts["caddy"].container
    stop_server(container, "caddy")
    try:
        row, _ = _error_row(path, _argv(path, "caddy", protocol))
    finally:
        start_server(container, "caddy", timeout=30)
    assert row["error"].startswith("connect: ERR_"), row["error"]


@pytest.mark.parametrize("protocol", ["quic", "tls1.3", "tls1.2"])
def test_a_ca_that_did_not_sign_the_server_is_a_tls_error(path: Path_, protocol: str) -> None:
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
    row, _ = _error_row(path, _argv(path, "nginx", protocol, cacert="/tmp/other-ca.pem"))
    assert row["error"].startswith("tls: "), row["error"]
    assert row["page_load_time_ms"] is None and row["http_status"] == 0


@pytest.mark.parametrize("protocol", ["quic", "tls1.3"])
def test_a_page_that_never_loads_times_out(path: Path_, protocol: str) -> None:
    with _paused(path.hosts["caddy"].container):
        row, wall = _error_row(path, _argv(path, "caddy", protocol, timeout=4))
    assert row["error"].startswith("timeout: "), row["error"]
    assert wall < 4 + 10  # the runner gives up at timeout + 15 s


def _in_background(path: Path_, argv: list[str], then: str) -> str:
    """Start browser_perf in the client container against a paused server, wait for its
    browser, then run `then` (with $bp = browser_perf's pid, $chrome = the browser's)."""
    script = (
        f"{' '.join(argv)} >/tmp/bg.json 2>/tmp/bg.err & bp=$!; i=0; chrome=; "
        "while [ -z \"$chrome\" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); "
        "chrome=$(ps -eo pid=,args= | awk '$2 == \"/usr/lib/chromium/chromium\" && "
        "!/--type=/ {print $1}'); done; sleep 1.5; "
        f"{then}; wait $bp; echo \"exit=$?\"; cat /tmp/bg.json"
    )
    with _paused(path.hosts["caddy"].container):
        return path.tb.client.exec(["sh", "-c", script], timeout=120).stdout


def test_a_browser_killed_mid_load_is_a_browser_error(path: Path_) -> None:
    # The whole browser dies, as in a crash: a zygote that outlived its parent could keep
    # Playwright's pipe open, and the run would end as a timeout instead. By process name
    # (-x), not command line (-f): the shell running this has the browser's path in its own
    # command line, and `pkill -f` killed it (an empty output, seen in CI).
    out = _in_background(
        path, _argv(path, "caddy", "tls1.3", timeout=20), "kill -9 $chrome; pkill -9 -x chromium"
    )
    status, _, rows = out.partition("\n")
    assert status == "exit=1", out
    row = json.loads(rows)
    assert row["error"].startswith("browser: "), row["error"]
    assert _leftovers(path) == []


def test_sigterm_closes_the_browser_and_removes_its_files(path: Path_) -> None:
    out = _in_background(path, _argv(path, "caddy", "quic", timeout=20), "kill -TERM $bp")
    assert out.strip() == "exit=143", out
    assert _leftovers(path) == []


# ------------------------------------------------------------------------------ CPU-bound

HOG_S = 20  # the hog's own limit, should the test die before it kills the hog
SHELL = "headless-shell"  # the cheap browser: on an idle host its loads leave CPU idle


@contextmanager
def _cpu_hog(path: Path_):
    """One busy loop per CPU in the client container: the host has no idle CPU left."""
    shell = (
        f"for i in $(seq $(nproc)); do timeout {HOG_S} sh -c 'while :; do :; done' "
        ">/dev/null 2>&1 & echo $!; done"
    )
    pids = path.tb.client.exec(["sh", "-c", shell], check=True).stdout.split()
    try:
        time.sleep(0.5)
        yield
    finally:
        path.tb.client.exec(["kill", *pids])


@contextmanager
def _cpu_quota(path: Path_, cpus: float):
    """A CPU quota on the client container (the CFS quota docker sets), removed after."""
    subprocess.run(["docker", "update", f"--cpus={cpus}", path.tb.client.container], check=True)
    try:
        yield
    finally:
        subprocess.run(["docker", "update", "--cpus=0", path.tb.client.container], check=True)


def test_cpu_bound_flags_a_starved_load_and_not_an_idle_one(path: Path_) -> None:
    """The flag from what limits a load: on an idle host the CPUs stay partly idle and no thread
    runs the whole load; with a busy loop per CPU (no idle CPU) or a quota of a quarter CPU
    (throttled) the same load is flagged. The idle load is judged on an uncontended host: the
    host is shared, and another user's work is a CPU limit too, so a load measured while the
    host was contended (its pressure or steal, tests/contention.py) is measured again."""

    def judge(row: dict) -> None:
        assert row["browser"] == "headless-shell" and "chromium-headless-shell" in row["library"], row
        assert not row["cpu_bound"], {k: row[k] for k in row if "cpu" in k or "thread" in k or "idle" in k}
        assert row["host_idle_pct"] >= 10 and row["busiest_thread_pct"] < 90, row

    row = remeasured("an idle load", lambda: _load(path, "nginx", "quic", browser=SHELL)[0], judge)
    with _cpu_hog(path):
        hogged = _load(path, "nginx", "quic", browser=SHELL)[0]
    assert hogged["cpu_bound"] and hogged["host_idle_pct"] < 10, hogged
    assert hogged["cpu_wait_ms"] > row["cpu_wait_ms"], (hogged["cpu_wait_ms"], row["cpu_wait_ms"])
    with _cpu_quota(path, 0.25):
        quota = _load(path, "nginx", "quic", browser=SHELL)[0]
    assert quota["cpu_bound"] and quota["cpu_throttled_ms"] > 0.1 * quota["page_load_time_ms"], quota
    assert _leftovers(path) == []


def _network(row: dict) -> dict:
    """What the browser choice must not change: every resource's protocol, the connections, the
    TLS version and group, the HTTP version, the page's bytes."""
    keys = ("resource_protocols", "connections", "tls_version", "tls_group", "bytes", "http_version")
    return {k: row[k] for k in keys}


@pytest.mark.parametrize("protocol", ["quic", "tls1.3"])
def test_the_headless_shell_loads_like_the_full_browser(path: Path_, protocol: str) -> None:
    """The same page over the same protocol: the same network behaviour in both browsers (and
    in nginx's log: every file of the page once per load, over the protocol), a handshake of
    the protocol's RTTs, for less CPU. The full browser's handshake is not compared: on two
    cores it is often CPU-bound and stretched by a whole RTT (bench/browser_bench.py)."""
    before = len(_log(path, "nginx"))
    full = _load(path, "nginx", protocol, browser="chromium-full")[0]
    # Three fresh loads, their median judged: one load in many (CI, 2026-12-07, a calm host:
    # no steal, 17 % of a core) took a whole RTT more for its QUIC handshake (171.8 ms at
    # 80.2). None may take less than the protocol's RTTs.
    shells = _load(path, "nginx", protocol, browser=SHELL, reps=3)
    ratios = [r["connection_time_ms"] / path.rtt for r in shells]
    shell = shells[0]
    assert all(_network(r) == _network(full) for r in shells), (shells, full)
    assert all(x >= FRESH_RTTS[protocol] - 0.05 for x in ratios), ratios
    assert round(statistics.median(ratios)) == FRESH_RTTS[protocol], (ratios, shells)
    assert "chromium-headless-shell" in shell["library"] and shell["tool_version"] == full["tool_version"]
    time.sleep(0.3)  # the access log line of the last response
    logged = _log(path, "nginx")[before:]
    files = [e["path"] for e in logged]
    assert sorted(files) == sorted(4 * list(_page_files(MEDIA))), files
    assert {(e["proto"], e["tls"]) for e in logged} == {(PROTO[HOP[protocol]], TLS[protocol])}
    shell_cpu = statistics.median(r["browser_cpu_ms"] for r in shells)
    assert shell_cpu < full["browser_cpu_ms"], (shell_cpu, full["browser_cpu_ms"])


def test_the_headless_shell_refuses_tls12_it_cannot_pin(path: Path_) -> None:
    rows, proc = _run(path, _argv(path, "nginx", "tls1.2", browser=SHELL))
    assert proc.returncode == 3 and rows == [] and "--ssl-version-max" in proc.stderr, proc.stderr
