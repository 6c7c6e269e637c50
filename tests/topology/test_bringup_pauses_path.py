"""A bring-up never makes a path short (issue 62): a stand-in for a hypervisor's steal pauses
the delay line's processes (SIGSTOP, SIGCONT) 25 ms in every 40 while the bring-up probes what
the path adds to netem's delay (Testbed._measure_forwarding_latency), then lets them run. The
path is then no shorter than its profile, and its RTT check passes: the bring-up subtracts the
least excess its pings saw, which a pause cannot lower.

The pauses make most of the probe's pings late, so its median excess is several ms above the
least: the median the bring-up subtracted before made this path 71.7 ms against 80.08 ± 0.80
(refused: "short path"), the least 80.0. (15 ms in every 40 leaves more than half of them on
time, since the delay line wakes on SIGCONT: the median then moved the path by 0.3 ms.)

The delay line only: a UML router's kernel panics when its processes are stopped by a signal.
Namespace hosts (no containers): only the path's RTT is judged."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from quicbed.topology import net
from quicbed.topology.backends import DelayLineBackend
from quicbed.topology.calibrate import check_rtt
from quicbed.topology.net import HostSpec, Testbed, TestbedConfig
from quicbed.topology.profiles import load_profile

pytestmark = [pytest.mark.path, pytest.mark.backend("delayline"), pytest.mark.usefixtures("clean_slate")]

PAUSE_S, PERIOD_S = 0.025, 0.040  # steal's stand-in: 25 ms of every 40


@contextlib.contextmanager
def pausing(pids: list[int]) -> Iterator[list[float]]:
    """Stop these processes PAUSE_S in every PERIOD_S (on a fixed schedule, so the pauses do
    not drift) until the block ends; yields the pauses' start times, one per pause. The
    processes are left running, whatever happens."""
    done, pauses = threading.Event(), list[float]()

    def pause() -> None:
        start = time.monotonic()
        while not done.wait(start + len(pauses) * PERIOD_S - time.monotonic()):
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            pauses.append(time.monotonic())
            done.wait(start + (len(pauses) - 1) * PERIOD_S + PAUSE_S - time.monotonic())
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=pause, daemon=True)
    thread.start()
    try:
        yield pauses
    finally:
        done.set()
        thread.join(timeout=5)
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


@pytest.fixture
def paused_probe(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The bring-up's forwarding probe runs while the delay lines are paused; the list it
    returns holds the pauses' start times."""
    measure = Testbed._measure_forwarding_latency
    counted: list[float] = []

    def paused(tb: Testbed) -> None:
        assert isinstance(tb.backend, DelayLineBackend)
        with pausing(tb.backend.router_pids()) as pauses:
            measure(tb)
        counted.extend(pauses)

    monkeypatch.setattr(net.Testbed, "_measure_forwarding_latency", paused)
    return counted


def test_pauses_during_the_bring_up_do_not_make_the_path_short(paused_probe: list[float]) -> None:
    namespace = HostSpec(image=None)
    config = TestbedConfig(load_profile("india"), backend="delayline", client=namespace, servers=(namespace,))
    with Testbed(config) as tb:
        probe = tb.applied["forwarding_probe"]
        rtt = check_rtt(tb, samples=30)
    tolerance = float(rtt.tolerance.strip("±ms "))
    print(
        f"delayline, india, paused {len(paused_probe)} times during the probe: excess over "
        f"{probe['pings']} pings min {probe['excess_min_ms']:.3f} ms, median "
        f"{probe['excess_median_ms']:.3f} ms; compensation ({probe['compensation']}) "
        f"{tb.applied['forwarding_rtt_ms']:.3f} ms; RTT median {rtt.measured:.2f} ms against "
        f"{rtt.configured:.2f} ± {tolerance:.2f} ({rtt.detail})"
    )
    assert len(paused_probe) >= 20, "the probe was not paused"
    # What was subtracted is the least excess, and the manifest says so (Testbed.describe).
    assert probe["compensation"] == "min" and probe["pings"] >= 20, probe
    assert tb.applied["forwarding_rtt_ms"] == max(0.0, probe["excess_min_ms"]), tb.applied
    # Most of the probe's pings were late: the median the bring-up used to subtract is more
    # than the tolerance above the least, so it would have made this path short.
    assert probe["excess_median_ms"] - probe["excess_min_ms"] > tolerance, probe
    assert rtt.measured >= rtt.configured - tolerance, "short path"
    assert rtt.passed, (rtt.measured, rtt.configured, rtt.tolerance, rtt.detail)
