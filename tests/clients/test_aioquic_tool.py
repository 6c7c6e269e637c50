"""aioquic_perf (clients/aioquic) keeps the client contract, against a real nginx (h3).

It shares test_perf_tools.py's bed (nginx with --network none, the perf tools' client in its
namespace, the blackhole on 9443) and joins the same namespace from its own image,
quicbed/aioquic:<AIOQUIC_VERSION>, built by images/build.sh. The cases are the C tools':
a fetch with the perf tools' row keys, bad input as error rows of the same categories (wrong
CA, server down, timeout, 404...), usage errors (exit 2, no rows) and the options aioquic cannot
do (exit 3, no rows).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from test_perf_tools import BAD, ROW_KEYS, TIMEOUT_S, Bed, assert_ordered, bed, common, docker, images

from quicbed.clients import tools
from quicbed.paths import REPO

pytestmark = pytest.mark.docker
__all__ = ["bed", "images"]  # the shared fixtures, imported to be used here

TOOL = tools.get_tool("aioquic")


@dataclass
class Run:
    rc: int
    rows: list[dict]
    stderr: str
    elapsed: float


@dataclass
class Aioquic:
    container: str
    bed: Bed

    def run(self, *args: str, timeout: float = 60) -> Run:
        t0 = time.monotonic()
        res = docker("exec", self.container, *TOOL.command, *args, timeout=timeout, check=False)
        rows = [json.loads(line) for line in res.stdout.decode().splitlines() if line.strip()]
        return Run(res.returncode, rows, res.stderr.decode(), time.monotonic() - t0)


@pytest.fixture(scope="module")
def aq(bed: Bed) -> Iterator[Aioquic]:
    build = subprocess.run(
        [str(REPO / "images/build.sh"), "aioquic"],
        capture_output=True,
        timeout=1800,
        check=False,
        env={**os.environ, "QUICBED_SAVE_IMAGES": "0"},
    )
    assert build.returncode == 0, (build.stdout + build.stderr).decode()[-3000:]
    name = f"dev-aioquic-{uuid.uuid4().hex[:8]}"
    try:
        docker(
            "run", "-d", "--name", name, "--network", f"container:{bed.client}",
            "-v", f"{bed.workdir}:/w", TOOL.image, "sleep", "infinity",
        )  # fmt: skip
        yield Aioquic(name, bed)
    finally:
        docker("rm", "-f", name, check=False)


def test_fetch_gives_the_perf_tools_row(aq: Aioquic) -> None:
    r = aq.run(*common(), "--sha256", "-n", "2", "--cpu", "--qlog", "/tmp/q.sqlog", "--keylog", "/tmp/k.log")
    assert r.rc == 0, r.stderr
    assert len(r.rows) == 2
    for rep, row in enumerate(r.rows):
        assert set(row) == ROW_KEYS | {"sha256"}, set(row) ^ ROW_KEYS
        assert row["error"] == "" and row["rep"] == rep and row["http_status"] == 200
        assert row["bytes"] == 100_000 and row["sha256"] == aq.bed.small_sha
        assert (row["tool"], row["backend"], row["protocol"]) == ("aioquic", "aioquic", "quic")
        assert (row["tls_version"], row["http_version"]) == ("TLSv1.3", "3")
        assert row["cipher"].startswith("TLS_") and row["resumed"] is False
        assert row["library"].startswith("aioquic/1.") and row["tool_version"]
        assert row["local_ip"] == "127.0.0.1" and row["local_port"] > 0 and row["remote_port"] == 443
        assert 0 < row["client_cpu_ms"] < row["connection_time_ms"] * 1.5 + 5
        assert_ordered(row)
    # One connection per measurement: the key log names two client randoms, the qlog has two
    # JSON-SEQ headers (qlog 0.3) and the events of both.
    out = docker("exec", aq.container, "cat", "/tmp/k.log", "/tmp/q.sqlog").stdout.decode()
    secrets = [line.split() for line in out.splitlines() if line.startswith("CLIENT_HANDSHAKE_TRAFFIC")]
    randoms = {fields[1] for fields in secrets}
    assert len(randoms) == 2
    records = [json.loads(rec) for rec in out.split("\x1e")[1:]]
    headers = [rec for rec in records if "qlog_version" in rec]
    assert [h["qlog_version"] for h in headers] == ["0.3", "0.3"] and len(records) > 20


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_an_error_row_of_the_c_tools_category(aq: Aioquic, case: str) -> None:
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
def test_usage_error_is_exit_2_without_rows(aq: Aioquic, args: list[str]) -> None:
    r = aq.run(*args)
    assert r.rc == 2 and r.rows == [], r
    assert "usage:" in r.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--resume"], "--resume"),
        (["--groups", "X25519"], "key-exchange groups"),
        (["--curl-timers"], "no libcurl"),
        (["--cc", "bbr"], "no congestion control 'bbr'"),
    ],
)
def test_what_aioquic_cannot_do_is_exit_3(aq: Aioquic, args: list[str], words: str) -> None:
    r = aq.run(*common(), *args)
    assert r.rc == tools.UNSUPPORTED_EXIT and r.rows == [], r
    assert words in r.stderr


def test_congestion_control_is_chosen(aq: Aioquic) -> None:
    for cc in ("reno", "cubic"):
        r = aq.run(*common(), "--cc", cc)
        assert r.rc == 0 and r.rows[0]["cc"] == cc, r
