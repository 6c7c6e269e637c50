"""Bad profiles and overrides: one line naming file, line and field, exit code 2."""

from __future__ import annotations

import io
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from quicbed import cli
from quicbed.errors import EnvironmentProblem, InputError
from quicbed.experiments.links import LINK_AXES
from quicbed.topology.backends import delayline_config
from quicbed.topology.calibrate import Calibration, Check, expected_loss_run
from quicbed.topology.calibration_table import print_calibration
from quicbed.topology.linkspec import Aqm, GilbertElliott, LinkSpec, netem_commands, rate_commands
from quicbed.topology.profiles import (
    apply_overrides,
    available_profiles,
    load_profile,
    parse_overrides,
)
from quicbed.topology.udpprobe import Counts

GOOD = "down: {rate_mbit: 20, delay_ms: 40}\nup: {rate_mbit: 20, delay_ms: 40}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "down: {rate_mbit: 20, delay_ms: -1}\nup: {rate_mbit: 20}\n",
            ":1: down.delay_ms: must be >= 0 ms, got -1",
        ),
        (
            "down: {rate_mbit: 20}\nup:\n  rate_mbit: 20\n  loss_pct: 101\n",
            ":4: up.loss_pct: must be within [0, 100] %, got 101",
        ),
        ("down: {rate_mbit: 0}\nup: {rate_mbit: 20}\n", ":1: down.rate_mbit: must be > 0 Mbit/s, got 0"),
        (
            "down: {rate_mbit: 20}\nup: {rate_mbit: 20}\nbandwidth: 3\n",
            ":3: bandwidth: unknown key (known: description, source, down, up)",
        ),
        ("down:\n  rate_mbit: 20\n  dely_ms: 3\nup: {rate_mbit: 20}\n", ":3: down.dely_ms: unknown key"),
        ("down: {rate_mbit: fast}\nup: {rate_mbit: 20}\n", ":1: down.rate_mbit: must be a number"),
        ("down: {rate_mbit: 20\nup: {rate_mbit: 20}\n", ":2: yaml: while parsing a flow mapping"),
        ("down: {rate_mbit: 20}\n", ":1: up: missing"),
        (
            "down: {rate_mbit: .nan}\nup: {rate_mbit: 20}\n",
            ":1: down.rate_mbit: must be a finite number, got nan",
        ),
    ],
)
def test_bad_profile_names_file_line_field(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_profile(str(path))
    assert str(err.value).startswith(str(path))
    assert expected in str(err.value)


def test_cli_bad_profile_is_one_line_exit_2(tmp_path: Path) -> None:
    path = _write(tmp_path, "down: {rate_mbit: 20, delay_ms: -5}\nup: {rate_mbit: 20}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "quicbed.cli", "calibrate", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"quicbed: {path}:1: down.delay_ms: must be >= 0 ms, got -5"
    assert "Traceback" not in proc.stderr


def test_cli_unknown_profile_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "quicbed.cli", "calibrate", "atlantis"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "unknown profile 'atlantis'" in proc.stderr and "india" in proc.stderr


def test_all_shipped_profiles_load_and_cite_a_source() -> None:
    names = available_profiles()
    for required in ("india", "germany", "germany-lab", "dsl", "lte", "da2gc", "mss"):
        assert required in names
    for name in names:
        profile = load_profile(name)
        assert profile.source, f"{name} must name its source"
    assert load_profile("india").rtt_ms == 80
    dsl = load_profile("dsl")
    assert (dsl.down.rate_mbit, dsl.up.rate_mbit) == (25, 5)


def test_overrides_one_or_both_directions() -> None:
    india = load_profile("india")
    both = apply_overrides(india, {"loss_pct": "5"})
    assert both.down.loss_pct == both.up.loss_pct == 5
    down = apply_overrides(india, {"down.rate_mbit": "50"})
    assert (down.down.rate_mbit, down.up.rate_mbit) == (50, 20)
    with pytest.raises(InputError, match="must be within"):
        apply_overrides(india, {"loss_pct": "150"})
    with pytest.raises(InputError, match="cannot override"):
        apply_overrides(india, {"sideways.loss_pct": "1"})


def test_netem_stage_carries_delay_loss_and_never_drops_itself() -> None:
    spec = LinkSpec(rate_mbit=20, delay_ms=40, loss_pct=1, jitter_ms=2)
    add = netem_commands("vec0", spec, delay_ms=39.8)[-1]
    assert add[add.index("delay") + 1 : add.index("delay") + 5] == [
        "39.800ms",
        "2.000ms",
        "distribution",
        "normal",
    ]
    assert add[add.index("loss") + 1 : add.index("loss") + 3] == ["random", "1%"]
    # 20 Mbit/s of 64-byte frames over 46 ms is ~1800 packets: the limit must exceed it.
    assert int(add[add.index("limit") + 1]) > 20e6 * 0.046 / 512


def test_rate_stage_queue_is_one_bdp_by_default_or_as_given() -> None:
    spec = LinkSpec(rate_mbit=20, delay_ms=40)
    fifo = rate_commands("eth0", spec, rtt_ms=80)[-1]
    assert fifo[fifo.index("limit") + 1] == str(round(20e6 * 0.080 / (1514 * 8) + 0.5))
    wolsing = LinkSpec(rate_mbit=10.5, delay_ms=37, queue_ms=200)
    assert wolsing.queue_size_packets(74) == 174


def test_gilbert_elliott_mean_loss() -> None:
    assert GilbertElliott(p=1, r=9, loss_bad=100, loss_good=0).mean_loss_pct() == 10


def test_uniform_jitter_gives_netem_no_table() -> None:
    """tc has no "uniform" table (it refuses `distribution uniform`); netem without one
    draws uniformly."""
    add = netem_commands(
        "vec0", LinkSpec(rate_mbit=20, delay_ms=40, jitter_ms=2, jitter_distribution="uniform")
    )[-1]
    assert "distribution" not in add and "2.000ms" in add


def test_reordering_needs_a_delay() -> None:
    india = load_profile("india")
    with pytest.raises(InputError, match="reorder_pct: needs a delay"):
        apply_overrides(india, {"delay_ms": "0", "reorder_pct": "5"})


def test_delay_line_settings_are_netems_parameters() -> None:
    spec = LinkSpec(
        rate_mbit=20, delay_ms=40, jitter_ms=2, duplicate_pct=1, gemodel=GilbertElliott(p=1, r=20)
    )
    settings = dict(line.split("=", 1) for line in delayline_config(spec, 39.8, seed=7, generation=3).split())
    assert settings["delay_us"] == "39800.0" and settings["jitter_us"] == "2000.0"
    assert settings["distribution"].endswith("/normal.dist")
    assert (settings["ge_p"], settings["ge_r"], settings["ge_loss_bad"]) == ("1", "20", "100")
    assert "loss_pct" not in settings and settings["duplicate_pct"] == "1"
    assert int(settings["limit"]) == spec.delay_line_limit()
    assert (settings["seed"], settings["generation"]) == ("7", "3")


def test_loss_runs_and_their_expected_length() -> None:
    def loss_runs(seen: set[int], count: int) -> int:
        counts = Counts(count, reorder=0)
        for seq in sorted(seen):
            counts.arrived(seq)
        return int(counts.report(final=True)["loss_runs"])

    assert loss_runs({0, 3, 4, 8}, 10) == 3  # 1-2, 5-7 and 9 lost
    assert loss_runs(set(range(10)), 10) == 0
    assert expected_loss_run(LinkSpec(rate_mbit=1, loss_pct=10)) == pytest.approx(1 / 0.9)
    assert expected_loss_run(LinkSpec(rate_mbit=1, gemodel=GilbertElliott(p=1, r=20))) == 5
    partial = GilbertElliott(p=1, r=20, loss_bad=50)
    assert expected_loss_run(LinkSpec(rate_mbit=1, gemodel=partial)) is None


# --- --set speaks the keys of profile and experiment files ----------------------------------------


def test_set_rtt_ms_is_half_the_delay_each_way() -> None:
    india = load_profile("india", parse_overrides(["rtt_ms=37"]))
    assert india.rtt_ms == 37 and india.down.delay_ms == india.up.delay_ms == 18.5
    assert india.down.rate_mbit == 20  # the rest stays the profile's


def test_set_takes_every_sweep_axis_of_experiment_files() -> None:
    """Every axis, in both directions and in each alone, is applied where it says and nowhere
    else: the other direction and every other parameter keep the profile's values."""
    india = load_profile("india")
    given = {
        "jitter_distribution": ("uniform", "uniform"),
        "queue_packets": ("50", 50),
        "aqm": ("fq_codel", Aqm("fq_codel")),
    }
    applied = 0
    for axis in LINK_AXES:
        text, value = given.get(axis, ("1", 1.0))
        if axis == "rtt_ms":
            out = apply_overrides(india, parse_overrides([f"rtt_ms={text}"]))
            assert india.rtt_ms != value and out.rtt_ms == value
            assert out.down == replace(india.down, delay_ms=value / 2)
            assert out.up == replace(india.up, delay_ms=value / 2)
            applied += 1
            continue
        assert getattr(india.down, axis) != value and getattr(india.up, axis) != value, axis
        for key, directions in ((axis, ("down", "up")), (f"down.{axis}", ("down",)), (f"up.{axis}", ("up",))):
            out = apply_overrides(india, parse_overrides([f"{key}={text}"]))
            for direction in ("down", "up"):
                spec, before = getattr(out, direction), getattr(india, direction)
                want = value if direction in directions else getattr(before, axis)
                assert getattr(spec, axis) == want and type(getattr(spec, axis)) is type(want), (
                    key,
                    direction,
                )
                assert replace(spec, **{axis: getattr(before, axis)}) == before, (key, direction)
            applied += 1
    assert applied == 3 * len(LINK_AXES) - 2


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["=3"], "--set: expected KEY=VALUE, got '=3'"),
        (["rtt_ms"], "--set: expected KEY=VALUE, got 'rtt_ms'"),
        (["rtt_ms= "], "--set: expected KEY=VALUE, got 'rtt_ms= '"),
        (["rtt_ms=abc"], "--set rtt_ms: must be a number, got 'abc'"),
        (
            ["nonsense=1"],
            "--set: cannot override 'nonsense' (use PARAM, down.PARAM or up.PARAM with "
            "PARAM in rate_mbit, delay_ms, ",
        ),
        (["rtt_ms=-5"], "--set rtt_ms: must be >= 0 ms, got -5"),
        (["loss_pct=150"], "--set loss_pct: must be within [0, 100] %, got 150"),
        (["down.loss_pct=101"], "--set down.loss_pct: must be within [0, 100] %, got 101"),
        (
            ["up.rtt_ms=40"],
            "--set up.rtt_ms: rtt_ms is a round trip and has no direction (use "
            "up.delay_ms for a one-way delay)",
        ),
        (["rtt_ms=40", "down.delay_ms=3"], "--set down.delay_ms: give rtt_ms or delay_ms, not both"),
        (["rtt_ms=nan"], "--set rtt_ms: must be a finite number, got nan"),
        (["rate_mbit=inf"], "--set rate_mbit: must be a finite number, got inf"),
        (["queue_packets=1.5"], "--set queue_packets: must be a whole number, got '1.5'"),
        (["gemodel=1"], "--set: cannot override 'gemodel'"),
    ],
)
def test_bad_set_is_one_line_naming_the_key(pairs: list[str], message: str) -> None:
    with pytest.raises(InputError) as err:
        load_profile("india", parse_overrides(pairs))
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value) and err.value.exit_code == 2


def test_overrides_are_checked_together_in_any_order() -> None:
    reordering = apply_overrides(load_profile("india"), {"reorder_pct": "5"})
    for overrides in ({"delay_ms": "0", "reorder_pct": "0"}, {"reorder_pct": "0", "delay_ms": "0"}):
        assert apply_overrides(reordering, overrides).down.delay_ms == 0
    for overrides in ({"delay_ms": "0", "reorder_pct": "5"}, {"reorder_pct": "5", "delay_ms": "0"}):
        with pytest.raises(InputError, match=r"^--set reorder_pct: needs a delay"):
            apply_overrides(load_profile("india"), overrides)
    # A profile's own parameter made invalid by an override is named as the link check names it.
    with pytest.raises(InputError, match=r"^--set: down.reorder_pct: needs a delay"):
        apply_overrides(reordering, {"delay_ms": "0"})


@pytest.fixture
def no_testbed(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`quicbed calibrate` in-process, stopped where it would bring the testbed up: the
    configurations it got that far with."""
    from quicbed.topology import net

    seen: list[Any] = []

    def refuse(cfg: Any) -> None:
        seen.append(cfg)
        raise EnvironmentProblem("no testbed in unit tests")

    monkeypatch.setattr(net, "Testbed", refuse)
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)  # past the root check, to the flags
    monkeypatch.setattr(cli.signal, "signal", lambda *_: None)  # keep pytest's SIGTERM
    return seen


def test_cli_calibrate_accepts_rtt_ms(no_testbed: list[Any], capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["calibrate", "india", "--set", "rtt_ms=37"]) == EnvironmentProblem.exit_code
    assert no_testbed[0].profile.rtt_ms == 37
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("=3", "--set: expected KEY=VALUE, got '=3'"),
        ("rtt_ms=abc", "--set rtt_ms: must be a number, got 'abc'"),
        ("rtt_ms=-5", "--set rtt_ms: must be >= 0 ms, got -5"),
        ("loss_pct=150", "--set loss_pct: must be within [0, 100] %, got 150"),
    ],
)
def test_cli_bad_set_is_one_line_exit_2(
    no_testbed: list[Any], capsys: pytest.CaptureFixture, pair: str, message: str
) -> None:
    assert cli.main(["calibrate", "india", "--set", pair]) == 2
    assert capsys.readouterr().err == f"quicbed: {message}\n"
    assert not no_testbed


# --- the calibration table in a log --------------------------------------------------------------


CALIBRATION = Calibration(
    "india",
    "uml",
    duration_s=42,
    checks=[
        Check("rtt_median_ms", "both", 80.0, 80.512, "±2.40 ms", True, "min 80.31 ms over 30 samples"),
        Check(
            "goodput_mbit",
            "down",
            20,
            19.1,
            "94%..102% of rate",
            True,
            "0.955 of rate (attempts: 19.1, 19.2 Mbit/s); ideal TCP payload share 0.956",
        ),
        Check(
            "router_bytes",
            "down",
            12345678,
            12399999,
            ">= bytes received",
            True,
            "router egress vec-r-c sent 12399999 B while the receiver got 12345678 B",
        ),
        Check("loss_pct", "up", 1.0, 3.2, "99% CI [0.812, 1.204]", False, "640 of 20000 datagrams lost"),
    ],
)


def test_calibration_table_rows_are_not_wrapped_without_a_terminal(capsys: pytest.CaptureFixture) -> None:
    log = io.StringIO()
    print_calibration(CALIBRATION, Console(file=log))  # a file: no terminal, no width
    print_calibration(CALIBRATION)  # the default console, on pytest's captured stdout
    for text in (log.getvalue(), capsys.readouterr().out):
        assert "\x1b[" not in text  # no colour codes in a log
        lines = text.splitlines()
        for check in CALIBRATION.checks:
            rows = [line for line in lines if f" {check.metric} " in line]
            rows = [line for line in rows if f" {check.direction} " in line]
            assert len(rows) == 1, text
            assert check.detail in rows[0] and check.tolerance in rows[0]
        # title, 3 header lines, one line per check, bottom border, verdict
        assert len(lines) == 1 + 3 + len(CALIBRATION.checks) + 1 + 1, text
        assert lines[-1] == "path does NOT match the profile: refusing to measure through it"


def test_host_cpu_share_busy_and_stolen_between_two_readings() -> None:
    from quicbed.topology.calibrate import host_cpu_between

    # /proc/stat's cpu fields: user nice system idle iowait irq softirq steal guest guest_nice
    before = [100, 0, 50, 800, 50, 0, 0, 0, 0, 0]
    cpu = host_cpu_between(before, [170, 0, 80, 820, 50, 0, 20, 10, 0, 0])
    assert cpu.busy == pytest.approx(130 / 150)
    assert cpu.steal == pytest.approx(10 / 150)
    assert cpu.saturated  # 6.7 % stolen: the hypervisor, not the link, set the pace
    idle = host_cpu_between(before, [150, 0, 60, 1000, 50, 0, 0, 0, 0, 0])
    assert not idle.saturated and idle.describe() == "host CPU 23% busy, 0% stolen"


def test_loss_check_holds_a_sweep_to_a_small_false_alarm_rate_and_still_refuses_a_wrong_link() -> None:
    from quicbed.topology.calibrate import _loss_check

    # Seen in the paper's video sweep: 4.60 % of 20,000 at a configured 5 % (2.6 σ low), which
    # a 99 % interval refused. A correct link lands there once in a hundred calibrations.
    assert _loss_check("down", 5.0, 920, 20000, bursty=False).passed
    # Issue 65 changed this line: a link is judged against a band (20 % of the asked rate, at
    # least 0.25 points; loss_sequence.py says why), not a point, so the probe can stop once
    # decided. A link 0.6 points off at 5 % (inside the band) now passes; one outside it by
    # more than the sequence's width is refused, on either side, and so is a lossless "5 %".
    for lost in (1500, 500, 0):  # 7.5 %, 2.5 %, none
        assert not _loss_check("down", 5.0, lost, 20000, bursty=False).passed
    assert not _loss_check("up", 1.0, 400, 20000, bursty=False).passed  # 2 % at 1 %
    assert _loss_check("up", 1.0, 200, 20000, bursty=False).passed


def test_goodput_is_the_median_second_and_the_ceiling_is_the_payload_share() -> None:
    """A receiver that fell behind during the omitted slow start reads its backlog in the
    first measured second: the mean of the seconds would exceed what the link can carry, and
    so would the median of two."""
    from quicbed.topology.calibrate import (
        GOODPUT_CEILING,
        TCP_PAYLOAD_SHARE,
        receiver_goodput_mbit,
    )

    def second(mbit: float, omitted: bool = False, seconds: float = 1.0) -> dict:
        return {"sum": {"bytes": mbit * 1e6 / 8 * seconds, "seconds": seconds, "omitted": omitted}}

    rates = [24.0, 19.13, 19.12, 19.13, 19.14]  # 0.985 of 20 Mbit/s as a mean
    result = {
        "intervals": [second(14.5, True), second(19.1, True), *map(second, rates), second(30.0, seconds=0.4)]
    }
    assert receiver_goodput_mbit(result, "down") == pytest.approx(19.13)
    upload = {"server_output_json": result}
    assert receiver_goodput_mbit(upload, "up") == pytest.approx(19.13)
    # Two seconds (a 2 s calibration): the backlog second is not counted at all.
    short = {"intervals": [second(14.5, True), second(19.9), second(19.13)]}
    assert receiver_goodput_mbit(short, "down") == pytest.approx(19.13)
    assert TCP_PAYLOAD_SHARE == pytest.approx(1448 / 1514)
    assert 0.956 < GOODPUT_CEILING < 0.962  # 0.968 of the rate, seen in a reproduce, fails


def test_goodput_is_read_after_the_ramp_it_detects() -> None:
    """Slow start found in the receiver's 100 ms intervals, not assumed: the interval that
    reaches the link and the next (a backlog read) are left out, and a stall and its
    catch-up (a loss recovered) do not move the median. A flow that never reaches the link
    is judged on its run's second half."""
    from quicbed.topology.calibrate import goodput_after_ramp, goodput_interval_s, goodput_run_s
    from quicbed.topology.profiles import load_profile

    def flow(shares: list[float], rate: float = 20.0) -> dict:
        intervals, start = [], 0.0
        for share in shares:
            seconds = 0.1
            intervals.append(
                {
                    "sum": {
                        "bytes": share * rate * 1e6 / 8 * seconds,
                        "seconds": seconds,
                        "start": start,
                        "end": start + seconds,
                    }
                }
            )
            start += seconds
        return {"intervals": intervals}

    steady = [0.956, 0.951, 0.962, 0.955, 0.957, 0.041, 0.62, 2.2, 0.956, 0.955, 0.956, 0.960, 0.953]
    ramped = goodput_after_ramp(flow([0.17, 0.21, 0.44, 0.87, 0.99, *steady]), "down", 20.0, 0.1)
    assert ramped.mbit == pytest.approx(0.956 * 20) and ramped.intervals == len(steady)
    assert ramped.ramp_s == pytest.approx(0.5)
    half = goodput_after_ramp(flow([0.2, 0.4, 0.47, 0.48, 0.48, 0.47, 0.48, 0.48]), "down", 20.0, 0.1)
    assert half.mbit == pytest.approx(0.48 * 20) and half.intervals == 4
    # the run: india 2 s (a 0.78 s allowance and 1.2 s); a slow link's intervals are longer
    india, da2gc = load_profile("india"), load_profile("da2gc")
    assert goodput_interval_s(india.down) == 0.1 and goodput_run_s(india.down, india.rtt_ms, 1.2) == 2
    assert goodput_interval_s(da2gc.down) == pytest.approx(0.6)


def test_the_median_is_stated_with_a_distribution_free_interval() -> None:
    """median_bounds: the widest order statistics whose binomial tails stay within 1 % in
    all, and no narrower: the RTT's 30 pings give x(8)..x(23), 14 goodput intervals x(2)..x(13)."""
    from scipy.stats import binom

    from quicbed.topology.calibrate import median_bounds

    for n, k in ((30, 8), (14, 2), (8, 1)):
        assert median_bounds([float(x) for x in range(1, n + 1)]) == (k, n + 1 - k)
        assert binom.cdf(k - 1, n, 0.5) <= 0.005 < binom.cdf(k, n, 0.5)
    assert median_bounds([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]) is None  # too few for 99 %
    assert median_bounds([5.0, 1.0, 3.0, 2.0, 4.0, 9.0, 8.0, 7.0, 6.0]) == (1.0, 9.0)  # sorted first


# --- how many goodput attempts a calibration makes -----------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "busy", "again"),
    [
        (0.95, 0.05, False),  # within the band: done
        (0.93, 0.05, True),  # just short: a hiccup may explain it
        (0.80, 0.05, True),
        (0.50, 0.05, False),  # half the rate on a free CPU: not the path configured
        (0.50, 0.99, True),  # ... on a saturated one: the host may be why
        (1.20, 0.05, True),  # above the ceiling: counted what the path did not carry
    ],
)
def test_goodput_is_measured_again_only_where_a_hiccup_could_explain_it(
    ratio: float, busy: float, again: bool
) -> None:
    from quicbed.topology.calibrate import HostCpu, another_attempt, goodput_floor

    assert another_attempt(ratio, HostCpu(busy=busy, steal=0.0), goodput_floor(20)) is again
