"""`quicbed lab`: how it starts (topology, calibration, first commands) and every way it ends
(a closed terminal, SIGTERM, Ctrl-C, `exit`) tears it down; a killed lab is cleaned by
`quicbed clean --lab`. Each lab runs in its own session on a pty (tests/lab_session.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from lab_session import LabSession

from quicbed.topology.clean import leftovers

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]
TEARDOWN_S = 60  # UML router, two containers and the namespaces


def _nothing_left(timeout: float = 10) -> list[str]:
    deadline = time.monotonic() + timeout
    while (found := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


@pytest.mark.parametrize("how", ["hangup", "sigterm", "ctrl-c", "exit"])
def test_lab_starts_informs_and_every_end_tears_it_down(how: str) -> None:
    # The hang-up comes with SIGHUP inherited as ignored and a command running: the case
    # where the first attempt's lab neither ended on the signal nor saw its input close.
    # Ctrl-C comes with SIGINT inherited as ignored (Python then installs no
    # KeyboardInterrupt): the case where the lab ignored Ctrl-C in the full suite.
    inherited = {"hangup": (signal.SIGHUP,), "ctrl-c": (signal.SIGINT,)}
    lab = LabSession(
        "india",
        f"life{how[:4].replace('-', '')}",
        *([] if how == "hangup" else ["--no-calibrate"]),
        ignored=inherited.get(how, ()),
    )
    try:
        lab.expect(r"client 10\.77\.1\.10", 120)  # the topology
        if how == "hangup":  # the calibrated figures, once
            # a round figure prints without decimals ("80")
            lab.expect(r"rtt_median_ms\W+both\W+80(\.\d+)?\W+[78]\d(\.\d+)?\W", 120)
            lab.expect(r"goodput_mbit\W+down", 60)
        lab.expect(r"client ping -c 3 server", 60)  # the first commands to try
        lab.started()
        out = lab.command("client ping -c 2 -i 0.2 server")
        assert "2 received" in out and "10.77.2.10" in out, out
        if how == "hangup":
            os.write(lab.master, b"client sleep 120\n")
            time.sleep(2)
            lab.hang_up()
        elif how == "sigterm":
            os.kill(lab.proc.pid, signal.SIGTERM)
        elif how == "ctrl-c":
            time.sleep(1)  # at the prompt, as a student is: not while it is being printed
            os.write(lab.master, b"\x03")
        else:
            os.write(lab.master, b"exit\n")
        code = lab.wait(TEARDOWN_S)
        assert code == (130 if how in ("hangup", "sigterm") else 0)
        assert _nothing_left() == []
    finally:
        lab.close()


def test_killed_lab_is_cleaned_by_clean_lab() -> None:
    import subprocess
    import sys

    lab = LabSession("india", "lifekill", "--no-calibrate")
    try:
        lab.started()
        os.killpg(lab.proc.pid, signal.SIGKILL)
        lab.wait(10)
        assert leftovers()  # the kill left the lab behind
        proc = subprocess.run(
            [sys.executable, "-m", "quicbed.cli", "clean", "--lab", "lifekill"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert _nothing_left() == []
    finally:
        lab.close()
