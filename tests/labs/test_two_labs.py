"""Two labs on one host at once (started together, so their bring-ups overlap): both paths
work, `quicbed clean --lab A` removes A and nothing of B, B keeps working, and plain
`quicbed clean` (the module's clean_slate) still removes everything."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from lab_session import LabSession

from quicbed.topology.clean import leftovers
from quicbed.topology.hosts import LABEL

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]


def _containers(lab_id: str) -> list[str]:
    proc = subprocess.run(
        ["docker", "ps", "-a", "--format", "{{.Names}}", "--filter", f"label={LABEL}.run={lab_id}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return sorted(proc.stdout.split())


def test_two_labs_at_once_and_clean_one() -> None:
    a, b = LabSession("india", "twoa", "--no-calibrate"), LabSession("india", "twob", "--no-calibrate")
    try:
        a.started()
        b.started()
        for lab in (a, b):
            out = lab.command("client ping -c 3 -i 0.2 server")
            assert "3 received" in out, out
        assert _containers("twoa") == ["quicbed-twoa-client", "quicbed-twoa-server"]
        proc = subprocess.run(
            [sys.executable, "-m", "quicbed.cli", "clean", "--lab", "twoa"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert a.wait(10) == 130  # it was asked to tear down, and did
        assert _containers("twoa") == []
        assert _containers("twob") == ["quicbed-twob-client", "quicbed-twob-server"]
        out = b.command("client ping -c 3 -i 0.2 server")
        assert "3 received" in out, out
        os.write(b.master, b"exit\n")
        assert b.wait(60) == 0
        assert leftovers() == []
    finally:
        a.close()
        b.close()
