"""Issue 13's decided criteria as arithmetic: a run row's connection ÷ RTT, net of the client's
CPU, may exceed n RTT by max(3 %, 1.5 ms); the bench's (net of client and server) by 3 %."""

from __future__ import annotations

import pytest

from quicbed.analysis.physics import connection_within, row_connection_within, row_upper_rtts


@pytest.mark.parametrize(
    ("rtts", "rtt_ms", "upper"),
    [
        (1, 80.0, 1.03),  # 3 % of 80 ms (2.4 ms) is more than 1.5 ms
        (1, 20.0, 1.075),  # on germany's 20 ms, 1.5 ms is 7.5 % of a round trip
        (3, 20.0, 3.09),  # 3 % of three round trips (1.8 ms) again exceeds 1.5 ms
        (2, 6.0, 2.25),  # germany-lab: 1.5 ms is a quarter of a 6 ms round trip
    ],
)
def test_a_rows_upper_bound_is_the_larger_of_3_percent_and_1_5_ms(
    rtts: int, rtt_ms: float, upper: float
) -> None:
    assert row_upper_rtts(rtts, rtt_ms) == pytest.approx(upper)
    assert row_connection_within(rtts, upper - 1e-9, rtt_ms)
    assert not row_connection_within(rtts, upper + 1e-6, rtt_ms)
    assert not row_connection_within(rtts, rtts * 0.985, rtt_ms)  # faster than the path: no


def test_the_bench_bound_has_no_millisecond_allowance() -> None:
    assert connection_within(1, 1.03, 1.05) and not connection_within(1, 1.05, 1.07)
    # Net of overlapping endpoint time it may fall below n; the measured time may not.
    assert connection_within(3, 2.967, 3.059) and not connection_within(3, 2.967, 2.96)
    assert row_connection_within(1, 1.05, 20.0)  # the same ratio in a row at 20 ms passes
