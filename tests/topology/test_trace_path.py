"""A trace-driven link on a real path: auto hands it to the delay line, which delivers a
10 → 2 → 10 Mbit/s step as stepped, and calibration's windowed check passes on it.

The step is seen from the receiver's clock alone (windows counted from the first arrival,
not from the start the delay line reports), so the shape does not rest on the backend's word.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from test_path import TOPOLOGY_IMAGE

from quicbed.topology.calibrate import check_trace_rate, flood_arrivals
from quicbed.topology.net import HostSpec, Testbed, TestbedConfig
from quicbed.topology.profiles import load_profile
from quicbed.topology.traces import load_trace, opportunities_at, step_model, trace_text

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

WINDOW_S = 0.1
STEP = [(10.0, 1.0), (2.0, 1.0), (10.0, 1.0)]


def _rates(times: list[int]) -> list[float]:
    """Delivered Mbit/s per 100 ms window from the first arrival (1500-byte IP packets)."""
    counts = [0] * int((times[-1] - times[0]) / 1e9 / WINDOW_S)
    for t in times:
        k = int((t - times[0]) / 1e9 / WINDOW_S)
        if k < len(counts):
            counts[k] += 1
    return [c * 1500 * 8 / (WINDOW_S * 1e6) for c in counts]


def test_a_step_trace_is_delivered_as_stepped(tmp_path: Path) -> None:
    trace_file = tmp_path / "step.trace"
    trace_file.write_text(trace_text(opportunities_at(step_model(STEP))))
    profile_file = tmp_path / "stepped.yaml"
    profile_file.write_text("down: {trace: step.trace, delay_ms: 40}\nup: {rate_mbit: 10, delay_ms: 40}\n")
    config = TestbedConfig(
        profile=load_profile(str(profile_file)),
        client=HostSpec(TOPOLOGY_IMAGE),
        servers=(HostSpec(TOPOLOGY_IMAGE),),
    )
    with Testbed(config) as tb:
        assert tb.backend and tb.backend.name == "delayline"
        assert tb.backend_choice and "only delayline replays" in tb.backend_choice.reason
        recorded = tb.describe()["profile"]["down"]
        assert recorded["trace_sha256"] == load_trace(trace_file).sha256
        # Two periods: the step is seen whole whatever phase the flood starts in.
        rates = _rates(flood_arrivals(tb, "down", seconds=6.0, pps=1.25 * 10e6 / 12000))
        check = check_trace_rate(tb, "down", tb.profile.down)
    low = [r < 6 for r in rates]
    longest = run = 0
    for is_low in low:
        run = run + 1 if is_low else 0
        longest = max(longest, run)
    slow = [r for r, is_low in zip(rates, low, strict=True) if is_low]
    fast = [r for r, is_low in zip(rates, low, strict=True) if not is_low]
    assert 9 <= longest <= 11, rates  # 1 s at 2 Mbit/s, give or take a window at each edge
    assert statistics.median(slow) == pytest.approx(2.0, rel=0.07), rates
    assert statistics.median(fast) == pytest.approx(10.0, rel=0.03), rates
    assert check.passed, check
