"""The replay server's own tests (stacks/quicgo/replay_test.go: two origins over HTTP/2 and
HTTP/3 on loopback, the record's answers and think time, hostile sites refused) and `go vet`,
with the host's Go at the pinned toolchain and the modules images/build.sh fetched (offline:
quicbed/gotool.py); then the server as its descriptor runs it (stacks/quicgo/server.yaml), in
a box, serving a shipped page laid out by workloads/replay.py."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from server_box import ServerBox, qpack_blocking

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


@dataclass(frozen=True)
class ReplayBox:
    box: ServerBox
    plan: ReplayPlan
    site: Path  # what workloads/replay.py wrote, the box's /srv/content


@pytest.fixture(scope="module")
def replay_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplayBox]:
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
        yield ReplayBox(box, plan, tmp / "site")
    finally:
        box.close()


@pytest.mark.parametrize("http", ["--http2", "--http3-only"])
def test_the_replay_server_answers_each_origin_as_recorded(
    replay_box: ReplayBox, http: str, tmp_path: Path
) -> None:
    """Two origins of the page, each under its own name and certificate: the recorded status
    and a body of the recorded size and bytes, over the protocol asked for; the access log
    reads as the servers' quicbed-json format."""
    box, plan, site = replay_box.box, replay_box.plan, replay_box.site
    answered = [r for r in plan.responses if r.status == 200 and r.body]
    first, other = answered[0], next(r for r in answered if r.site != answered[0].site)
    written = ["-w", "%{http_version} %{http_code}"]
    for i, response in enumerate((first, other)):
        host = plan.sites[response.site].name
        done = box.fetch([http, *written], [response.target], tmp_path / str(i), host=host)
        version = "2" if http == "--http2" else "3"
        assert (done.returncode, done.stdout) == (0, f"{version} 200"), done.stderr
        body = (tmp_path / str(i) / "0").read_bytes()
        assert body == (site / "bodies" / response.body).read_bytes()
        assert len(body) == response.body_bytes
    missing = box.fetch(
        [http, *written], ["/not-in-the-page"], tmp_path / "missing", host=plan.sites[0].name, fail=False
    )
    assert missing.stdout.endswith(" 404"), missing.stdout + missing.stderr
    spec = servers.get_server(box.server)
    logged = [e for e in servers.read_access_log(box.logs, spec) if e["path"] != "/.quicbed-health"]
    proto = "HTTP/2.0" if http == "--http2" else "HTTP/3.0"
    assert [(e["proto"], e["status"]) for e in logged if e["proto"] == proto][-3:] == [
        (proto, 200),
        (proto, 200),
        (proto, 404),
    ]


def test_no_replayed_request_can_wait_on_the_qpack_encoder_stream(replay_box: ReplayBox) -> None:
    """As every content server (tests/servers/test_servers.py): quic-go keeps no QPACK table,
    so curl's missing encoder stream never blocks a request (stacks/aioquic/README.md)."""
    table, blocked = qpack_blocking(replay_box.box, replay_box.plan.sites[0].name)
    assert table == 0 or blocked == 0, f"QPACK table {table} bytes, {blocked} blocked streams"
