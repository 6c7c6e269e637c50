"""The replay server's own tests (stacks/quicgo/replay_test.go: two origins over HTTP/2 and
HTTP/3 on loopback, the record's answers and think time, hostile sites refused) and `go vet`,
with the host's Go at the pinned toolchain and the modules images/build.sh fetched (offline:
GOPROXY=off, so nothing is fetched here)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from quicbed.paths import CACHE, REPO, read_versions

pytestmark = pytest.mark.docker  # needs what `make images` left in the cache (Go's modules)

STACK = REPO / "stacks" / "quicgo"


def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    assert found, "no Go on the host: `make deps` installs it (the quicgo image needs it)"
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    gocache = Path(CACHE) / "go"
    env = {
        **os.environ,
        "GOTOOLCHAIN": read_versions()["CADDY_GO_TOOLCHAIN"],
        "GOPATH": str(gocache),
        "GOMODCACHE": str(gocache / "mod"),
        "GOCACHE": str(gocache / "build"),
        "GOPROXY": "off",
        "GOFLAGS": "-mod=readonly -buildvcs=false",
        "CGO_ENABLED": "0",
    }
    return subprocess.run([_go(), *args], cwd=STACK, env=env, capture_output=True, text=True, timeout=600)


def test_go_vet_finds_nothing() -> None:
    proc = _run("vet", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_replay_server_serves_the_record_over_both_protocols() -> None:
    proc = _run("test", "-count=1", ".")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "ok" in proc.stdout
