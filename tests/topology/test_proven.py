"""A refused calibration on a contended host, or a short path, is measured once more on a fresh
bring-up after a wait for calm (topology/proven.py); a refusal on a calm host stands. Pure
logic: the bring-up, the calibration, the meter and the wait are stand-ins fed recorded figures."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from quicbed.hostload import Load
from quicbed.topology.calibrate import Calibration, Check
from quicbed.topology.proven import proven

CALM = Load(seconds=10.0, steal=0.01, pressure=0.05, slow_ratio=1.1)
STOLEN = Load(seconds=10.0, steal=0.30, pressure=0.05, slow_ratio=1.2)


def _calibration(rtt_ms: float) -> Calibration:
    """india's RTT check (80.08 ms, ±0.80) measured at rtt_ms."""
    ok = abs(rtt_ms - 80.08) <= 0.8
    check = Check("rtt_median_ms", "both", 80.08, rtt_ms, "±0.80 ms", ok, "min 80.00 ms over 30 samples")
    return Calibration(profile="india", backend="delayline", checks=[check])


class Meter:
    """Hands out the recorded loads in turn, one per calibration."""

    def __init__(self, loads: list[Load]) -> None:
        self.loads = iter(loads)
        self.load: Load | None = None

    def __call__(self) -> Meter:
        return self

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.load = next(self.loads)


class Stand:
    """Records what the path went through."""

    def __init__(self, rtts: list[float], loads: list[Load]) -> None:
        self.rtts, self.meter = iter(rtts), Meter(loads)
        self.events: list[str] = []

    @contextlib.contextmanager
    def bring_up(self) -> Iterator[str]:
        self.events.append("up")
        try:
            yield "path"
        finally:
            self.events.append("down")

    def calibrate(self, up: str) -> Calibration:
        assert up == "path"
        self.events.append("calibrate")
        return _calibration(next(self.rtts))

    def wait(self, say: object = None) -> tuple[bool, Load]:
        self.events.append("wait")
        return True, CALM

    def run(self) -> Calibration:
        said: list[str] = []
        with proven(self.bring_up, self.calibrate, said.append, self.meter, self.wait) as (up, cal):
            assert up == "path" and self.events[-1] == "calibrate"  # yielded with the path up
            self.events.append("measure")
        self.said = said
        return cal


def test_a_refusal_while_the_host_was_stolen_is_measured_again_on_calm() -> None:
    stand = Stand([81.5, 80.1], [STOLEN, CALM])  # long: refused, but on a stolen host
    cal = stand.run()
    assert cal.passed
    assert stand.events == ["up", "calibrate", "down", "wait", "up", "calibrate", "measure", "down"]
    assert [x["attempt"] for x in cal.host_load] == [1, "wait", 2]
    assert cal.host_load[0]["contended"] and not cal.host_load[2]["contended"]
    assert "contended" in stand.said[0] and "again on a calm host" in stand.said[0]


def test_a_short_path_is_brought_up_again_even_on_a_calm_host() -> None:
    stand = Stand([62.5, 80.2], [CALM, CALM])
    cal = stand.run()
    assert cal.passed and stand.events.count("up") == 2
    assert "short path: the compensation was measured during a pause" in stand.said[0]


def test_a_refusal_on_a_calm_host_stands() -> None:
    stand = Stand([81.5], [CALM])  # long, not short: the path is what it is
    cal = stand.run()
    assert not cal.passed
    assert stand.events == ["up", "calibrate", "measure", "down"]


def test_the_second_attempt_is_judged_whatever_it_finds() -> None:
    stand = Stand([62.5, 63.0], [STOLEN, STOLEN])
    cal = stand.run()
    assert not cal.passed and stand.events.count("up") == 2 and stand.events.count("wait") == 1
    assert [x["attempt"] for x in cal.host_load] == [1, "wait", 2]


def test_a_passing_calibration_on_a_stolen_host_is_kept_with_its_load() -> None:
    stand = Stand([80.0], [STOLEN])
    cal = stand.run()
    assert cal.passed and stand.events.count("up") == 1
    assert cal.host_load[0]["contended"] is True


def test_the_path_comes_down_when_the_measurement_fails() -> None:
    stand = Stand([80.0], [CALM])
    with pytest.raises(RuntimeError):
        with proven(stand.bring_up, stand.calibrate, meter=stand.meter, wait_for_calm=stand.wait):
            raise RuntimeError("a trial's crash")
    assert stand.events[-1] == "down"
