"""The emulated path, measured for real: RTT, goodput, loss, isolation, teardown.

Each test brings up the real topology (containers, router, link backend chosen as `quicbed`
would) and checks physics against the profile, with the same checks `quicbed calibrate` uses.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from calibrated import Calibrated, calibrated
from contention import remeasured

from quicbed.hostload import LoadMeter
from quicbed.topology.calibrate import (
    GOODPUT_CEILING,
    calibrate,
    check_loss,
    check_rtt,
    expected_ping_rtt_ms,
    rtt_tolerance_ms,
)
from quicbed.topology.clean import leftovers
from quicbed.topology.net import HostSpec, Testbed, TestbedConfig
from quicbed.topology.profiles import apply_overrides, load_profile

# Topology tests run every probe with the host's tools inside the hosts' namespaces, so any
# image with bash serves; the base image always exists after `make images`.
TOPOLOGY_IMAGE = os.environ.get("QUICBED_TEST_IMAGE", "debian:trixie-slim")
pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]


def _config(profile: str, **overrides: str) -> TestbedConfig:
    prof = apply_overrides(load_profile(profile), overrides)
    return TestbedConfig(profile=prof, client=HostSpec(TOPOLOGY_IMAGE), servers=(HostSpec(TOPOLOGY_IMAGE),))


def _by_metric(cal, metric: str, direction: str = "both"):
    return next(c for c in cal.checks if c.metric == metric and c.direction == direction)


@pytest.mark.parametrize("profile", ["india", "germany", "dsl"])
def test_calibration_passes_on_shipped_profiles(profile: str) -> None:
    """RTT at 80 ms (india) and 20 ms (germany), goodput at 20, 100 and asymmetric 25/5, on
    the backend auto takes (where that is the delay line, test_delayline_path measured india)."""
    found = calibrated(_config(profile), "test_calibration_passes_on_shipped_profiles", udp_packets=20000)
    _judge(found)


@pytest.mark.backend("uml")
def test_uml_passes_calibration_on_india() -> None:
    """UML is a backend a user names (--backend uml; auto takes the delay line first): it is
    proven here, where it boots, with the same calibration and bounds as auto's backend."""
    config = replace(_config("india"), backend="uml")
    found = calibrated(config, "test_uml_passes_calibration_on_india", udp_packets=20000)
    assert found.backend == found.calibration.backend == "uml"
    _judge(found)


def _judge(found: Calibrated) -> None:
    """Every check passed; the RTT within 1 % (0.5 ms at least) and goodput at 94 % of the rate
    or more, in each direction."""
    cal = found.calibration
    failed = [(c.metric, c.direction, c.configured, c.measured, c.detail) for c in cal.checks if not c.passed]
    assert not failed, failed
    rtt = _by_metric(cal, "rtt_median_ms")
    applied = cal.link.get("applied", {})
    print(
        f"{found.profile.name} on {found.backend}: RTT median {rtt.measured} ms ({rtt.detail}); "
        f"compensation {applied.get('forwarding_rtt_ms')} ms from {applied.get('forwarding_probe')}"
    )
    assert abs(rtt.measured - found.profile.rtt_ms) <= max(0.5, 0.01 * found.profile.rtt_ms)
    for direction, spec in (("down", found.profile.down), ("up", found.profile.up)):
        goodput = _by_metric(cal, "goodput_mbit", direction).measured
        assert 0.94 * spec.rate_mbit <= goodput <= GOODPUT_CEILING * spec.rate_mbit


def test_loss_within_binomial_ci() -> None:
    """1 % and 10 % on one bring-up: the loss probe on each, with the link changed between."""
    with Testbed(_config("india", loss_pct="1")) as tb:
        checks = {1.0: check_loss(tb, packets=20000)}
        tb.profile = apply_overrides(tb.profile, {"loss_pct": "10"})  # what check_loss expects
        tb.apply_link(tb.profile.down, tb.profile.up)
        checks[10.0] = check_loss(tb, packets=20000)
    for loss_pct, found in checks.items():
        for check in found:
            assert check.passed, (loss_pct, check.metric, check.direction, check.measured, check.tolerance)
        rates = [c for c in found if c.metric == "loss_pct"]
        assert len(rates) == 2
        for check in rates:
            assert abs(check.measured - loss_pct) < loss_pct * 0.25, (loss_pct, check)


def test_the_loss_probe_refuses_a_link_losing_twice_what_is_asked() -> None:
    """Issue 65's wrong loss: 4 % applied where 2 % is asked. The probe stops as soon as its
    confidence sequence lies above the band [1.6, 2.4], well before its cap."""
    with Testbed(_config("india", loss_pct="4")) as tb:
        tb.profile = apply_overrides(tb.profile, {"loss_pct": "2"})  # what check_loss expects
        checks = check_loss(tb, packets=20000)
    rates = [c for c in checks if c.metric == "loss_pct"]
    assert len(rates) == 2
    for check in rates:
        assert not check.passed and "outside the band" in check.detail, (check.measured, check.detail)
        assert 3.0 <= check.measured <= 5.0, check
        sent = int(check.detail.split(" of ")[1].split()[0])
        assert sent < 12000, check.detail


def test_host_container_has_no_route_but_the_emulated_one() -> None:
    with Testbed(_config("india")) as tb:
        links = tb.client.run(["ip", "-o", "link", "show"]).stdout
        names = sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
        assert names == ["client-eth0", "lo"]
        routes = tb.client.run(["ip", "route", "show", "table", "all"]).stdout
        assert "default via 10.77.1.1 dev client-eth0" in routes
        # Docker's bridge and the host are unreachable: only the path exists.
        for outside in ("172.17.0.1", "8.8.8.8"):
            proc = tb.client.run(["ping", "-c", "1", "-W", "1", outside], check=False)
            assert proc.returncode != 0, f"client reached {outside} around the path"
        # The path itself: the server answers, through the router, at the profile's RTT.
        rtt = check_rtt(tb, samples=20)
        assert rtt.passed, rtt
        # The lab CLI turns host names into these addresses (`mininet> client ping server`).
        assert tb.client.defaultIntf().updateIP() == "10.77.1.10"
        assert tb.server.defaultIntf().updateIP() == "10.77.2.10"


@pytest.mark.parametrize(
    "backend", [pytest.param(b, marks=pytest.mark.backend(b)) for b in ("netem", "vm", "uml", "delayline")]
)
def test_clean_leaves_nothing_after_kill_9(backend: str) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "quicbed.cli",
            "calibrate",
            "india",
            "--backend",
            backend,
            "--client-image",
            TOPOLOGY_IMAGE,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    seen = ""
    while time.monotonic() < deadline:  # kill it mid-measurement, with everything up
        line = run.stderr.readline()
        seen += line
        if "measuring goodput" in line:
            break
    else:
        run.kill()
        pytest.fail(f"the run never reached its measurements: {seen}")
    assert any(item.startswith("container") for item in leftovers())
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    proc = subprocess.run([sys.executable, "-m", "quicbed.cli", "clean"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    time.sleep(0.5)
    assert leftovers() == []


@pytest.mark.parametrize(
    ("backend", "priority"),
    [
        pytest.param(
            "delayline", "delayline_priority", marks=pytest.mark.backend("delayline"), id="delayline"
        ),
        pytest.param("uml", "uml_priority", marks=pytest.mark.backend("uml"), id="uml"),
    ],
)
def test_busy_endpoints_do_not_hold_the_link_back(backend: str, priority: str) -> None:
    """A router in a task (the delay line, the UML kernel) runs SCHED_FIFO, so three busy
    loops on the host's two cores do not delay its packets: ping's 99th percentile stays
    within the calibration's RTT tolerance. At the default priority the delay line's was
    +3.0 ms at 80 ms (max +3.7): a busy client (aioquic's Python) made a 1-RTT handshake read
    1.05 RTT net of its CPU; the UML router's max was +4.6 ms (p99 +0.42), and a starting
    browser held its first flights back by 10-23 ms."""
    config = replace(_config("india"), backend=backend)
    with Testbed(config) as tb:
        assert tb.describe()[priority] == "SCHED_FIFO 50"
        tb.ping(count=3, interval=0.2)
        configured = expected_ping_rtt_ms(tb.profile.down, tb.profile.up)

        def busy_pings() -> list[float]:
            hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(3)]
            try:
                return sorted(tb.ping(count=200, interval=0.01))
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()

        def judge(rtts: list[float]) -> None:
            p99 = rtts[int(0.99 * len(rtts)) - 1]
            median = statistics.median(rtts)
            print(f"{backend}, 3 busy loops: ping median {median:.2f}, p99 {p99:.2f}, max {rtts[-1]:.2f} ms")
            assert len(rtts) >= 190, rtts
            assert p99 - configured <= rtt_tolerance_ms(configured), (p99, configured, rtts[-10:])

        # The busy loops' CPU pressure is the test's own load (not counted); steal and slow
        # spells pause the router as no priority can help, so they are, as for every timing
        # check (CI, 2026-12-07: UML's p99 was 81.7 ms at 80.08, during steal of 14-25 % of the
        # busy CPU in 10 s windows).
        remeasured(
            f"{backend} pings beside 3 busy loops",
            busy_pings,
            judge,
            meter=lambda own: LoadMeter(own, own_pressure=True),
        )


LOOKUP = """
import socket, sys, time
def timed(name):
    t = time.monotonic()
    try:
        found = socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror:
        found = None
    return found, time.monotonic() - t
for name in sys.argv[1:]:
    found, took = timed(name)
    print(name, found, f"{took:.4f}")
"""


def test_container_hosts_resolve_only_inside_the_testbed() -> None:
    """Testbed names come from the hosts file; any other name fails at once, and no lookup
    leaves through the emulated path (it once timed out there for 5 s before every trial)."""
    client = HostSpec("quicbed/client:dev")  # has python3 (the base image has not)
    cfg = TestbedConfig(profile=load_profile("india"), client=client, servers=(client,))
    with Testbed(cfg) as tb:
        proc = tb.client.exec(
            ["python3", "-c", LOOKUP, "server.quicbed", "client", "no-such-host.example", "www.debian.org"],
            check=True,
        )
    got = {
        name: (found, float(took))
        for name, found, took in (line.split() for line in proc.stdout.splitlines())
    }
    assert got["server.quicbed"][0] == "10.77.2.10"
    assert got["client"][0] == "10.77.1.10"  # its own hostname (OpenLDAP asks for it)
    for name in ("no-such-host.example", "www.debian.org"):
        found, took = got[name]
        assert found == "None" and took < 0.1, (name, found, took)


@pytest.mark.backend("vm")
def test_the_qemu_routers_kernel_holds_fq_codel_near_its_target() -> None:
    """The vm backend's bottleneck is Debian's kernel's: fq_codel is in place on the guest's
    egress NICs (read back from that kernel), the rate holds, and the loaded flows' RTT is the
    base plus about fq_codel's 5 ms, where drop-tail's would be up to base + 80.5 ms."""
    cfg = replace(_config("india", aqm="fq_codel"), backend="vm")
    with Testbed(cfg) as tb:
        cal = calibrate(tb, rtt_samples=20, udp_packets=2000, goodput_seconds=3.0)
    assert cal.passed, [c for c in cal.checks if not c.passed]
    for direction, dev in (("down", "eth0"), ("up", "eth1")):
        leaf = _by_metric(cal, "queue_discipline", direction).detail
        assert leaf.startswith(f"{dev}: qdisc fq_codel 10: parent 2:1"), leaf
    loaded = _by_metric(cal, "rtt_loaded_ms", "up").measured
    assert 80.0 <= loaded <= 80.6 + 5 + 2, loaded
