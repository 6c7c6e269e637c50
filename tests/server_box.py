"""A shipped server (quicbed/caddy, quicbed/nginx, ...) in a --network none container, set
up the way the topology does it, serving the shared content cache; used by the docker tests
of the servers and of the clients (which join its network namespace: loopback only)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from quicbed import servers
from quicbed.clients.tools import TOOLS
from quicbed.servers import pki
from quicbed.workloads import ensure_content, store

H3_SETTINGS = Path(__file__).resolve().parent / "servers" / "h3_settings.py"
# RFC 9204 5: the SETTINGS by which a server lets a request's headers wait on its encoder stream.
QPACK_MAX_TABLE_CAPACITY, QPACK_BLOCKED_STREAMS = "1", "7"


def docker_text(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


def have_image(image: str) -> bool:
    return docker_text("image", "inspect", image, check=False).returncode == 0


def shared_content() -> Path:
    """The shared content cache with web, cloud and the video ladder: made once (video takes
    a minute or two), reused by later runs. Without ffmpeg and the tools image (make images
    builds it) the test fails: a skip would hide a failed build."""
    root = store.default_root()
    try:
        ensure_content(root, {"web", "cloud", "video"})
    except store.ContentError as e:  # no ffmpeg and no quicbed/tools image
        pytest.fail(str(e))
    return root


class ServerBox:
    """A --network none server container set up the way the topology does it; `root` is what
    it serves (the content store, or a replay site with its `origins`' certificates)."""

    def __init__(self, name: str, root: Path, tmp: Path, origins: Sequence[str] = ()):
        spec = servers.get_server(name)
        if not have_image(spec.image):
            pytest.fail(f"{spec.image} not built (images/build.sh {name})")
        self.server, self.image = name, spec.image
        self.pki = pki.generate_pki(tmp / "pki", "127.0.0.1", origins=origins)
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.name = f"dev-srv-test-{name}-{uuid.uuid4().hex[:6]}"
        docker_text(
            "run",
            "-d",
            "--network",
            "none",
            "--name",
            self.name,
            *servers.docker_run_args(name, root, self.pki.dir, self.logs),
        )

    def fetch(
        self,
        flags: list[str],
        paths: list[str],
        out: Path,
        *,
        host: str = "server.quicbed",
        fail: bool = True,
    ) -> subprocess.CompletedProcess:
        """One curl, one connection, all paths of https://HOST/, from a second container in the
        same netns; each body to out/<index>. `fail`: a status >= 400 is curl's error too."""
        out.mkdir(parents=True, exist_ok=True)
        cmd = [
            "run",
            "--rm",
            "--network",
            f"container:{self.name}",
            "-v",
            f"{self.pki.dir}:/pki:ro",
            "-v",
            f"{out}:/out",
            self.image,
            "curl",
            "-sS",
            *(["--fail"] if fail else []),
            "--max-time",
            "30",
            *flags,
            "--cacert",
            "/pki/ca.pem",
            "--resolve",
            f"{host}:443:127.0.0.1",
        ]
        for i, path in enumerate(paths):
            cmd += ["-o", f"/out/{i}", f"https://{host}/{path.lstrip('/')}"]
        return docker_text(*cmd, check=False)

    def close(self) -> None:
        docker_text("rm", "-f", self.name, check=False)


def aioquic_script(box: ServerBox, script: Path, *args: str) -> subprocess.CompletedProcess:
    """A Python script of the tests run by the aioquic client's image in the box's network
    namespace, with the box's CA at /pki/ca.pem."""
    image = TOOLS["aioquic"].image
    if not have_image(image):
        pytest.fail(f"{image} not built (images/build.sh aioquic)")
    return docker_text(
        "run", "--rm", "--network", f"container:{box.name}", "-v", f"{box.pki.dir}:/pki:ro",
        "-v", f"{script}:/{script.name}:ro", "--entrypoint", "/opt/aioquic/bin/python3", image,
        f"/{script.name}", *args,
        check=False,
    )  # fmt: skip


def qpack_blocking(box: ServerBox, server_name: str) -> tuple[int, int]:
    """The QPACK table capacity and blocked streams the box's server offers in its HTTP/3
    SETTINGS (tests/servers/h3_settings.py)."""
    proc = aioquic_script(box, H3_SETTINGS, "127.0.0.1", server_name, "/pki/ca.pem")
    assert proc.returncode == 0, proc.stderr[-600:]
    settings = json.loads(proc.stdout)
    return settings.get(QPACK_MAX_TABLE_CAPACITY, 0), settings.get(QPACK_BLOCKED_STREAMS, 0)
