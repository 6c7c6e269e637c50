"""The Containernet-style API: how a script's link becomes quicbed's path (unit), and an
example script bringing the india path up, calibrating it and tearing down (path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from quicbed.errors import InputError
from quicbed.labs.containernet import Containernet, parse_delay_ms
from quicbed.paths import REPO


@pytest.mark.parametrize(
    ("text", "ms"), [("40ms", 40.0), ("0.04s", 40.0), ("500us", 0.5), (40, 40.0), ("2.5 ms", 2.5)]
)
def test_delays_read_like_mininet(text: str | int, ms: float) -> None:
    assert parse_delay_ms(text) == pytest.approx(ms)


def test_the_link_is_one_way_delay_in_each_direction_once() -> None:
    net = Containernet()
    h1, h2 = net.addDocker("h1"), net.addDocker("h2", dimage="quicbed/nginx")
    net.addLink(h1, h2, delay="40ms", bw=20, loss=1, max_queue_size=100)
    assert (h1.role, h2.role) == ("client", "server")
    assert net.link == {
        "down.delay_ms": "40.0",
        "up.delay_ms": "40.0",
        "rate_mbit": "20",
        "loss_pct": "1",
        "jitter_ms": "0.0",
        "queue_packets": "100",
    }
    with pytest.raises(InputError, match="one link only"):
        net.addLink(h1, h2, delay="1ms", bw=1)
    with pytest.raises(InputError, match="already in the network"):
        net.addDocker("h1")


@pytest.mark.path
@pytest.mark.usefixtures("clean_slate")
def test_example_script_brings_india_up_calibrates_and_tears_down() -> None:
    from quicbed.topology.clean import leftovers

    script = REPO / "labs" / "examples" / "round_trips.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), "--no-cli"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == 0, out[-3000:]
    assert "path matches the profile" in out and "rtt_median_ms" in out, out[-3000:]
    assert leftovers() == []
