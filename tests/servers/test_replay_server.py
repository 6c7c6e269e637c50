"""The replay server's own tests (stacks/quicgo/replay_test.go: two origins over HTTP/2 and
HTTP/3 on loopback, the record's answers and think time, hostile sites refused) and `go vet`,
with the host's Go at the pinned toolchain and the modules images/build.sh fetched (offline:
quicbed/gotool.py); then the server as its descriptor runs it (stacks/quicgo/server.yaml), in
a box, serving a shipped page laid out by workloads/replay.py."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_box import ServerBox, docker_text, qpack_blocking

from quicbed import servers
from quicbed.gotool import host_go, run_go
from quicbed.paths import REPO
from quicbed.workloads.har import load_har
from quicbed.workloads.replay import ReplayPlan, plan_replay, write_site

pytestmark = pytest.mark.docker  # needs what `make images` left in the cache (Go's modules)

STACK = REPO / "stacks" / "quicgo"
PAGE = REPO / "workloads" / "pages" / "median-desktop.har"


def test_go_vet_finds_nothing() -> None:
    proc = run_go(["vet", "."], STACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_go_sources_are_gofmt_clean() -> None:
    gofmt = Path(host_go()).resolve().parent / "gofmt"
    proc = subprocess.run([str(gofmt), "-l", "."], cwd=STACK, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_the_replay_server_serves_the_record_over_both_protocols() -> None:
    proc = run_go(["test", "-count=1", "-run", "Test", "."], STACK)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.stdout.startswith("ok"), proc.stdout


@pytest.fixture(scope="module")
def replay_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerBox, ReplayPlan]]:
    """The descriptor's replay server (stacks/quicgo/server.yaml) in a --network none box,
    serving the shipped median desktop page as workloads/replay.py lays it out, with a
    certificate per origin from the box's CA; started, and so healthy over h2 and h3."""
    tmp = tmp_path_factory.mktemp("replay")
    page = load_har(PAGE)
    plan = plan_replay(page)
    write_site(plan, page, tmp / "site")
    box = ServerBox("quicgo", tmp / "site", tmp, origins=plan.names)
    try:
        servers.start_server(box.name, box.server, timeout=20)
        yield box, plan
    finally:
        box.close()


def _get(box: ServerBox, http: str, host: str, target: str, out: str) -> subprocess.CompletedProcess:
    """One curl GET of https://HOST/TARGET from inside the box, to the box's loopback."""
    return docker_text(
        "exec", box.name, "curl", "-sS", "--max-time", "10", http, "--cacert", "/etc/quicbed/pki/ca.pem",
        "--resolve", f"{host}:443:127.0.0.1", "-o", f"/tmp/{out}", "-w", "%{http_version} %{http_code}",
        f"https://{host}{target}",
        check=False,
    )  # fmt: skip


@pytest.mark.parametrize("http", ["--http2", "--http3-only"])
def test_the_replay_server_answers_each_origin_as_recorded(replay_box, http: str) -> None:
    """Two origins of the page, each under its own name and certificate: the recorded status
    and a body of the recorded size and bytes, over the protocol asked for; the access log
    reads as the servers' quicbed-json format."""
    box, plan = replay_box
    site = box.logs.parent / "site"
    answered = [r for r in plan.responses if r.status == 200 and r.body]
    first, other = answered[0], next(r for r in answered if r.site != answered[0].site)
    for i, response in enumerate((first, other)):
        host = plan.sites[response.site].name
        done = _get(box, http, host, response.target, f"{http[2:]}-{i}")
        version = "2" if http == "--http2" else "3"
        assert (done.returncode, done.stdout) == (0, f"{version} 200"), done.stderr
        body = docker_text("exec", box.name, "sha256sum", f"/tmp/{http[2:]}-{i}").stdout.split()[0]
        assert body == hashlib.sha256((site / "bodies" / response.body).read_bytes()).hexdigest()
        assert (site / "bodies" / response.body).stat().st_size == response.body_bytes
    missing = _get(box, http, plan.sites[0].name, "/not-in-the-page", "missing")
    assert missing.stdout.endswith(" 404"), missing.stdout + missing.stderr
    spec = servers.get_server(box.server)
    logged = [e for e in servers.read_access_log(box.logs, spec) if e["path"] != "/.quicbed-health"]
    proto = "HTTP/2.0" if http == "--http2" else "HTTP/3.0"
    assert [(e["proto"], e["status"]) for e in logged if e["proto"] == proto][-3:] == [
        (proto, 200),
        (proto, 200),
        (proto, 404),
    ]


def test_no_replayed_request_can_wait_on_the_qpack_encoder_stream(replay_box) -> None:
    """As every content server (tests/servers/test_servers.py): quic-go keeps no QPACK table,
    so curl's missing encoder stream never blocks a request (stacks/aioquic/README.md)."""
    box, plan = replay_box
    table, blocked = qpack_blocking(box, plan.sites[0].name)
    assert table == 0 or blocked == 0, f"QPACK table {table} bytes, {blocked} blocked streams"
