"""The replay server's own tests (stacks/quicgo/replay_test.go: two origins over HTTP/2 and
HTTP/3 on loopback, the record's answers and think time, hostile sites refused) and `go vet`,
with the host's Go at the pinned toolchain and the modules images/build.sh fetched (offline:
quicbed/gotool.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from quicbed.gotool import host_go, run_go
from quicbed.paths import REPO

pytestmark = pytest.mark.docker  # needs what `make images` left in the cache (Go's modules)

STACK = REPO / "stacks" / "quicgo"


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
