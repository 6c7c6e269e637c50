"""The delay-line backend on a real path: it must give the same calibrated link as netem.

The delay line (topology/delayline) is netem's delay stage in user space, auto's backend on
kernels without sch_netem, at every rate. These tests hold it to the checks every
backend passes (calibration at 20 and 500 Mbit/s, loss in the binomial CI), plus the parts of
netem's behaviour that calibration does not see: Gilbert-Elliott loss, jitter distributions.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
from calibrated import calibrated
from scipy.stats import binomtest
from test_path import TOPOLOGY_IMAGE

from quicbed.topology.calibrate import (
    check_loss,
    cpu_times,
    host_cpu_between,
    probe_datagrams,
)
from quicbed.topology.linkspec import GilbertElliott
from quicbed.topology.net import HostSpec, Testbed, TestbedConfig
from quicbed.topology.profiles import Profile, apply_overrides, load_profile

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]


def _delayline(profile: Profile) -> TestbedConfig:
    return TestbedConfig(
        profile=profile,
        backend="delayline",
        client=HostSpec(TOPOLOGY_IMAGE),
        servers=(HostSpec(TOPOLOGY_IMAGE),),
    )


# Germany's 20 ms path at 200 Mbit/s: a rate one UML vCPU cannot forward. Not germany-lab's
# 500 Mbit/s at 6 ms: there the delay line, both iperf3 ends and softirq fill 80-90 % of this
# VM's two cores, and a 6 ms path (a 6 ms queue) cannot absorb the few-ms stalls of a vCPU the
# hypervisor takes away: CI runs got 0.78 of 500 and 0.77 of 250 Mbit/s with 4-25 % of the
# CPU stolen. A 20 ms path holds them, as the UML router's 100 Mbit/s germany test shows.
# 500 Mbit/s is measured by `make bench` (bench/link_bench.py), which prints CPU and steal.
@pytest.mark.parametrize(("profile", "overrides"), [("india", {}), ("germany", {"rate_mbit": "200"})])
def test_delayline_passes_calibration(profile: str, overrides: dict[str, str]) -> None:
    """20 Mbit/s at 80 ms, and 200 Mbit/s at 20 ms (≥ 90% of the rate), RTT within tolerance.
    Where auto takes the delay line, test_path's india judges this measurement too."""
    config = _delayline(apply_overrides(load_profile(profile), overrides))
    found = calibrated(config, "test_delayline_passes_calibration", udp_packets=20000)
    cal = found.calibration
    assert found.backend == cal.backend == "delayline"
    failed = [(c.metric, c.direction, c.configured, c.measured, c.detail) for c in cal.checks if not c.passed]
    assert not failed, failed
    floor = 0.94 if found.profile.max_rate_mbit <= 100 else 0.90
    for direction in ("down", "up"):
        goodput = next(c for c in cal.checks if c.metric == "goodput_mbit" and c.direction == direction)
        assert goodput.measured >= floor * found.profile.max_rate_mbit


def test_delayline_random_loss_within_binomial_ci() -> None:
    with Testbed(_delayline(apply_overrides(load_profile("india"), {"loss_pct": "10"}))) as tb:
        checks = check_loss(tb, packets=20000)
    assert {c.metric for c in checks} == {"loss_pct", "loss_run_mean"}
    for check in checks:
        assert check.passed, (check.direction, check.measured, check.tolerance, check.detail)


def test_delayline_gilbert_elliott_loss_has_bursts() -> None:
    """netem's gemodel: the mean loss p/(p+r) and losses that come in runs (mean run 1/r)."""
    india = load_profile("india")
    ge = GilbertElliott(p=1.0, r=20.0)  # mean loss 4.76 %, mean burst 5 packets
    profile = replace(india, down=replace(india.down, gemodel=ge), up=replace(india.up, gemodel=ge))
    with Testbed(_delayline(profile)) as tb:
        checks = check_loss(tb, packets=20000)
    bursts = [c for c in checks if c.metric == "loss_run_mean"]
    assert len(bursts) == 2
    for check in checks:
        assert check.passed, (check.direction, check.measured, check.tolerance, check.detail)


# Interquartile range of the RTT per σ of one direction: the sum of two draws from netem's
# normal table is normal with √2·σ (IQR 1.349·√2·σ); of two uniform ±σ draws, triangular on
# ±2σ (quartiles at ±2σ·(1 − 1/√2)). bench/link_bench.py --jitter prints the measured IQR ÷
# this with the host's CPU steal: the tight figure (±15 %) is a benchmark's, not a test's.
IQR_PER_SIGMA = {"normal": 1.349 * 2**0.5, "uniform": 4 * (1 - 2**-0.5)}
JITTER_SIGMA_MS = 4.0


@pytest.mark.parametrize("distribution", list(IQR_PER_SIGMA))
def test_delayline_jitter_follows_netem_tables(distribution: str) -> None:
    """Jitter σ per direction, by physics a broken delay line crosses and a late-scheduled one
    cannot fake. A host that runs the delay line late only adds delay, so the low tail is its
    own: a uniform draw never goes below 80 − 2σ, the normal table's 2.5 % quantile lies
    1.96·√2·σ below 80 (2.6 ms under the uniform bound at σ = 4 ms; its standard error here is
    0.3 ms). The IQR must be the table's within a factor (no jitter, or σ doubled, fail)."""
    sigma = JITTER_SIGMA_MS
    profile = apply_overrides(
        load_profile("india"), {"jitter_ms": str(sigma), "jitter_distribution": distribution}
    )
    with Testbed(_delayline(profile)) as tb:
        before = cpu_times()
        samples = tb.ping(count=2000, interval=0.005)
        cpu = host_cpu_between(before, cpu_times())
    assert len(samples) >= 1980
    quartiles = statistics.quantiles(samples, n=4)
    low_tail = statistics.quantiles(samples, n=40)[0]
    iqr, expected = quartiles[2] - quartiles[0], IQR_PER_SIGMA[distribution] * sigma
    seen = (
        f"IQR {iqr:.2f} ms (table {expected:.2f}), quartiles {quartiles}, 2.5 % at "
        f"{low_tail:.2f} ms, {cpu}"
    )
    assert 0.6 * expected <= iqr <= 1.6 * expected, seen
    assert abs(quartiles[1] - 80.0) < 2.0, seen
    uniform_floor = 80 - 2 * sigma - 0.5
    if distribution == "uniform":
        assert low_tail >= uniform_floor, seen
    else:
        assert low_tail < uniform_floor - 1.0, seen


# Two directions judged on a random seed: at 99 % each, one run in 50 fails a correct delay
# line (CI: 563 of 10000 at 5 %, 2.9 standard deviations). 0.1 % for the pair still fails a
# delay line that duplicates 6 % instead of 5 % (600 ± 24 of 10000) in four runs of five.
DUPLICATE_CONFIDENCE = 1 - 0.001 / 2


@pytest.mark.backend("uml")
def test_delayline_reorders_and_duplicates_like_netem() -> None:
    """The same spec through real netem (the UML router) and through the delay line:
    duplicates inside the binomial CI of the configured rate, and as many datagrams arriving
    ahead of an earlier one (netem's reorder sends them at once, past the delayed ones)."""
    packets, duplicate, reorder = 10000, 5.0, 10.0
    profile = apply_overrides(
        load_profile("india"), {"duplicate_pct": str(duplicate), "reorder_pct": str(reorder)}
    )
    results, seed = {}, None
    for backend in ("uml", "delayline"):
        config = replace(_delayline(profile), backend=backend)
        with Testbed(config) as tb:
            results[backend] = probe_datagrams(tb, packets)
            seed = getattr(tb.backend, "seed", seed)
    for backend, by_direction in results.items():
        for direction, r in by_direction.items():
            assert r["received"] == packets, (backend, direction, r)
            ci = binomtest(r["duplicates"], packets).proportion_ci(DUPLICATE_CONFIDENCE, method="exact")
            if backend == "delayline":  # the seed repeats the run's draws
                assert ci.low <= duplicate / 100 <= ci.high, (backend, direction, r, seed)
            else:  # UML's packet sockets drop some duplicates on a loaded host (one CI run: 4.4%)
                assert 0.75 * duplicate / 100 <= r["duplicates"] / packets, (backend, r)
            assert 0.5 * reorder / 100 * packets < r["ahead"] < 1.5 * reorder / 100 * packets
    for direction in ("down", "up"):
        netem, ours = (results[b][direction]["ahead"] / packets for b in ("uml", "delayline"))
        spread = (2 * netem * (1 - netem) / packets) ** 0.5
        assert abs(netem - ours) < 4 * spread, (direction, netem, ours)
