"""The host's contention (quicbed/hostload.py): PSI's "some" total as a share of a measurement,
/proc/stat's busy time over a trial, beyond the trial's own containers, steal as a share of
the non-idle time, the slow-spell probe against its stored best, and the wait for a calm
host (on recorded windows)."""

import json
import os
import time
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
    from contention import trial_contended

    limit = hostload.CONTENDED_OTHER_PCT
    assert not trial_contended({"cpu_bound": False, "host_cpu_other_pct": limit})
    assert trial_contended({"cpu_bound": False, "host_cpu_other_pct": limit + 0.1})
    assert trial_contended({"cpu_bound": True, "host_cpu_other_pct": 0.0})
    assert not trial_contended({"cpu_bound": False, "host_cpu_other_pct": None})


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


# --- steal of the non-idle time ------------------------------------------------------------

#        user nice system idle iowait irq softirq steal
BEFORE = [1000, 0, 500, 8000, 100, 0, 50, 10]


def _after(**deltas: int) -> list[int]:
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return [v + deltas.get(n, 0) for n, v in zip(names, BEFORE, strict=True)]


def test_steal_is_a_share_of_the_non_idle_time_so_an_idle_vm_does_not_dilute_a_spell() -> None:
    # a mostly idle window: 200 busy jiffies of 1000, 20 of them stolen: 2 % of all the
    # jiffies (under the limit), 10 % of the busy ones (a spell)
    spell = _after(user=150, system=30, steal=20, idle=750, iowait=50)
    assert hostload.steal_share(BEFORE, spell) == pytest.approx(0.10)
    assert hostload.steal_share(BEFORE, spell) > hostload.STEAL_LIMIT
    # a busy window: the floor does not apply
    assert hostload.steal_share(BEFORE, _after(user=900, steal=100)) == pytest.approx(0.10)
    assert hostload.steal_share(BEFORE, _after(user=990, steal=10)) == pytest.approx(0.01)


def test_a_nearly_idle_windows_steal_is_over_a_tenth_of_its_jiffies_at_least() -> None:
    # 1 stolen of 2 busy jiffies in 1000: not 50 %, but 1 of the floor's 100
    assert hostload.steal_share(BEFORE, _after(user=1, steal=1, idle=998)) == pytest.approx(0.01)
    # steal beyond 0.5 % of an idle window still reads as a spell
    assert hostload.steal_share(BEFORE, _after(user=2, steal=8, idle=990)) == pytest.approx(0.08)


def test_steal_share_needs_two_readings_with_a_tick_between() -> None:
    assert hostload.steal_share(None, BEFORE) is None and hostload.steal_share(BEFORE, None) is None
    assert hostload.steal_share(BEFORE, BEFORE) is None
    assert hostload.steal_share(BEFORE[:5], [1100, 0, 500, 8100, 100]) == 0.0  # no steal column
    assert hostload.steal_share(BEFORE, _after(steal=50)) == 1.0


# --- the slow-spell probe and its stored best ----------------------------------------------


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """slow_spell_ratio on recorded probe times (append to the list), a fresh process best,
    this host's boot id and CPU model in files, the stored best under tmp_path/cache."""
    times: list[float] = []
    monkeypatch.setattr(hostload, "slow_spell_probe_s", lambda: times.pop(0))
    monkeypatch.setattr(hostload, "_process_best", None)
    (tmp_path / "boot_id").write_text("boot-1\n")
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: AMD EPYC\n")
    monkeypatch.setattr(hostload, "BOOT_ID", tmp_path / "boot_id")
    monkeypatch.setattr(hostload, "CPUINFO", tmp_path / "cpuinfo")
    monkeypatch.setenv("QUICBED_CACHE", str(tmp_path / "cache"))
    return times


def _stored(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "cache/hostload/probe-best.json").read_text())


def _store(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cache/hostload/probe-best.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostload, "_process_best", None)


def test_the_first_probe_is_its_own_best_and_is_stored(probe: list[float], tmp_path: Path) -> None:
    probe += [0.020, 0.040, 0.010]
    assert hostload.slow_spell_ratio() == 1.0
    assert _stored(tmp_path) == {"boot_id": "boot-1", "cpu": "AMD EPYC", "best_s": 0.020}
    assert hostload.slow_spell_ratio() == pytest.approx(2.0)  # this process's best
    assert hostload.slow_spell_ratio() == 1.0  # a new best, stored
    assert _stored(tmp_path)["best_s"] == 0.010
    assert not [p for p in (tmp_path / "cache/hostload").iterdir() if p.name != "probe-best.json"]


def test_the_stored_best_judges_a_new_process_and_is_lowered_when_beaten(
    probe: list[float], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store(tmp_path, json.dumps({"boot_id": "boot-1", "cpu": "AMD EPYC", "best_s": 0.010}))
    probe += [0.034, 0.005]
    assert hostload.slow_spell_ratio() == pytest.approx(3.4)  # a slow spell, though a first probe
    assert _stored(tmp_path)["best_s"] == 0.010
    _fresh_process(monkeypatch)
    assert hostload.slow_spell_ratio() == 1.0
    assert _stored(tmp_path)["best_s"] == 0.005


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "\xff\xfe",
        "[1, 2]",
        '{"boot_id": "boot-1", "cpu": "AMD EPYC"}',
        '{"boot_id": "boot-1", "cpu": "AMD EPYC", "best_s": "0.001"}',
        '{"boot_id": "boot-1", "cpu": "AMD EPYC", "best_s": -1}',
        '{"boot_id": "boot-1", "cpu": "AMD EPYC", "best_s": true}',
        '{"boot_id": "boot-0", "cpu": "AMD EPYC", "best_s": 0.001}',  # another boot
        '{"boot_id": "boot-1", "cpu": "Intel Xeon", "best_s": 0.001}',  # another CPU
    ],
)
def test_a_malformed_or_foreign_stored_best_is_ignored_and_replaced(
    probe: list[float], tmp_path: Path, text: str
) -> None:
    _store(tmp_path, text)
    probe.append(0.020)
    assert hostload.slow_spell_ratio() == 1.0
    assert _stored(tmp_path) == {"boot_id": "boot-1", "cpu": "AMD EPYC", "best_s": 0.020}


def test_a_symlinked_best_is_never_followed(probe: list[float], tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    planted = json.dumps({"boot_id": "boot-1", "cpu": "AMD EPYC", "best_s": 0.001})
    elsewhere.write_text(planted)
    (tmp_path / "cache/hostload").mkdir(parents=True)
    (tmp_path / "cache/hostload/probe-best.json").symlink_to(elsewhere)
    probe.append(0.020)
    assert hostload.slow_spell_ratio() == 1.0  # the planted best not read
    assert elsewhere.read_text() == planted  # nor written through
    assert not (tmp_path / "cache/hostload/probe-best.json").is_symlink()  # replaced by our own


def test_a_symlinked_directory_is_never_followed(probe: list[float], tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    planted = json.dumps({"boot_id": "boot-1", "cpu": "AMD EPYC", "best_s": 0.001})
    (target / "probe-best.json").write_text(planted)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache/hostload").symlink_to(target)
    probe += [0.020, 0.030]
    assert hostload.slow_spell_ratio() == 1.0
    assert hostload.slow_spell_ratio() == pytest.approx(1.5)  # this process's best still counts
    assert sorted(p.name for p in target.iterdir()) == ["probe-best.json"]
    assert (target / "probe-best.json").read_text() == planted


def test_a_fifo_in_the_bests_place_does_not_hang(probe: list[float], tmp_path: Path) -> None:
    (tmp_path / "cache/hostload").mkdir(parents=True)
    os.mkfifo(tmp_path / "cache/hostload/probe-best.json")
    probe.append(0.020)
    assert hostload.slow_spell_ratio() == 1.0


def test_no_ratio_where_the_probe_cannot_run(probe: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    def cannot() -> float:
        raise FileNotFoundError("/bin/true")

    monkeypatch.setattr(hostload, "slow_spell_probe_s", cannot)
    assert hostload.slow_spell_ratio() is None


def test_the_real_probe_is_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUICBED_CACHE", str(tmp_path))
    start = time.perf_counter()
    ratio = hostload.slow_spell_ratio()
    assert ratio is not None and ratio >= 1.0
    assert time.perf_counter() - start < 1.0  # 21-32 ms on a calm host
    assert (tmp_path / "hostload/probe-best.json").is_file()


# --- waiting for a calm host ---------------------------------------------------------------

CALM = hostload.Load(2.0, steal=0.01, pressure=0.05, other_pct=10.0, slow_ratio=1.1)
STEAL_SPELL = hostload.Load(2.0, steal=0.3, pressure=0.05, other_pct=10.0, slow_ratio=1.0)
SLOW_SPELL = hostload.Load(2.0, steal=0.0, pressure=0.05, other_pct=10.0, slow_ratio=3.5)


class _Host:
    """Recorded windows on a clock that only they move: nothing sleeps."""

    def __init__(self, *windows: hostload.Load) -> None:
        self.windows, self.now, self.measured = list(windows), 100.0, 0

    def measure(self, window_s: float) -> hostload.Load:
        self.now += window_s
        self.measured += 1
        return self.windows.pop(0) if len(self.windows) > 1 else self.windows[0]

    def clock(self) -> float:
        return self.now


def test_the_wait_ends_after_ten_seconds_of_calm_windows_in_a_row() -> None:
    """A calm window between two spells does not end the wait: five calm 2 s windows in a row
    do (hostload.CALM_S)."""
    windows = [STEAL_SPELL, CALM, CALM, SLOW_SPELL, CALM, CALM, CALM, CALM, CALM, STEAL_SPELL]
    host, said = _Host(*windows), list[str]()
    calm, last = hostload.wait_for_calm(
        2.0, 120.0, said.append, measure_window=host.measure, clock=host.clock
    )
    assert (calm, last, host.measured) == (True, CALM, 9)
    assert said[0] == "waiting for a calm host: 10 s of calm windows of 2 s in a row, at most 120 s"
    assert said[1].startswith("calm after 18 s (last window: uncontended: ") and len(said) == 2, said


def test_the_wait_gives_up_at_its_limit() -> None:
    host, said = _Host(SLOW_SPELL), list[str]()
    calm, last = hostload.wait_for_calm(2, 10, said.append, measure_window=host.measure, clock=host.clock)
    assert (calm, last, host.measured) == (False, SLOW_SPELL, 5)
    assert said[1].startswith("not calm for 10 s in a row after 10 s (last window: contended: "), said
    assert "3.5×" in said[1], said


def test_calm_windows_cut_short_by_the_limit_are_not_calm() -> None:
    """Three calm windows when the limit comes are not the ten seconds asked for."""
    host, said = _Host(STEAL_SPELL, STEAL_SPELL, CALM, CALM, CALM), list[str]()
    calm, last = hostload.wait_for_calm(2, 10, said.append, measure_window=host.measure, clock=host.clock)
    assert (calm, last, host.measured) == (False, CALM, 5)
    assert said[1].startswith("not calm for 10 s in a row after 10 s (last window: uncontended: "), said


def test_a_real_window_counts_all_the_hosts_busy_cpu_as_other_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUICBED_CACHE", str(tmp_path))
    load = hostload.measure_window(0.2)
    assert load.seconds >= 0.2 and load.other_pct is not None and load.slow_ratio is not None, load
    assert 0.0 <= load.steal <= 1.0 and not load.cpu_bound
