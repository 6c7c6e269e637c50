"""Bootstrap CIs and protocol comparisons (quicbed.analysis.stats) on constructed samples."""

from __future__ import annotations

import numpy as np
import pytest

from quicbed.analysis.physics import slow_start_deficit_s, tcp_download_s
from quicbed.analysis.stats import compare, median_ci, median_diff_ci, percentile_ci


def test_median_ci_covers_the_true_median_at_about_the_nominal_rate():
    rng = np.random.default_rng(7)
    true_median = 1.0  # lognormal(0, 1): median e^0
    hits = sum(
        lo <= true_median <= hi
        for lo, hi in (
            (e.lo, e.hi)
            for e in (median_ci(rng.lognormal(0, 1, 40), n_boot=1000, seed=i) for i in range(200))
        )
    )
    # 95% nominal; with 200 replications the binomial SD is ~1.5 points.
    assert 0.88 <= hits / 200 <= 0.99


def test_percentile_ci_brackets_the_estimate_and_reports_n():
    x = np.arange(100.0)
    est = percentile_ci(x, 0.9)
    assert est.n == 100
    assert est.lo <= est.value <= est.hi
    assert abs(est.value - 89.1) < 1e-9


def test_ci_is_reproducible_with_a_seed_and_ignores_nans():
    x = [1.0, 2.0, np.nan, 3.0, 4.0, 5.0]
    assert median_ci(x, seed=3) == median_ci(x, seed=3)
    assert median_ci(x).n == 5


def test_degenerate_samples_give_nan_intervals_not_errors():
    assert median_ci([]).n == 0
    one = median_ci([5.0])
    assert one.value == 5.0 and np.isnan(one.lo)
    c = compare([1.0] * 12, [1.0] * 12)
    assert c.welch_p == 1.0 and not c.significant


def test_comparison_detects_a_known_shift():
    rng = np.random.default_rng(11)
    a = rng.normal(100, 10, 30)  # e.g. QUIC connection times
    b = rng.normal(130, 10, 30)
    c = compare(a, b)
    assert c.significant and c.welch_p < 0.01 and c.mwu_p < 0.01
    assert c.diff.lo < -30 + 10 and c.diff.hi > -30 - 10 and c.diff.hi < 0
    assert c.a.n == c.b.n == 30


def test_comparison_rarely_flags_zero_shift():
    rng = np.random.default_rng(12)
    flagged = sum(compare(rng.normal(100, 10, 20), rng.normal(100, 10, 20)).significant for _ in range(100))
    assert flagged <= 5  # alpha = 0.01, both tests must agree


def test_comparison_needs_ten_samples_per_side_to_be_significant():
    c = compare([1.0, 1.1, 1.2, 1.0, 1.1], [5.0, 5.1, 5.2, 5.0, 5.1])
    assert c.welch_p < 0.01 and not c.significant


def test_difference_ci_is_centred_on_the_difference_of_medians():
    a, b = np.arange(50.0), np.arange(50.0) + 10
    d = median_diff_ci(a, b)
    assert d.value == -10 and d.lo < -10 < d.hi


def test_tcp_download_model_is_the_handshake_arithmetic():
    # 20 Mbit/s, 80 ms: BDP 132 frames; slow start sends 10, 20, 40, 80 frames in 4 RTTs
    bdp = 20e6 * 0.080 / (1514 * 8)
    frame_s = 1514 * 8 / 20e6
    assert slow_start_deficit_s(20, 80) == pytest.approx((4 * bdp - 150) * frame_s)
    assert slow_start_deficit_s(20, 1) == 0  # the window already covers the BDP
    mib10 = 10 * 2**20
    tls12 = tcp_download_s(mib10, 20, 80, setup_rtts=3)
    assert tls12 - tcp_download_s(mib10, 20, 80, setup_rtts=2) == pytest.approx(0.080)
    # payload alone: 10 MiB at the TCP payload share of 20 Mbit/s
    assert tls12 - 0.320 - slow_start_deficit_s(20, 80) == pytest.approx(mib10 * 8 / (20e6 * 1448 / 1514))
