"""`short_path`: a calibration refused for a median RTT below its profile's by more than the
tolerance, which the bring-up's compensation (the least excess of its probe) only gives when
the probe itself was taken during a pause. Pure logic on recorded checks; the path that
shows it is tests/topology/test_bringup_pauses_path.py."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest

from quicbed.topology.calibrate import SHORT_PATH, Calibration, Check, check_rtt, short_path
from quicbed.topology.profiles import load_profile


def _rtt(measured: float, metric: str = "rtt_median_ms", tolerance: str = "±0.80 ms") -> Check:
    """india's RTT check: 80.08 ms within ±0.80."""
    passed = not math.isnan(measured) and abs(measured - 80.08) <= 0.8
    return Check(metric, "both", 80.08, measured, tolerance, passed, "min 80.00 ms over 30 samples")


def _calibration(*checks: Check) -> Calibration:
    return Calibration(profile="india", backend="delayline", checks=list(checks))


@pytest.mark.parametrize(
    ("measured", "short"),
    [
        (62.5, True),  # the median compensation taken while the delay line was paused
        (79.2, True),  # UML under steal
        (79.28, False),  # within the tolerance: passed
        (80.08, False),
        (81.5, False),  # long: refused, but a calm bring-up would not shorten it
        (math.nan, False),  # too few replies: not a short path
    ],
)
def test_only_a_refused_median_below_the_tolerance_is_short(measured: float, short: bool) -> None:
    assert short_path(_calibration(_rtt(measured))) is short


def test_other_checks_do_not_make_a_path_short() -> None:
    goodput = Check("goodput_mbit", "down", 20.0, 9.8, "≥ 94 %", False)
    assert not short_path(_calibration(goodput, _rtt(80.1)))
    assert short_path(_calibration(goodput, _rtt(70.0)))
    assert not short_path(_calibration(_rtt(70.0, metric="rtt_min_ms", tolerance="-0.80..+1.80 ms")))


def test_a_recorded_calibration_reads_the_same() -> None:
    """The manifest's JSON, read back (Calibration.from_dict), is judged alike."""
    cal = _calibration(_rtt(62.5))
    assert short_path(Calibration.from_dict(cal.to_dict()))


class Pings:
    """A testbed on india whose pings all take `rtt_ms`."""

    def __init__(self, rtt_ms: float) -> None:
        self.profile = load_profile("india")
        self.rtt_ms = rtt_ms

    def ping(self, count: int, interval: float = 0.05) -> list[float]:
        return [self.rtt_ms] * count


def _checked(rtt_ms: float) -> Check:
    return check_rtt(cast(Any, Pings(rtt_ms)), samples=30)


def test_check_rtt_names_a_short_path_and_only_that() -> None:
    short = _checked(62.5)
    assert not short.passed and short.detail.startswith(f"{SHORT_PATH}; min 62.50 ms over 30 samples")
    assert short_path(_calibration(short))
    long = _checked(90.0)
    ci = "the median's 99% CI"
    assert not long.passed and long.detail == f"min 90.00 ms over 30 samples; {ci} [90.00, 90.00]"
    assert not short_path(_calibration(long))
    assert (
        _checked(80.1).passed
        and _checked(80.1).detail == f"min 80.10 ms over 30 samples; {ci} [80.10, 80.10]"
    )
