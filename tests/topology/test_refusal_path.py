"""The headline guarantee on a real path: a path that is not its profile's is refused. Three
paths are wrong behind the testbed's back, in the stages every backend shares:
- half the rate, or 5 % less (the router's htb is given that share of the profile's rate):
  `quicbed calibrate` finds both goodputs low and exits 3;
- 10 ms more RTT (the forwarding latency the testbed subtracts from each direction's delay is
  taken 10 ms too low): `quicbed run` exits 3, without --force measuring nothing, with it
  measuring every row, marked.
The refused run calibrates in full, as a user's does. The forced one, in the suite, finds
india recorded by earlier runs (topology/calibration_reuse.py): the record does not hide the
longer path, since every bring-up proves its RTT afresh."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from quicbed import cli, paths
from quicbed.topology import net
from quicbed.topology.backends import vm as vm_backend
from quicbed.topology.calibrate import TCP_PAYLOAD_SHARE, goodput_checks
from quicbed.topology.calibration_reuse import REUSE_ENV
from quicbed.topology.linkspec import LinkSpec, rate_commands
from quicbed.topology.profiles import load_profile

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

TOPOLOGY_IMAGE = os.environ.get("QUICBED_TEST_IMAGE", "debian:trixie-slim")
EXPERIMENT = """\
name: wrong-path
profiles: [india]
servers: [caddy]
clients: [{tool: quic_perf, backend: ngtcp2}]
workload: {kind: web, objects: [index.html]}
repetitions: 2
"""


@pytest.fixture
def ten_ms_long(monkeypatch: pytest.MonkeyPatch) -> None:
    measure = net.Testbed._measure_forwarding_latency

    def ten_ms_low(tb: net.Testbed) -> None:
        measure(tb)
        tb.forwarding_rtt_ms -= 10.0

    monkeypatch.setattr(net.Testbed, "_measure_forwarding_latency", ten_ms_low)


def _slowed(monkeypatch: pytest.MonkeyPatch, share: float) -> None:
    """The rate stage at `share` of the spec's rate, wherever it runs: the router namespace's
    ports, or the QEMU router's own kernel (the vm backend owns its bottleneck)."""

    def slowed(
        dev: str, spec: LinkSpec, rtt_ms: float, under_netem: bool = False, super_frames: bool = False
    ) -> list[list[str]]:
        slow = replace(spec, rate_mbit=spec.rate_mbit * share)
        return rate_commands(dev, slow, rtt_ms, under_netem, super_frames=super_frames)

    monkeypatch.setattr(net, "rate_commands", slowed)
    monkeypatch.setattr(vm_backend, "rate_commands", slowed)


@pytest.fixture
def half_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    _slowed(monkeypatch, 0.5)


@pytest.fixture
def rate_5_percent_low(monkeypatch: pytest.MonkeyPatch) -> None:
    _slowed(monkeypatch, 0.95)


@pytest.mark.usefixtures("half_rate")
def test_calibrate_refuses_a_path_at_half_its_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cal.json"
    code = cli.main(
        [
            "calibrate",
            "india",
            "--samples",
            "20",
            "--udp-packets",
            "2000",
            "--seconds",
            "3",
            "--client-image",
            TOPOLOGY_IMAGE,
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr()
    assert code == 3, (printed.out + printed.err)[-3000:]
    cal = json.loads(out.read_text())
    failed = {(c["metric"], c["direction"]): c["measured"] for c in cal["checks"] if not c["passed"]}
    assert set(failed) == {("goodput_mbit", "down"), ("goodput_mbit", "up")}, failed
    assert all(0.4 * 20 <= mbit <= 0.5 * 20 for mbit in failed.values()), failed


@pytest.mark.usefixtures("rate_5_percent_low")
def test_goodput_refuses_a_path_5_percent_slow() -> None:
    """Issue 65: the goodput read after its detected ramp, in 2 s of iperf3 a direction, still
    tells a link 5 % slow from its profile (0.908 of the rate against the 0.94 floor). The
    goodput check alone, as calibrate() runs it (`quicbed calibrate`'s exit 3 on a wrong rate
    is the half-rate test's): a whole calibration refused beside another test is measured
    again on a calm host, which took 57 s of make test."""
    profile = load_profile("india")
    config = net.TestbedConfig(
        profile, client=net.HostSpec(TOPOLOGY_IMAGE), servers=(net.HostSpec(TOPOLOGY_IMAGE),)
    )
    with net.Testbed(config) as tb:
        tb.apply_link(*tb.without_loss())
        found = {
            d: goodput_checks(tb, d, spec, 1.2)[0][0]
            for d, spec in (("down", profile.down), ("up", profile.up))
        }
    expected = 0.95 * TCP_PAYLOAD_SHARE * profile.down.rate_mbit
    for direction, check in found.items():
        assert check.metric == "goodput_mbit" and not check.passed, (direction, check)
        # never above the slowed link's share; below it only by what a busy neighbour takes
        assert 0.85 * expected <= check.measured <= 1.01 * expected, (direction, expected, check)


@pytest.mark.usefixtures("ten_ms_long")
@pytest.mark.parametrize("force", [False, True], ids=["refused", "forced"])
def test_run_on_a_wrong_path_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, force: bool) -> None:
    monkeypatch.setattr(paths, "RESULTS", tmp_path / "results")
    if not force:  # a user's run: calibrated in full. Forced, the session's record (if any)
        monkeypatch.delenv(REUSE_ENV, raising=False)  # is reused and the reproof refuses it
    file = tmp_path / "wrong-path.yaml"
    file.write_text(EXPERIMENT)
    code = cli.main(["run", str(file), "--no-progress", *(["--force"] if force else [])])
    assert code == 3
    (run_dir,) = (tmp_path / "results").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (condition,) = manifest["conditions"].values()
    rows_file = run_dir / "rows.jsonl"
    rows = [json.loads(ln) for ln in rows_file.read_text().splitlines()] if rows_file.exists() else []
    if not force:
        ((unit_id, unit),) = manifest["units"].items()
        assert rows == [] and unit["error"].startswith("PathMismatch: calibration failed")
        assert condition["error"] == f"{unit_id}: {unit['error']}"  # which unit of it
        assert manifest["status"] == "incomplete"
        return
    calibration = condition["calibration"]
    assert calibration["forced"] and not calibration["passed"]
    failed = [c for c in calibration["calibration"]["checks"] if not c["passed"]]
    assert [c["metric"] for c in failed] == ["rtt_median_ms"], failed
    assert 89 <= failed[0]["measured"] <= 91, failed
    assert len(rows) == 2 and all(r["calib_forced"] and not r["calib_passed"] for r in rows)
