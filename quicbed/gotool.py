"""The host's Go, as images/build.sh runs it (run_go): the pinned toolchain
(CADDY_GO_TOOLCHAIN) and the module and build caches under /var/cache/quicbed/go, offline
(GOPROXY=off: what build.sh fetched is all there is). For the Go stacks' own tests and vet
(tests/servers/test_replay_server.py) and benchmarks (bench/replay_bench.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from quicbed.errors import EnvironmentProblem
from quicbed.paths import CACHE, read_versions

LOCAL_GO = Path("/usr/local/go/bin/go")  # where make deps puts Go when Debian's is too old


def host_go() -> str:
    found = shutil.which("go") or (str(LOCAL_GO) if LOCAL_GO.exists() else None)
    if not found:
        raise EnvironmentProblem("no Go on the host: `make deps` installs it (images/build.sh needs it too)")
    return found


def run_go(args: list[str], cwd: Path, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """`go ARGS` in cwd (a Go stack's folder), offline, with the pinned toolchain."""
    gocache = CACHE / "go"
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
    return subprocess.run(
        [host_go(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
    )
