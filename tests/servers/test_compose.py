"""docker-compose.yml: the server stack on its own answers over HTTP/3 on 127.0.0.1, and the
committed file agrees with the server descriptors (servers/<name>/server.yaml)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from quicbed.paths import REPO, read_versions
from quicbed.servers import descriptors
from quicbed.servers.prepare_compose import PORTS, prepare


def test_compose_file_matches_descriptors() -> None:
    """Every shipped server with a compose_port is a service of docker-compose.yml with its
    image (version from versions.env, the default being the pinned one), port and log dir."""
    shipped = descriptors.load_servers(dirs="")
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    ports = {name: s.compose_port for name, s in shipped.items() if s.compose_port}
    assert ports == {"caddy": 8443, "nginx": 9443}
    assert {n: p for n, p in PORTS.items() if n in shipped} == ports
    assert list(compose["services"]) == list(ports)
    versions = read_versions()
    for name, port in ports.items():
        spec, service = shipped[name], compose["services"][name]
        repository = spec.image.rsplit(":", 1)[0]
        assert service["image"] == (
            f"{repository}:${{{spec.version_key}:-" f"{versions[spec.version_key]}}}"
        ), name
        assert service["ports"] == [f"127.0.0.1:{port}:443/tcp", f"127.0.0.1:{port}:443/udp"]
        assert service["volumes"][-1].endswith(f"/logs/{name}:/var/log/quicbed"), name


def _fetch_h3(pki: Path, port: int) -> str:
    argv = [
        "docker",
        "run",
        "--rm",
        "--network",
        "host",
        "-v",
        f"{pki}:/pki:ro",
        "quicbed/client:dev",
        "curl",
        "--http3-only",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_version} %{response_code}",
        "--cacert",
        "/pki/ca.pem",
        "--resolve",
        f"localhost:{port}:127.0.0.1",
        f"https://localhost:{port}/web/index.html",
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.mark.docker
def test_compose_stack_serves_http3(tmp_path: Path) -> None:
    out = tmp_path / "compose"
    prepare(out, {"web"}, [])
    env = {**os.environ, "QUICBED_COMPOSE_DIR": str(out)}
    compose = ["docker-compose", "-p", "quicbedtest", "--env-file", "versions.env"]
    up = subprocess.run(
        [*compose, "up", "-d"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert up.returncode == 0, up.stderr
    try:
        for server, port in PORTS.items():
            deadline, answer = time.monotonic() + 30, ""
            while time.monotonic() < deadline and answer != "3 200":
                answer = _fetch_h3(out / "pki", port)
                time.sleep(0 if answer == "3 200" else 1)
            assert answer == "3 200", f"{server} on 127.0.0.1:{port} answered {answer!r}"
            logs = (out / "logs" / server / "access.log").read_text()
            assert "HTTP/3.0" in logs
    finally:
        subprocess.run([*compose, "down"], cwd=REPO, env=env, capture_output=True, timeout=120)
