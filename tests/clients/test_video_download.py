"""video_download (clients/perf: libcurl over TCP and QUIC, ngtcp2 over QUIC) against the
shipped Caddy and nginx serving the real DASH ladder (workloads/video.py) over loopback: a
client container joins each server's network namespace. Rows, bytes against the files,
connections per transport (the server's access log and the row), pacing, bad input and error
rows, and the ASan/UBSan build."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from server_box import ServerBox, docker_text, have_image, shared_content

from quicbed import rowschema, servers
from quicbed.clients.tools import UNSUPPORTED_EXIT
from quicbed.servers import pki
from quicbed.workloads import store, video

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
CLIENT_IMAGE = "quicbed/client:dev"
MPD = "video/dash/manifest.mpd"
ROW_KEYS = {c.name for c in (*rowschema.TOOL, *rowschema.VIDEO_DOWNLOAD)}
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")


@dataclass(frozen=True)
class Variant:
    """A way to run the tool, and what its row and the server's log must then say."""

    args: tuple[str, ...]
    protocol: str
    backend: str
    http: str
    log_proto: str
    tls: str
    connections: int


VARIANTS = {
    "quic": Variant(("--transport", "quic"), "quic", "libcurl", "3", "HTTP/3.0", "TLSv1.3", 1),
    "quic-ngtcp2": Variant(
        ("--transport", "quic", "--backend", "ngtcp2"), "quic", "ngtcp2", "3", "HTTP/3.0", "TLSv1.3", 1
    ),
    "tls1.3": Variant(
        ("--transport", "tcp", "--tls", "1.3"), "tls1.3", "libcurl", "2", "HTTP/2.0", "TLSv1.3", 2
    ),
    "tls1.2": Variant(
        ("--transport", "tcp", "--tls", "1.2"), "tls1.2", "libcurl", "2", "HTTP/2.0", "TLSv1.2", 2
    ),
}


@dataclass
class Run:
    rc: int
    rows: list[dict]
    stderr: str
    elapsed: float


@dataclass
class Bed:
    box: ServerBox
    client: str
    root: Path

    def run(
        self,
        *args: str,
        url: str = f"https://server.quicbed/{MPD}",
        tool: str = "video_download",
        timeout: float = 60,
    ) -> Run:
        argv = [
            tool,
            "--url",
            url,
            "--resolve",
            "server.quicbed:443:127.0.0.1",
            "--resolve",
            "server.quicbed:4444:127.0.0.1",
            "--cacert",
            "/w/pki/ca.pem",
            "-n",
            "1",
            "--timeout",
            "20",
            *args,
        ]
        t0 = time.monotonic()
        res = docker_text("exec", self.client, *argv, timeout=timeout, check=False)
        rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
        return Run(res.returncode, rows, res.stderr, time.monotonic() - t0)

    def log(self) -> list[dict]:
        return servers.read_access_log(self.box.logs)


@pytest.fixture(scope="module")
def client_image() -> None:
    # the conftest has checked the engine (tests marked docker); the testbed's own build:
    # skipped when clients/perf and the Dockerfile are unchanged
    res = subprocess.run(
        [str(REPO / "images/build.sh"), "client"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, "QUICBED_SAVE_IMAGES": "0"},
    )
    assert res.returncode == 0 and have_image(CLIENT_IMAGE), (res.stdout + res.stderr)[-3000:]


@pytest.fixture(scope="module", params=["caddy", "nginx"])
def bed(request, client_image: None, tmp_path_factory) -> Iterator[Bed]:
    root = shared_content()
    tmp = tmp_path_factory.mktemp(f"video-{request.param}")
    pki.generate_pki(tmp / "other", "127.0.0.1")  # a CA that did not sign the server's
    box = ServerBox(request.param, root, tmp)
    client = f"{box.name}-client"
    try:
        servers.start_server(box.name, box.server, timeout=20)
        docker_text(
            "run",
            "-d",
            "--name",
            client,
            "--network",
            f"container:{box.name}",
            "-v",
            f"{tmp}:/w:ro",
            CLIENT_IMAGE,
            "sleep",
            "infinity",
        )
        yield Bed(box, client, root)
    finally:
        docker_text("rm", "-f", client, check=False)
        box.close()


def stream_bytes(root: Path, stream: str, segments: int) -> int:
    """The init segment and the first `segments` media segments of a stream, from the files."""
    files = store.load_manifest(root)["files"]
    rels = [f"video/dash/init-stream{stream}.m4s"]
    rels += [f"video/dash/chunk-stream{stream}-{n:05d}.m4s" for n in range(1, segments + 1)]
    return sum(files[rel]["size"] for rel in rels)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_row_bytes_and_connections(bed: Bed, name: str) -> None:
    v = VARIANTS[name]
    before = len(bed.log())
    r = bed.run(*v.args, "--duration", "6", "--buffer", "4", "--cpu")
    assert r.rc == 0, r.stderr
    assert len(r.rows) == 1
    row = r.rows[0]
    assert set(row) == ROW_KEYS and row["error"] == ""
    assert (row["tool"], row["protocol"], row["backend"], row["http_version"]) == (
        "video_download",
        v.protocol,
        v.backend,
        v.http,
    )
    assert row["tls_version"] == v.tls
    # the top rendition (720p is the ladder's last, Representation 4; audio is 5)
    assert row["rendition"] == video.LADDER[-1][0]
    assert (row["segments"], row["media_s"]) == (6, 6.0)
    assert row["video_bytes"] == stream_bytes(bed.root, "4", 3)
    assert row["audio_bytes"] == stream_bytes(bed.root, "5", 3)
    manifest = store.load_manifest(bed.root)["files"][MPD]["size"]
    assert row["bytes"] == row["video_bytes"] + row["audio_bytes"] + manifest
    assert row["video_rate_mbps"] > 0 and row["audio_rate_mbps"] > 0
    assert 0 < row["connection_time_ms"] < row["startup_ms"] < row["download_time_ms"]
    assert (row["stalls"], row["late_segments"], row["stall_ms"]) == (0, 0, 0.0)
    # two TLS/TCP connections, or one QUIC connection with both streams
    second = row["second_connection_time_ms"]
    assert (second is None) if v.connections == 1 else second > 0
    entries = bed.log()[before:]
    assert len(entries) == 1 + 2 * 4  # the manifest, two init and six media segments
    assert {(e["proto"], e["tls"], e["status"]) for e in entries} == {(v.log_proto, v.tls, 200)}
    seen = {e["connection"] for e in entries}
    if None not in seen:  # nginx cannot tell HTTP/3 connections apart (servers/accesslog.py)
        assert len(seen) == v.connections, entries


def test_rendition_by_name(bed: Bed) -> None:
    r = bed.run("--rendition", "240p", "--duration", "2")
    assert r.rc == 0, r.stderr
    row = r.rows[0]
    assert row["rendition"] == "240p" and row["segments"] == 2
    assert row["video_bytes"] == stream_bytes(bed.root, "1", 1)


def test_paced_like_playout(bed: Bed) -> None:
    """20 s of media with 4 s fetched ahead: the last segment (18-20 s) is asked for when
    playout reaches 14 s, so the run lasts about 14 s, not a burst, and not the full 20."""
    r = bed.run("--transport", "tcp", "--duration", "20", "--buffer", "4", "--cpu")
    assert r.rc == 0, r.stderr
    row = r.rows[0]
    assert row["segments"] == 20 and row["stalls"] == 0
    assert 20 - 4 - 2 <= row["download_time_ms"] / 1e3 < 20 - 4, row["download_time_ms"]
    assert row["throughput_mbps"] < 8  # about the streams' own rate, 2.5 + 0.128 Mbit/s
    assert len(row["cpu"]) >= 20  # sampled every 500 ms through the session


@pytest.mark.parametrize(
    "args",
    [
        ("--transport", "udp"),
        ("--tls", "1.4"),
        ("--transport", "quic", "--tls", "1.2"),
        ("--duration", "0"),
        ("--duration", "soon"),
        ("--buffer", "-1"),
        ("--rendition", ""),
        ("--http", "2"),
        ("--bogus",),
        ("stray",),
    ],
)
def test_bad_input_is_one_line(bed: Bed, args: tuple[str, ...]) -> None:
    r = bed.run(*args)
    assert r.rc == 2 and r.rows == [], r
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("video_download: "), r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--resume",),
        ("--sha256",),
        ("--transport", "quic", "--cc", "reno"),
        ("--transport", "tcp", "--backend", "ngtcp2"),
    ],
)
def test_unsupported(bed: Bed, args: tuple[str, ...]) -> None:
    r = bed.run(*args)
    assert r.rc == UNSUPPORTED_EXIT and r.rows == [], r
    assert len(r.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("case", "name", "categories"),
    [
        ("missing manifest", "quic", ("http: status 404",)),
        ("missing manifest", "quic-ngtcp2", ("http: status 404",)),
        ("missing manifest", "tls1.2", ("http: status 404",)),
        ("server down", "tls1.3", ("connect:",)),
        ("server down", "quic", ("quic:", "connect:", "timeout:")),
        ("server down", "quic-ngtcp2", ("quic:", "connect:", "timeout:")),
        ("bad certificate", "tls1.3", ("tls:",)),
        ("bad certificate", "quic", ("tls:", "quic:")),
        ("bad certificate", "quic-ngtcp2", ("tls:",)),
        ("no such rendition", "quic", ("manifest: no video rendition",)),
    ],
)
def test_error_rows(bed: Bed, case: str, name: str, categories: tuple[str, ...]) -> None:
    args = list(VARIANTS[name].args)
    url = f"https://server.quicbed/{MPD}"
    if case == "missing manifest":
        url = "https://server.quicbed/video/dash/missing.mpd"
    elif case == "server down":
        url = f"https://server.quicbed:4444/{MPD}"  # nothing listens there
    elif case == "bad certificate":
        args += ["--cacert", "/w/other/ca.pem"]
    else:
        args += ["--rendition", "4320p"]
    r = bed.run(*args, "--duration", "2", "--timeout", "5", url=url)
    assert r.rc == 1, r.stderr
    assert len(r.rows) == 1
    row = r.rows[0]
    assert set(row) == ROW_KEYS
    assert row["error"].startswith(categories), row["error"]
    assert row["download_time_ms"] is None and row["throughput_mbps"] is None
    assert row["segments"] == 0 and row["video_rate_mbps"] is None


@pytest.mark.parametrize("bed", ["nginx"], indirect=True)  # one server is enough
def test_sanitizers(bed: Bed) -> None:
    """The ASan/UBSan build (make asan) runs a session per transport and an error row clean,
    leak checking included."""
    assert bed.box.server == "nginx"
    build = docker_text(
        "exec",
        bed.client,
        "sh",
        "-c",
        "rm -rf /tmp/asan && cp -r /src/perf /tmp/asan && " "make -s -C /tmp/asan asan/video_download",
        timeout=600,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    tool = "/tmp/asan/asan/video_download"
    for args, url, rc in [
        (VARIANTS["quic"].args, f"https://server.quicbed/{MPD}", 0),
        (VARIANTS["quic-ngtcp2"].args, f"https://server.quicbed/{MPD}", 0),
        (VARIANTS["tls1.3"].args, f"https://server.quicbed/{MPD}", 0),
        (VARIANTS["quic-ngtcp2"].args, "https://server.quicbed/nope.mpd", 1),
        (VARIANTS["tls1.3"].args, "https://server.quicbed/nope.mpd", 1),
    ]:
        r = bed.run(*args, "--duration", "4", "--cpu", url=url, tool=tool, timeout=120)
        assert r.rc == rc, r.stderr[-2000:]
        assert not any(mark in r.stderr for mark in SANITIZER_MARKS), r.stderr[-2000:]
        assert len(r.rows) == 1
