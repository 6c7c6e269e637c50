"""A fresh browser's start-up work leaves the timed window: the load waits until the browser's
processes are quiet, at most --settle ms (clients/browser/proc_watch.py settle_until_quiet).

Real processes stand in for the browser: marked as a load's browser is (its environment), one
busy for a while and then idle, one busy past the cap."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from browser_module import load_browser_perf

load_browser_perf()  # the drivers' modules import by name, beside browser_perf.py
from proc_watch import MARKER, settle_until_quiet  # noqa: E402

BUSY_THEN_IDLE = (
    "import time\nend = time.monotonic() + {busy}\nwhile time.monotonic() < end: pass\ntime.sleep(30)"
)


@contextmanager
def marked_process(busy_s: float) -> Iterator[str]:
    """A process in a load's browser's environment, on a CPU for busy_s, then asleep."""
    token = f"test-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-c", BUSY_THEN_IDLE.format(busy=busy_s)], env={**os.environ, MARKER: token}
    )
    try:
        yield token
    finally:
        proc.kill()
        proc.wait()


def test_the_wait_ends_when_the_browser_goes_quiet() -> None:
    with marked_process(0.5) as token:
        waited = settle_until_quiet(token, cap_s=3.0)
    # Not before its busy half second (less the interpreter's start), well before the cap.
    assert 0.4 <= waited < 2.0, waited


def test_a_browser_busy_past_the_cap_is_waited_for_the_cap_only() -> None:
    with marked_process(10.0) as token:
        waited = settle_until_quiet(token, cap_s=0.6)
    assert 0.6 <= waited < 1.0, waited


def test_no_wait_asked_is_none_waited() -> None:
    with marked_process(10.0) as token:
        assert settle_until_quiet(token, cap_s=0.0) < 0.05
