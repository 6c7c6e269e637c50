"""The loss check that stops when decided (topology/loss_sequence.py), and the probe's counts
(udpprobe.Counts): the statistics the calibration's loss probe runs on, simulated over 1,000
probes that look at their counts as the real one does (every REPORT_S at the probe's pace)."""

from __future__ import annotations

import numpy as np
import pytest

from quicbed.topology.calibrate import MAX_PPS, _loss_check
from quicbed.topology.loss_sequence import LOSS_CONFIDENCE, confidence_sequence, judge_loss, loss_band
from quicbed.topology.udpprobe import REPORT_S, Counts

RUNS = 1000
CAP = 20000  # calibrate()'s udp_packets: the probe's most datagrams per direction
LOOK = int(MAX_PPS * REPORT_S)  # datagrams between two of the receiver's reports (250)


def _probe(rng: np.random.Generator, true_pct: float, expected_pct: float) -> tuple[bool, bool, int]:
    """One probe of a link losing true_pct, checked at every look: (decided, passed, sent)."""
    lost = sent = 0
    while sent < CAP:
        lost += int(rng.binomial(LOOK, true_pct / 100))
        sent += LOOK
        verdict = judge_loss(lost, sent, expected_pct)
        if verdict.decided:
            return True, verdict.passed, sent
    return False, judge_loss(lost, sent, expected_pct).passed, sent


def _refusals(true_pct: float, expected_pct: float, seed: int) -> tuple[int, list[int]]:
    rng = np.random.default_rng(seed)
    outcomes = [_probe(rng, true_pct, expected_pct) for _ in range(RUNS)]
    return sum(not passed for _, passed, _ in outcomes), sorted(sent for _, _, sent in outcomes)


@pytest.mark.parametrize("expected_pct", [0.0, 1.0, 5.0, 10.0])
def test_a_right_link_at_its_band_edges_is_refused_at_most_at_the_stated_rate(expected_pct: float) -> None:
    """Looked at 80 times, a fixed-n 99.9 % interval would refuse a right link far more than
    0.1 % of the time; the sequence keeps the rate at every look, even for a link whose loss
    sits on its band's edge. 1,000 probes each: Binomial(1000, 0.001) reaches 5 in 0.4 %."""
    low, high = loss_band(expected_pct)
    for true_pct in sorted({low, expected_pct, high}):
        refused, _ = _refusals(true_pct, expected_pct, seed=int(100 * true_pct) + 1)
        assert refused <= 4, (expected_pct, true_pct, refused)
    assert LOSS_CONFIDENCE == 0.999


def test_the_probe_stops_early_where_the_link_is_clearly_right() -> None:
    """What makes the calibration short: a lossless link is decided in under 5,000
    datagrams (1 s at MAX_PPS), a 10 % one in under 7,000 half the time and under 11,000
    nine times in ten (at 10 % the band is ±2 points: the sequence needs about 6,000
    datagrams to fit in it at the link's own rate; more when the early counts stray)."""
    _, lossless = _refusals(0.0, 0.0, seed=7)
    assert lossless[-1] <= 5000, lossless[-1]
    _, ten = _refusals(10.0, 10.0, seed=8)
    assert ten[RUNS // 2] <= 7000 and ten[int(0.9 * RUNS)] <= 11000, (ten[RUNS // 2], ten[int(0.9 * RUNS)])


@pytest.mark.parametrize(
    ("expected_pct", "true_pct", "by"),
    [(2.0, 4.0, 10000), (0.0, 1.0, 10000), (10.0, 5.0, 5000), (5.0, 10.0, 4000)],
)
def test_a_wrong_link_is_refused_early(expected_pct: float, true_pct: float, by: int) -> None:
    """The refusal test's wrong loss (2 % asked, 4 % applied) and others: every probe refuses
    it, and before `by` datagrams, half the probe's cap (the worst of 200 was 7,250, 6,500,
    3,750 and 2,500 datagrams when this was written)."""
    rng = np.random.default_rng(11)
    outcomes = [_probe(rng, true_pct, expected_pct) for _ in range(200)]
    assert all(decided and not passed for decided, passed, _ in outcomes)
    assert max(sent for _, _, sent in outcomes) <= by


def test_the_sequence_holds_its_counts_and_narrows_as_they_grow() -> None:
    low, high = confidence_sequence(0, 5000)
    assert low == 0.0 and 0.0 < high < 0.0025
    low, high = confidence_sequence(500, 5000)
    assert low < 0.1 < high and high - low < 0.045
    wider = confidence_sequence(50, 500)
    assert wider[0] < low and wider[1] > high
    assert loss_band(0.0) == (0.0, 0.25) and loss_band(10.0) == pytest.approx((8.0, 12.0))


def test_the_loss_check_reads_as_a_band_and_a_sequence() -> None:
    """_loss_check's pass/refuse at the counts the probe ended with, and what it says."""
    inside = _loss_check("down", 10.0, 600, 6000, bursty=False)
    assert inside.passed and "inside the band [8.00, 12.00]" in inside.detail and "decided" in inside.detail
    refused = _loss_check("down", 2.0, 160, 4000, bursty=False)  # 4 % where 2 % is asked
    assert not refused.passed and "outside" in refused.detail
    capped = _loss_check("up", 1.0, 240, 20000, bursty=False)  # 1.2 %: neither, at the cap
    assert capped.passed and "not decided" in capped.detail
    assert _loss_check("up", 0.0, 3, 4000, bursty=False).passed  # 0.075 %: within the band
    assert not _loss_check("up", 0.0, 100, 4000, bursty=False).passed  # 2.5 % on a lossless link


def test_the_receiver_counts_a_loss_only_once_later_datagrams_passed_it() -> None:
    """udpprobe's counts: a missing datagram is not lost while the reorder window may still
    bring it; the final report decides every one; runs and reordering counted once."""
    counts = Counts(10, reorder=2)
    for seq in (0, 1, 3, 4, 2, 5, 7, 7):
        counts.arrived(seq)
    partial = counts.report(final=False)
    assert partial["sent"] == 6 and partial["received"] == 6  # 0-5 decided; 2 came late
    assert partial["duplicates"] == 1 and partial["ahead"] == 2  # 3 past 2, 7 past 6
    final = counts.report(final=True)
    assert final["sent"] == 10 and final["received"] == 7  # 6, 8, 9 lost
    assert final["loss_runs"] == 2 and final["final"] is True
