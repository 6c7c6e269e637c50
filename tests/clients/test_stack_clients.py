"""The QUIC stacks' clients keep the client contract, against a real nginx (h3): every stack
client of the registry (tests/clients/stack_registry.py: a tool in its own image, not a browser;
today aioquic, quicgo, quiche and quinn), so a stack added as data is tested here untouched.

They share test_perf_tools.py's bed (nginx with --network none, the perf tools' client in its
namespace, the blackhole on 9443); each joins that namespace from its own image, built by
images/build.sh once per module. The cases are the C tools': a fetch with the perf tools' row
keys, bad input as error rows of the same categories (wrong CA, server down, timeout, 404...),
usage errors (exit 2, no rows), what its descriptor does not offer of the contract's flags
(exit 3, no rows) and every choice it does offer reaching the row. quicgo's `--streams N` (the
object as N byte ranges on one connection) runs against the shipped Caddy and nginx
(tests/server_box.py), which answer Range requests."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from server_box import ServerBox, shared_content
from stack_registry import cannot, chosen_groups, stack_clients
from test_perf_tools import BAD, ROW_KEYS, TIMEOUT_S, Bed, assert_ordered, bed, common, docker, images

from quicbed import servers
from quicbed.clients import tools
from quicbed.paths import REPO
from quicbed.workloads import store

pytestmark = pytest.mark.docker
__all__ = ["bed", "images"]  # the shared fixtures, imported to be used here

STACKS = stack_clients()  # the registry's: tests/clients/stack_registry.py


@dataclass
class Run:
    rc: int
    rows: list[dict]
    stderr: str
    elapsed: float


@dataclass
class Stack:
    name: str
    container: str
    bed: Bed

    def run(self, *args: str, timeout: float = 60) -> Run:
        t0 = time.monotonic()
        command = tools.get_tool(self.name).command
        res = docker("exec", self.container, *command, *args, timeout=timeout, check=False)
        rows = [json.loads(line) for line in res.stdout.decode().splitlines() if line.strip()]
        return Run(res.returncode, rows, res.stderr.decode(), time.monotonic() - t0)


def build_image(name: str) -> None:
    build = subprocess.run(
        [str(REPO / "images/build.sh"), name],
        capture_output=True,
        timeout=1800,
        check=False,
        env={**os.environ, "QUICBED_SAVE_IMAGES": "0"},
    )
    assert build.returncode == 0, (build.stdout + build.stderr).decode()[-3000:]


@pytest.fixture(scope="module", params=STACKS)
def aq(bed: Bed, request: pytest.FixtureRequest) -> Iterator[Stack]:
    name = request.param
    build_image(name)
    container = f"dev-{name}-{uuid.uuid4().hex[:8]}"
    try:
        docker(
            "run", "-d", "--name", container, "--network", f"container:{bed.client}",
            "-v", f"{bed.workdir}:/w", tools.get_tool(name).image, "sleep", "infinity",
        )  # fmt: skip
        yield Stack(name, container, bed)
    finally:
        docker("rm", "-f", container, check=False)


def test_fetch_gives_the_perf_tools_row(aq: Stack) -> None:
    qlog = ["--qlog", "/tmp/q.sqlog"] if tools.get_tool(aq.name).qlog_flag else []
    r = aq.run(*common(), "--sha256", "-n", "2", "--cpu", *qlog, "--keylog", "/tmp/k.log")
    assert r.rc == 0, (r.stderr, [row["error"] for row in r.rows])
    assert len(r.rows) == 2
    for rep, row in enumerate(r.rows):
        assert set(row) == ROW_KEYS | {"sha256"}, set(row) ^ ROW_KEYS
        assert row["error"] == "" and row["rep"] == rep and row["http_status"] == 200
        assert row["bytes"] == 100_000 and row["sha256"] == aq.bed.small_sha
        # What the row says of itself: the tool's name, and the library its backend names.
        assert row["tool"] == aq.name and row["backend"], row
        assert row["protocol"] == "quic" and row["library"].startswith(row["backend"] + "/")
        assert (row["tls_version"], row["http_version"]) == ("TLSv1.3", "3")
        assert row["cipher"].startswith("TLS_") and row["resumed"] is False
        assert row["tool_version"]
        assert row["local_ip"] == "127.0.0.1" and row["local_port"] > 0 and row["remote_port"] == 443
        assert 0 < row["client_cpu_ms"] < row["connection_time_ms"] * 1.5 + 5
        assert_ordered(row)
    # One connection per measurement: the key log names two client randoms, the qlog has two
    # JSON-SEQ headers (qlog 0.3) and the events of both.
    out = docker("exec", aq.container, "cat", "/tmp/k.log").stdout.decode()
    secrets = [line.split() for line in out.splitlines() if line.startswith("CLIENT_HANDSHAKE_TRAFFIC")]
    randoms = {fields[1] for fields in secrets}
    assert len(randoms) == 2
    if not qlog:
        return
    out = docker("exec", aq.container, "cat", "/tmp/q.sqlog").stdout.decode()
    records = [json.loads(rec) for rec in out.split("\x1e")[1:]]
    headers = [rec for rec in records if "qlog_version" in rec]
    assert [h["qlog_version"] for h in headers] == ["0.3", "0.3"] and len(records) > 20


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_an_error_row_of_the_c_tools_category(aq: Stack, case: str) -> None:
    """Wrong CA, server down (refused), no route, a silent server, 404, a missing CA file."""
    args, category = BAD[case]
    r = aq.run(*args, "--timeout", str(TIMEOUT_S))
    assert r.rc == 1, r.stderr
    assert len(r.rows) == 1
    row = r.rows[0]
    assert set(row) == ROW_KEYS
    assert row["error"].startswith(category + ":"), row["error"]
    assert row["t_done"] is None and row["download_time_ms"] is None
    assert row["throughput_mbps"] is None and row["local_port"] >= 0
    assert r.elapsed < TIMEOUT_S + 5


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--url"],
        ["--url", "https://x/", "-n", "0"],
        ["--url", "https://x/", "--timeout", "soon"],
        ["--url", "https://x/", "stray"],
        ["--url", "https://x/", "--http", "2"],
        ["--url", "https://x/", "--tls", "1.2"],
        ["--url", "https://x/", "--backend", "ngtcp2"],
        ["--url", "https://x/", "--resolve", "x:443"],
    ],
)
def test_usage_error_is_exit_2_without_rows(aq: Stack, args: list[str]) -> None:
    r = aq.run(*args)
    assert r.rc == 2 and r.rows == [], r
    assert "usage:" in r.stderr


def test_what_a_stack_cannot_do_is_exit_3(aq: Stack) -> None:
    """What its descriptor does not offer of the contract's flags (tests/clients/stack_registry.py)."""
    for args, words in cannot(tools.get_tool(aq.name)):
        r = aq.run(*common(), *args)
        assert r.rc == tools.UNSUPPORTED_EXIT and r.rows == [], (args, r)
        assert words in r.stderr, (args, r.stderr)


def test_what_a_stack_can_choose_reaches_the_row(aq: Stack) -> None:
    """Every congestion control and key-exchange choice its descriptor offers: the row names
    the one used (the group: the first of those the option gives)."""
    tool = tools.get_tool(aq.name)
    for cc in tool.options.get("cc", ()):
        r = aq.run(*common(), tool.flags["cc"], cc)
        assert r.rc == 0 and r.rows[0]["cc"] == cc, r
    for value, group in chosen_groups(tool).items():
        r = aq.run(*common(), tool.flags["kex"], tool.values.get("kex", {}).get(value, value))
        assert r.rc == 0 and r.rows[0]["tls_group"] == group, r
    if "kex" in tool.options:
        r = aq.run(*common(), tool.flags["kex"], "ffdhe9999")
        assert r.rc == 1 and "does not know" in r.rows[0]["error"], r


@pytest.mark.parametrize("aq", ["quinn"], indirect=True)
def test_quinn_takes_the_groups_its_crypto_provider_has(aq: Stack) -> None:
    """quinn offers no `kex` option (ring has no X25519MLKEM768, exit 3), but --groups takes
    the groups rustls's ring provider has; the one negotiated is in the row."""
    for groups in ["secp256r1", "secp384r1"]:
        r = aq.run(*common(), "--groups", groups)
        assert r.rc == 0 and r.rows[0]["tls_group"] == groups, r
    r = aq.run(*common(), "--groups", "ffdhe9999")
    assert r.rc == 1 and "does not know" in r.rows[0]["error"], r


# ---------------------------------------------------------------- quicgo --streams N

STREAM_KEYS = {"streams", "streams_completed", "connections"}  # only with --streams N > 1
CLOUD = "cloud/10MB"


@dataclass
class Served:
    """quicgo_perf in the namespace of a shipped server (Caddy or nginx) serving the content."""

    box: ServerBox
    client: str

    def run(self, *args: str, path: str = CLOUD, port: int = 443) -> Run:
        url = f"https://server.quicbed:{port}/{path}"
        argv = ["--url", url, "--resolve", f"server.quicbed:{port}:127.0.0.1", "--cacert", "/w/pki/ca.pem"]
        t0 = time.monotonic()
        command = tools.get_tool("quicgo").command
        res = docker("exec", self.client, *command, *argv, *args, timeout=60, check=False)
        rows = [json.loads(line) for line in res.stdout.decode().splitlines() if line.strip()]
        return Run(res.returncode, rows, res.stderr.decode(), time.monotonic() - t0)


def quicgo_beside(server: str, tmp: Path) -> Iterator[Served]:
    """quicgo_perf's container in the namespace of a started server's box."""
    build_image("quicgo")
    box = ServerBox(server, shared_content(), tmp)
    client = f"{box.name}-quicgo"
    try:
        servers.start_server(box.name, box.server, timeout=20)
        docker(
            "run", "-d", "--name", client, "--network", f"container:{box.name}",
            "-v", f"{tmp}:/w:ro", tools.get_tool("quicgo").image, "sleep", "infinity",
        )  # fmt: skip
        yield Served(box, client)
    finally:
        docker("rm", "-f", client, check=False)
        box.close()


@pytest.fixture(scope="module", params=["caddy", "nginx"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from quicgo_beside(request.param, tmp_path_factory.mktemp(f"streams-{request.param}"))


def test_quicgo_streams_fetch_the_object_once_on_one_connection(served: Served) -> None:
    """--streams 30: 30 ranges of the object, every one whole, on one connection; the perf
    tools' keys over all of them, and what the server logged agrees."""
    want = store.load_manifest(shared_content())["files"][CLOUD]
    before = len(servers.read_access_log(served.box.logs))
    r = served.run("--streams", "30", "--sha256", "--cpu")
    assert r.rc == 0, (r.stderr, [row["error"] for row in r.rows])
    (row,) = r.rows
    assert set(row) == ROW_KEYS | STREAM_KEYS | {"sha256"}, set(row) ^ ROW_KEYS
    assert (row["streams"], row["streams_completed"], row["connections"]) == (30, 30, 1)
    assert row["error"] == "" and row["http_status"] == 206
    assert row["bytes"] == want["size"] and row["sha256"] == want["sha256"]
    assert_ordered(row)
    assert row["throughput_mbps"] == pytest.approx(row["bytes"] * 8 / row["download_time_ms"] / 1e3, rel=1e-3)
    entries = [e for e in servers.read_access_log(served.box.logs)[before:] if e["path"] == "/" + CLOUD]
    assert len(entries) == 30 and {(e["proto"], e["status"]) for e in entries} == {("HTTP/3.0", 206)}
    assert sum(e["bytes"] for e in entries) == want["size"]
    seen = {e["connection"] for e in entries}
    assert seen == {None} or len(seen) == 1, seen  # nginx cannot tell h3 connections apart


def test_quicgo_one_stream_is_the_row_without_the_option(served: Served) -> None:
    r = served.run("--streams", "1", "--sha256")
    assert r.rc == 0, r.stderr
    (row,) = r.rows
    assert set(row) == ROW_KEYS | {"sha256"} and row["http_status"] == 200


def test_quicgo_streams_that_cannot_be_one_object_are_an_error_row(served: Served) -> None:
    """An object too small for the ranges, a 404: error rows of the C tools' category, with
    the streams keys; no stream counted whole."""
    for path, words in (("cloud/1KB", "too few for 30 streams"), ("no-such-file", "http: status 404")):
        r = served.run("--streams", "30", path=path)
        assert r.rc == 1 and len(r.rows) == 1, r
        row = r.rows[0]
        assert set(row) == ROW_KEYS | STREAM_KEYS and row["error"].startswith("http: "), row["error"]
        assert words in row["error"] and row["t_done"] is None and row["throughput_mbps"] is None
        assert (row["streams"], row["streams_completed"], row["connections"]) == (30, 0, 1)


@pytest.mark.parametrize("served", ["nginx"], indirect=True)
def test_quicgo_streams_refuse_a_server_that_ignores_range(served: Served) -> None:
    """A server answering 200 to a Range request would send the whole object on every stream:
    the row's error says so instead of counting 30 objects (the aioquic, quiche and quinn
    servers did before Range support). Here: a second nginx on 8443 with byte ranges off
    (max_ranges 0)."""
    norange = (
        "sed -e 's/listen 443 /listen 8443 /' -e 's|^pid .*|pid /tmp/norange.pid;|'"
        " -e 's/http3 on;/http3 on; max_ranges 0;/' /etc/quicbed/nginx.conf > /tmp/norange.conf"
        " && grep -q 'max_ranges 0' /tmp/norange.conf && grep -q 'listen 8443 quic' /tmp/norange.conf"
    )
    res = docker("exec", served.box.name, "sh", "-c", norange, check=False)
    assert res.returncode == 0, res.stderr.decode()
    docker("exec", "-d", served.box.name, "nginx", "-c", "/tmp/norange.conf")
    for _ in range(50):  # nginx takes the port in a few ms; a fetch without ranges proves it
        if served.run(port=8443).rc == 0:
            break
        time.sleep(0.2)
    r = served.run("--streams", "30", port=8443)
    assert r.rc == 1 and len(r.rows) == 1, r
    row = r.rows[0]
    assert row["error"].startswith("http: stream 0: status 200 to a Range request"), row["error"]
    assert (row["http_status"], row["streams_completed"], row["bytes"], row["t_done"]) == (200, 0, 0, None)


@pytest.mark.parametrize("value", ["0", "-3", "many", "1001"])
def test_quicgo_streams_usage_error(served: Served, value: str) -> None:
    r = served.run("--streams", value)
    assert r.rc == 2 and r.rows == [], r
    assert "usage:" in r.stderr


def test_quicgo_streams_with_resume_is_exit_3(served: Served) -> None:
    r = served.run("--streams", "30", "--resume")
    assert r.rc == tools.UNSUPPORTED_EXIT and r.rows == [], r
    assert "--streams with --resume" in r.stderr


# ------------------------------------------- the Rust servers' Range answers (quiche, quinn)

RANGE_SERVERS = ["quiche", "quinn", "caddy", "nginx"]  # the Rust two, and two that prove the test
RUST_SERVERS = {"quiche", "quinn"}  # their images are their clients' (build_image)
ONE_MB = "cloud/1MB"


@pytest.fixture(scope="module", params=RANGE_SERVERS)
def ranged(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """quicgo_perf in the namespace of a server that answers Range."""
    if request.param in RUST_SERVERS:
        build_image(request.param)
    yield from quicgo_beside(request.param, tmp_path_factory.mktemp(f"ranges-{request.param}"))


def test_quicgo_streams_get_206_from_every_range_server(ranged: Served) -> None:
    """--streams 30 on cloud/1MB: one connection, 30 ranges answered 206, the object whole; the
    server's log has 30 entries of status 206 whose bytes add up to the file's size."""
    want = store.load_manifest(shared_content())["files"][ONE_MB]
    before = len(servers.read_access_log(ranged.box.logs))
    r = ranged.run("--streams", "30", "--sha256", path=ONE_MB)
    assert r.rc == 0, (r.stderr, [row["error"] for row in r.rows])
    (row,) = r.rows
    assert (row["streams"], row["streams_completed"], row["connections"]) == (30, 30, 1)
    assert row["error"] == "" and row["http_status"] == 206
    assert row["bytes"] == want["size"] and row["sha256"] == want["sha256"]
    entries = [e for e in servers.read_access_log(ranged.box.logs)[before:] if e["path"] == "/" + ONE_MB]
    assert len(entries) == 30 and {e["status"] for e in entries} == {206}, entries
    assert sum(e["bytes"] for e in entries) == want["size"]


def curl_range(box: ServerBox, tmp: Path, range_header: str, path: str = ONE_MB) -> tuple[int, dict, bytes]:
    """One curl (HTTP/3 only) with this Range header from a container in the box's namespace:
    the status, the response's headers (lower-cased names), the body."""
    out = tmp / uuid.uuid4().hex[:8]
    out.mkdir()
    res = docker(
        "run", "--rm", "--network", f"container:{box.name}", "-v", f"{box.pki.dir}:/pki:ro",
        "-v", f"{out}:/out", box.image, "curl", "-sS", "--max-time", "10", "--http3-only",
        "-H", f"Range: {range_header}", "-D", "/out/headers", "-o", "/out/body",
        "--cacert", "/pki/ca.pem", "--resolve", "server.quicbed:443:127.0.0.1",
        f"https://server.quicbed/{path}",
    check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    lines = (out / "headers").read_text().splitlines()
    status = int(lines[0].split()[1])
    pairs = (line.partition(":") for line in lines[1:] if line)
    headers = {k.strip().lower(): v.strip() for k, _, v in pairs}
    body = (out / "body").read_bytes() if (out / "body").exists() else b""
    return status, headers, body


@pytest.mark.parametrize("ranged", sorted(RUST_SERVERS), indirect=True)
def test_streams_servers_answer_ranges_as_rfc_9110(ranged: Served, tmp_path: Path) -> None:
    """The quiche and quinn servers: a first-last range and a suffix range are 206 with their
    content-range and exactly those bytes; a first byte past the end is 416 with bytes */TOTAL
    and no body; several ranges (or a malformed header) are ignored: 200, the whole file."""
    data = (shared_content() / ONE_MB).read_bytes()
    total = len(data)
    box = ranged.box
    before = len(servers.read_access_log(box.logs))
    status, headers, body = curl_range(box, tmp_path, "bytes=0-99")
    assert (status, headers["content-range"]) == (206, f"bytes 0-99/{total}")
    assert headers["content-length"] == "100"
    assert body == data[:100]
    status, headers, body = curl_range(box, tmp_path, "bytes=-100")
    assert (status, headers["content-range"]) == (206, f"bytes {total - 100}-{total - 1}/{total}")
    assert body == data[-100:]
    status, headers, body = curl_range(box, tmp_path, "bytes=1000-")
    assert (status, headers["content-range"], body) == (206, f"bytes 1000-{total - 1}/{total}", data[1000:])
    status, headers, body = curl_range(box, tmp_path, f"bytes={total}-")
    assert (status, headers["content-range"]) == (416, f"bytes */{total}")
    assert (headers["content-length"], body) == ("0", b"")
    for ignored in ("bytes=0-1,5-9", "items=0-99", "bytes=5-3", "bytes=x-"):
        status, headers, body = curl_range(box, tmp_path, ignored)
        assert (status, "content-range" in headers, body == data) == (200, False, True), ignored
    entries = [e for e in servers.read_access_log(box.logs)[before:] if e["path"] == "/" + ONE_MB]
    want = [(206, 100), (206, 100), (206, total - 1000), (416, 0), *[(200, total)] * 4]
    assert [(e["status"], e["bytes"]) for e in entries] == want
