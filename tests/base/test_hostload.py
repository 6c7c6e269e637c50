"""The host's contention (quicbed/hostload.py): PSI's "some" total as a share of a measurement,
and /proc/stat's busy time over a trial, beyond the trial's own containers."""

from pathlib import Path

import pytest

from quicbed import hostload


def test_a_wait_share_is_the_stall_over_the_wall_time_clamped_to_a_share() -> None:
    assert hostload.wait_share(1_000_000, 1_250_000, 1.0) == pytest.approx(0.25)
    assert hostload.wait_share(0, 5_000_000, 1.0) == 1.0  # counters of several CPUs
    assert hostload.wait_share(10, 5, 1.0) == 0.0
    assert hostload.wait_share(None, 5, 1.0) is None
    assert hostload.wait_share(0, 5, 0.0) is None


def test_the_stall_total_is_read_from_the_some_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    psi = tmp_path / "cpu"
    psi.write_text(
        "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    monkeypatch.setattr(hostload, "PSI_CPU", psi)
    assert hostload.cpu_wait_us() == 123456
    psi.write_text("garbage\n")
    assert hostload.cpu_wait_us() is None
    monkeypatch.setattr(hostload, "PSI_CPU", tmp_path / "absent")
    assert hostload.cpu_wait_us() is None


def test_busy_time_is_summed_over_cores_and_steal_counts_as_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stat = tmp_path / "stat"
    monkeypatch.setattr(hostload, "PROC_STAT", stat)
    monkeypatch.setattr(hostload.os, "cpu_count", lambda: 2)
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    before = hostload.cpu_times()
    assert before == (200, 1000)
    stat.write_text("cpu  150 0 150 850 100 0 0 50 0 0\n")  # +150 busy (50 of it steal), +150 idle
    assert hostload.busy_pct(before, hostload.cpu_times()) == pytest.approx(100.0)  # one core of two
    assert hostload.busy_pct(None, before) is None
    assert hostload.busy_pct(before, before) is None
    stat.write_text("garbage\n")
    assert hostload.cpu_times() is None


def test_a_trial_shared_the_host_when_cpu_bound_or_beside_half_a_core_of_other_work() -> None:
    limit = hostload.CONTENDED_OTHER_PCT
    assert not hostload.contended({"cpu_bound": False, "host_cpu_other_pct": limit})
    assert hostload.contended({"cpu_bound": False, "host_cpu_other_pct": limit + 0.1})
    assert hostload.contended({"cpu_bound": True, "host_cpu_other_pct": 0.0})
    assert not hostload.contended({"cpu_bound": False, "host_cpu_other_pct": None})


def test_other_work_reads_a_busy_loop_as_a_core_beyond_the_named_containers() -> None:
    """No container named: a busy loop beside the block is all other work, about one core (the
    host's own noise adds; another machine's idle cores cannot take it below 70 %)."""
    import subprocess
    import sys
    import time

    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        with hostload.OtherWork([]) as work:
            time.sleep(1.0)
    finally:
        spin.kill()
        spin.wait()
    assert work.own_pct == {} and work.wall_s >= 1.0
    assert work.other_pct is not None and work.other_pct >= 70, work.other_pct
