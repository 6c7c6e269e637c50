"""Servers stage: content, PKI, registry (pure) and real fetches per server x protocol (docker).

The docker tests start each server with quicbed.servers in a --network none container and
fetch from a second container sharing its network namespace (loopback only), like the
topology will, minus the emulated link.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from server_box import ServerBox, aioquic_script, docker_text, qpack_blocking, shared_content

from quicbed import servers
from quicbed.servers import pki
from quicbed.workloads import cloud, ensure_content, store, video

# ---------------------------------------------------------------- pure


def _manifest_digests(root: Path) -> dict[str, str]:
    return {rel: e["sha256"] for rel, e in store.load_manifest(root)["files"].items()}


def test_content_is_deterministic(tmp_path: Path) -> None:
    a = ensure_content(tmp_path / "a", {"web"})
    b = ensure_content(tmp_path / "b", {"web"})
    cloud.ensure_files(a, ["1KB", "1MB"])
    cloud.ensure_files(b, ["1KB", "1MB"])
    assert _manifest_digests(a) == _manifest_digests(b)
    assert (a / "cloud/1MB").read_bytes() == (b / "cloud/1MB").read_bytes()
    assert "web/index.html" in _manifest_digests(a)


def test_manifest_checksums_and_sizes(tmp_path: Path) -> None:
    root = ensure_content(tmp_path, {"web"})
    cloud.ensure_files(root, ["5KB", "2MB"])
    files = store.load_manifest(root)["files"]
    for rel, entry in files.items():
        data = (root / rel).read_bytes()
        assert len(data) == entry["size"], rel
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], rel
    assert files["cloud/5KB"]["size"] == 5 * 1024
    assert files["cloud/2MB"]["size"] == 2 * 1024 * 1024
    assert store.verify_content(root) == []
    (root / "web/sample.css").write_bytes(b"tampered")
    assert store.verify_content(root) == ["web/sample.css"]


def test_content_second_call_is_fast_and_repairs(tmp_path: Path) -> None:
    root = ensure_content(tmp_path, {"web", "cloud"})
    (root / "cloud/1MB").unlink()
    start = time.monotonic()
    ensure_content(root, {"web", "cloud"})
    assert time.monotonic() - start < 5
    assert (root / "cloud/1MB").stat().st_size == 1024 * 1024


def test_cloud_files_are_incompressible_and_on_demand(tmp_path: Path) -> None:
    import zlib

    root = ensure_content(tmp_path, {"cloud"})
    assert not (root / "cloud/50MB").exists()  # big ones only when asked for
    data = (root / "cloud/1MB").read_bytes()
    assert len(zlib.compress(data, 9)) > 0.99 * len(data)
    with pytest.raises(store.ContentError, match="valid"):
        cloud.ensure_files(root, ["3MB"])


def test_landing_pages_median_about_40kb(tmp_path: Path) -> None:
    root = ensure_content(tmp_path, {"web"})
    totals = sorted(sum(p.stat().st_size for p in d.iterdir()) for d in (root / "web/pages").iterdir())
    median = totals[len(totals) // 2]
    assert 35_000 < median < 45_000
    for d in (root / "web/pages").iterdir():  # every referenced asset exists
        html = (d / "index.html").read_text()
        for asset in d.iterdir():
            if asset.name != "index.html":
                assert asset.name in html


def test_pki_fresh_each_call(tmp_path: Path) -> None:
    a = pki.generate_pki(tmp_path / "a", "10.0.0.2")
    b = pki.generate_pki(tmp_path / "b", "10.0.0.2")
    assert a.ca_sha256 != b.ca_sha256
    assert a.spki_sha256 != b.spki_sha256
    assert a.key.stat().st_mode & 0o777 == 0o600
    assert sorted(os.listdir(a.dir)) == ["ca.pem", "server.key", "server.pem"]  # no CA key left


def test_pki_sans_and_chain(tmp_path: Path) -> None:
    p = pki.generate_pki(tmp_path, "10.1.2.3", server_name="srv.example")
    sans = subprocess.run(
        ["openssl", "x509", "-in", p.cert, "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for want in ("DNS:srv.example", "DNS:localhost", "IP Address:10.1.2.3"):
        assert want in sans
    subprocess.run(["openssl", "verify", "-CAfile", p.ca, p.cert], check=True, capture_output=True)


def test_each_origin_of_a_replayed_page_gets_a_certificate_of_its_own(tmp_path: Path) -> None:
    """The run's CA signs one certificate per origin (workloads/replay.py's names), each for
    its own name only, in the same pass: the CA key is gone afterwards all the same."""
    names = ["www.page.example", "cdn.assets.example"]
    p = pki.generate_pki(tmp_path, "10.0.0.2", origins=[*names, names[0]])
    assert sorted(os.listdir(p.dir)) == ["ca.pem", "origins", "server.key", "server.pem"]
    assert sorted(os.listdir(p.dir / pki.ORIGINS_DIR)) == sorted(
        f"{n}.{x}" for n in names for x in ("key", "pem")
    )
    for name, other in zip(names, reversed(names), strict=True):
        cert, key = pki.origin_files(p.dir, name)
        assert key.stat().st_mode & 0o777 == 0o600
        verify = ["openssl", "verify", "-CAfile", str(p.ca), "-verify_hostname"]
        assert subprocess.run([*verify, name, str(cert)], capture_output=True).returncode == 0
        assert subprocess.run([*verify, other, str(cert)], capture_output=True).returncode != 0
    for bad in ("../etc", "a/b", "", "UPPER.example"):
        with pytest.raises(pki.PkiError, match="not a host name"):
            pki.generate_pki(tmp_path / "bad", "10.0.0.2", origins=[bad])
    assert not (tmp_path / "bad").exists()


def test_spki_hash_matches_openssl(tmp_path: Path) -> None:
    p = pki.generate_pki(tmp_path, "10.0.0.2")
    # The pipeline from Chromium's documentation, one stage at a time.
    pub = subprocess.run(
        ["openssl", "x509", "-pubkey", "-noout", "-in", p.cert], capture_output=True, check=True
    ).stdout
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, capture_output=True, check=True
    ).stdout
    digest = subprocess.run(
        ["openssl", "dgst", "-sha256", "-binary"], input=der, capture_output=True, check=True
    ).stdout
    assert p.spki_sha256 == base64.b64encode(digest).decode()


def test_pki_rejects_bad_ip(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        pki.generate_pki(tmp_path, "10.0.0.300")


def test_unknown_server_is_clear() -> None:
    with pytest.raises(servers.UnknownServer) as err:
        servers.get_server("apache")
    assert "apache" in str(err.value) and "caddy" in str(err.value) and "nginx" in str(err.value)


def test_registry_and_run_args(tmp_path: Path) -> None:
    for name in ("caddy", "nginx"):
        spec = servers.get_server(name)
        assert spec.image.startswith(f"quicbed/{name}:") and spec.version in spec.image
        args = servers.docker_run_args(name, tmp_path / "c", tmp_path / "p", tmp_path / "l")
        assert f"{tmp_path / 'c'}:/srv/content:ro" in args
        assert f"{tmp_path / 'p'}:/etc/quicbed/pki:ro" in args
        assert f"{tmp_path / 'l'}:/var/log/quicbed" in args
        assert args[-3:] == [spec.image, "sleep", "infinity"]


def test_read_access_log_normalizes_both_formats(tmp_path: Path) -> None:
    caddy = {
        "level": "info",
        "ts": 1.0,
        "logger": "http.log.access",
        "msg": "handled request",
        "request": {
            "remote_ip": "127.0.0.1",
            "remote_port": "4433",
            "proto": "HTTP/3.0",
            "method": "GET",
            "uri": "/web/index.html?x=1",
            "tls": {"version": 772, "proto": "h3"},
        },
        "duration": 0.0125,
        "size": 100,
        "status": 200,
    }
    nginx = {
        "ts": "t",
        "proto": "HTTP/2.0",
        "tls": "TLSv1.2",
        "alpn": "h2",
        "method": "GET",
        "path": "/cloud/1KB",
        "status": 200,
        "bytes": 1024,
        "request_time": 0.003,
        "conn": "7",
    }
    haproxy = {
        "ts": "t",
        "proto": "HTTP/3.0",
        "tls": "TLSv1.3",
        "alpn": "h3",
        "resumed": 0,
        "method": "GET",
        "path": "/cloud/1MB",
        "status": 200,
        "bytes": "1048576",
        "bytes_sent": 1048800,
        "total_ms": 41,
        "remote": "10.0.0.1",
        "port": 50312,
    }
    health = dict(nginx, path=servers.HEALTH_PATH)
    lines = [
        json.dumps(caddy),
        "garbage{",
        json.dumps(nginx),
        json.dumps(health),
        json.dumps(haproxy),
        json.dumps(dict(haproxy, bytes="")),
    ]
    (tmp_path / "access.log").write_text("\n".join(lines) + "\n")
    a, b, c, d = servers.read_access_log(tmp_path)
    assert (a["proto"], a["tls"], a["path"], a["bytes"], a["status"]) == (
        "HTTP/3.0",
        "TLSv1.3",
        "/web/index.html",
        100,
        200,
    )
    assert a["duration_ms"] == pytest.approx(12.5)
    assert (b["proto"], b["tls"], b["path"], b["bytes"]) == ("HTTP/2.0", "TLSv1.2", "/cloud/1KB", 1024)
    assert b["duration_ms"] == pytest.approx(3.0)
    assert (a["connection"], b["connection"], c["connection"]) == ("127.0.0.1:4433", "7", "10.0.0.1:50312")
    assert (c["proto"], c["tls"], c["bytes"], c["duration_ms"], c["resumed"]) == (
        "HTTP/3.0",
        "TLSv1.3",
        1048576,
        41.0,
        False,
    )
    assert d["bytes"] is None  # no Content-Length: unknown, not 0
    # nginx numbers every HTTP/3 stream as a connection: not a connection there
    (tmp_path / "access.log").write_text(json.dumps(dict(nginx, proto="HTTP/3.0")) + "\n")
    assert servers.read_access_log(tmp_path)[0]["connection"] is None
    assert servers.read_access_log(tmp_path / "missing") == []


def test_access_log_since_reads_each_entry_once(tmp_path: Path) -> None:
    from quicbed.servers.accesslog import access_log_since

    line = {
        "proto": "HTTP/3.0",
        "tls": "TLSv1.3",
        "path": "/a",
        "status": 200,
        "bytes": 1,
        "request_time": 0.001,
    }
    log = tmp_path / "access.log"
    log.write_text(json.dumps(line) + "\n")
    first, offset = access_log_since(tmp_path, 0)
    assert [e["path"] for e in first] == ["/a"] and offset == log.stat().st_size
    # A second entry and half of a third: only the whole one now, the rest next time.
    second = json.dumps(dict(line, path="/b")) + "\n"
    third = json.dumps(dict(line, path="/c"))
    with log.open("a") as f:
        f.write(second + third[:10])
    entries, offset = access_log_since(tmp_path, offset)
    assert [e["path"] for e in entries] == ["/b"]
    with log.open("a") as f:
        f.write(third[10:] + "\n")
    assert [e["path"] for e in access_log_since(tmp_path, offset)[0]] == ["/c"]
    assert access_log_since(tmp_path / "none", 7) == ([], 7)


# ---------------------------------------------------------------- docker

MODES = {  # mode -> (curl flags, expected proto, expected TLS version)
    "h2-tls12": (["--http2", "--tlsv1.2", "--tls-max", "1.2"], "HTTP/2.0", "TLSv1.2"),
    "h2-tls13": (["--http2", "--tlsv1.3"], "HTTP/2.0", "TLSv1.3"),
    "h3": (["--http3-only"], "HTTP/3.0", "TLSv1.3"),
}


_docker = docker_text


# The servers of the content store's files (every box below serves it); the replay server
# serves a recorded page instead (tests/servers/test_replay_server.py).
CONTENT_SERVERS = list(servers.servers_serving("content"))


def _modes(server: str) -> list[str]:
    """The modes the server speaks, by its descriptor's protocols (aioquic: HTTP/3 only)."""
    spec = servers.get_server(server)
    return [
        m for m, (_, proto, tls) in MODES.items() if proto in spec.http_versions and tls in spec.tls_versions
    ]


def test_modes_follow_each_servers_protocols() -> None:
    assert _modes("caddy") == ["h2-tls12", "h2-tls13", "h3"]
    assert _modes("aioquic") == ["h3"]


@pytest.fixture(scope="module")
def content_root() -> Path:
    return shared_content()


# Every described server (servers/*/server.yaml, and QUICBED_SERVER_DIRS's); one whose image
# is not built is skipped (caddy-debian is optional).
@pytest.fixture(scope="module", params=CONTENT_SERVERS)
def box(request, content_root: Path, tmp_path_factory) -> ServerBox:
    b = ServerBox(request.param, content_root, tmp_path_factory.mktemp(request.param))
    try:
        servers.start_server(b.name, b.server, timeout=20)
        yield b
    finally:
        b.close()


def _pick(root: Path, prefix: str) -> str:
    return min(rel for rel in store.load_manifest(root)["files"] if rel.startswith(prefix))


@pytest.mark.docker
@pytest.mark.parametrize(
    "box, mode", [(name, mode) for name in CONTENT_SERVERS for mode in _modes(name)], indirect=["box"]
)
def test_fetch_and_access_log(box: ServerBox, content_root: Path, mode: str, tmp_path: Path) -> None:
    flags, proto, tls = MODES[mode]
    paths = ["web/sample.js", "cloud/1MB", _pick(content_root, "video/dash/chunk-stream0-")]
    proc = box.fetch(flags, paths, tmp_path)
    assert proc.returncode == 0, proc.stderr
    files = store.load_manifest(content_root)["files"]
    for i, path in enumerate(paths):
        got = hashlib.sha256((tmp_path / str(i)).read_bytes()).hexdigest()
        assert got == files[path]["sha256"], path
    entries = {
        e["path"]: e for e in servers.read_access_log(box.logs) if e["path"] in {"/" + p for p in paths}
    }
    # The log accumulates over the modes; the newest entry per path is this mode's.
    assert len(entries) == len(paths)
    for path in paths:
        e = entries["/" + path]
        assert (e["proto"], e["tls"], e["status"]) == (proto, tls, 200), e
        assert e["bytes"] == files[path]["size"]


@pytest.mark.docker
@pytest.mark.parametrize("box", ["caddy", "aioquic"], indirect=True)
def test_rewarm_answers_over_each_health_protocol_and_logs_no_trial_request(box: ServerBox) -> None:
    """servers.rewarm, which the runner calls before a trial on a server idle for a second:
    every protocol of the health check answers over loopback in the server's container, and
    nothing of it is a request the trials' access-log reading sees. A stopped server: False
    (and started again for the module's later tests)."""
    spec = servers.get_server(box.server)
    before = servers.read_access_log(box.logs, spec)
    assert servers.rewarm(box.name, box.server), (box.logs / f"{box.server}.log").read_text()[-2000:]
    after = servers.read_access_log(box.logs, spec)
    assert after == before, after[len(before) :]
    servers.stop_server(box.name, box.server)
    try:
        assert not servers.rewarm(box.name, box.server, timeout=1.0)
    finally:  # the box is the module's: the tests after this one use it running
        servers.start_server(box.name, box.server, timeout=20)


SPLIT_FIN_GET = Path(__file__).with_name("split_fin_get.py")


@pytest.mark.docker
@pytest.mark.parametrize("box", [n for n in CONTENT_SERVERS if "h3" in _modes(n)], indirect=True)
def test_an_http3_get_that_ends_after_its_headers_is_served(box: ServerBox) -> None:
    """RFC 9114 lets a request stream end in a frame after its HEADERS, and quic-go's client
    does so now and then: HAProxy passed such a GET to its origin chunked, and lighttpd
    answered 400 (2 % of quic-go's requests). Sent so every time here (aioquic, in the aioquic
    client's image), every server answers 200."""
    proc = aioquic_script(box, SPLIT_FIN_GET, "127.0.0.1", "server.quicbed", "/pki/ca.pem", "/cloud/1MB")
    assert (proc.returncode, proc.stdout.strip()) == (0, "200"), proc.stderr[-600:]


# nginx offers a QPACK table (4096 bytes, 128 blocked streams) but sends its SETTINGS after
# the handshake, so curl encodes its first request before it knows of the table: 0 curl
# timeouts in 300 fetches over loopback on a loaded host, and the one connection where curl left
# its encoder stream out carried a literal, 92-byte request that was answered. Kept as deployed.
QPACK_TABLE_AS_DEPLOYED = {"nginx"}


@pytest.mark.docker
@pytest.mark.parametrize(
    "box",
    [n for n in CONTENT_SERVERS if "h3" in _modes(n) and n not in QPACK_TABLE_AS_DEPLOYED],
    indirect=True,
)
def test_no_http3_request_can_wait_on_the_qpack_encoder_stream(box: ServerBox) -> None:
    """Debian's curl 8.14.1 (OpenSSL 3.5's QUIC: the health probe, the libcurl perf tool)
    sometimes never sends its QPACK encoder stream. A server that lets a request's headers
    refer to entries not yet inserted (a dynamic table and blocked streams, RFC 9204 2.1.2)
    and says so in its first flight then waits for it for ever: aioquic did, 12 of 300 fetches
    over loopback (stacks/aioquic/README.md). These servers offer no table, or let no stream
    block."""
    table, blocked = qpack_blocking(box, "server.quicbed")
    assert table == 0 or blocked == 0, f"{box.server}: QPACK table {table} bytes, {blocked} blocked streams"


RANGES = {  # curl -r's argument -> the status and Content-Range every server answers with
    "0-99": (206, "bytes 0-99/1048576"),
    "-100": (206, "bytes 1048476-1048575/1048576"),
    "2000000-": (416, "bytes */1048576"),  # a SHOULD (RFC 9110 15.5.17): lighttpd sends none
}


@pytest.mark.docker
@pytest.mark.parametrize("box", [n for n in CONTENT_SERVERS if "h3" in _modes(n)], indirect=True)
def test_a_byte_range_is_answered_over_http3(box: ServerBox, tmp_path: Path) -> None:
    """quicgo_perf --streams fetches one object as byte ranges on parallel streams: every
    server answers a range with 206 and exactly its bytes, a suffix range too, and a range
    past the end with 416 (RFC 9110 14)."""
    whole = (store.default_root() / "cloud" / "1MB").read_bytes()
    for spec, (status, content_range) in RANGES.items():
        flags = [
            "--http3-only",
            "--max-time",
            "10",
            "-r",
            spec,
            "-D",
            f"/out/{spec}.headers",
            "-w",
            "%{http_code}",
        ]
        proc = box.fetch(flags, ["cloud/1MB"], tmp_path / spec)
        assert proc.stdout.strip() == str(status), (spec, proc.stdout, proc.stderr)
        headers = (tmp_path / spec / f"{spec}.headers").read_text().lower()
        if status == 206 or "content-range" in headers:
            assert f"content-range: {content_range}" in headers, (spec, headers)
        if status == 206:
            first, _, last = content_range.split()[1].split("/")[0].partition("-")
            assert (tmp_path / spec / "0").read_bytes() == whole[int(first) : int(last) + 1], spec


@pytest.mark.docker
def test_restart_in_same_container(box: ServerBox, tmp_path: Path) -> None:
    # Runs reuse containers: stop, start again, still serving (h3 where it speaks it).
    servers.stop_server(box.name, box.server)
    servers.start_server(box.name, box.server, timeout=20)
    mode = "h3" if "h3" in _modes(box.server) else _modes(box.server)[0]
    assert box.fetch(MODES[mode][0], ["web/index.html"], tmp_path).returncode == 0


@pytest.mark.docker
def test_settings_and_version(box: ServerBox) -> None:
    settings = servers.server_settings(box.name, box.server)
    assert settings["version"].lstrip("v") == servers.get_server(box.server).version.lstrip("v")
    assert settings["tcp_cc"] in {"bbr", "cubic", "reno"}
    assert settings["quic"]["congestion_control"]
    # No quic-go "failed to sufficiently increase receive buffer size" warning.
    log = (box.logs / f"{box.server}.log").read_text()
    assert "increase receive buffer size" not in log, log


def _broken_box(name: str, root: Path, tmp: Path, script: str) -> ServerBox:
    b = ServerBox(name, root, tmp)
    _docker("exec", b.name, "sh", "-c", script)
    return b


@pytest.mark.docker
def test_broken_config_raises_with_log_tail(tmp_path: Path) -> None:
    root = ensure_content(tmp_path / "content", {"web"})
    b = _broken_box("nginx", root, tmp_path, "echo 'this is not a directive;' >/etc/quicbed/nginx.conf")
    try:
        start = time.monotonic()
        with pytest.raises(servers.ServerError) as err:
            servers.start_server(b.name, "nginx", timeout=10)
        assert time.monotonic() - start < 10
        assert "exited with code 1" in str(err.value)
        assert "unknown directive" in str(err.value)
    finally:
        b.close()


@pytest.mark.docker
def test_server_not_answering_times_out(tmp_path: Path) -> None:
    root = ensure_content(tmp_path / "content", {"web"})
    # Valid config, wrong port: Caddy runs but never answers on 443.
    b = _broken_box(
        "caddy",
        root,
        tmp_path,
        "printf '{\\n admin off\\n}\\n:8444 {\\n respond ok\\n}\\n' " ">/etc/quicbed/Caddyfile",
    )
    try:
        start = time.monotonic()
        with pytest.raises(servers.ServerError) as err:
            servers.start_server(b.name, "caddy", timeout=4)
        assert time.monotonic() - start < 12
        assert "no answer on 443 within 4 s" in str(err.value)
        assert "last lines of" in str(err.value)
        # The server that never came up was stopped again.
        pid = _docker("exec", b.name, "cat", "/run/quicbed/caddy.pid").stdout.strip()
        assert _docker("exec", b.name, "kill", "-0", pid, check=False).returncode != 0
    finally:
        b.close()


@pytest.mark.docker
def test_an_ffmpeg_cut_short_leaves_no_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killing the docker client does not stop its container: a video encode cut by its
    timeout (or Ctrl-C) must not keep encoding beside the next path's measurement."""
    monkeypatch.setattr(video.shutil, "which", lambda name: None)  # ffmpeg from the tools image
    prefix, seen = video.ffmpeg_runner(tmp_path)
    assert "quicbed" in prefix  # labelled: `quicbed clean` finds one a killed run left

    def encoders() -> set[str]:
        ps = ["docker", "ps", "-aq", "--filter", f"ancestor={video.TOOLS_IMAGE}"]
        return set(subprocess.run(ps, capture_output=True, text=True, check=True).stdout.split())

    before = encoders()
    with pytest.raises(subprocess.TimeoutExpired):
        video._ffmpeg(prefix, [*video._source_args(600), f"{seen}/long.mp4"], timeout=3)
    assert encoders() - before == set()
