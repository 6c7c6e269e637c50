"""`quicbed clean` finds every process the testbed started in a namespace by the mark in its
environment (topology/marker.py), even where the namespace has lost its name; and never a host
process that is not ours.

The unit tests need no namespace (a marked `sleep` in the host's namespace stands in for a
helper); the bring-up failure at the end is marked `path`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from quicbed.experiments.synthetic import SyntheticExecutor
from quicbed.topology import clean as cleaning
from quicbed.topology import hosts
from quicbed.topology.marker import (
    MARK,
    kill_own_helpers,
    mark_of,
    marked_argv,
    marked_processes,
)

EXPERIMENT = """\
name: helper
profiles:
  - {name: lab, rtt_ms: 80, rate_mbit: 20}
servers: [caddy]
clients: [quic_perf]
workload: {kind: web, objects: [index.html]}
repetitions: 2
"""


def test_mark_of_reads_the_owner_from_an_environ():
    assert mark_of(0, environ=b"PATH=/bin\0QUICBED_TESTBED=4321\0HOME=/root\0") == "4321"
    assert mark_of(0, environ=b"QUICBED_TESTBED=\0") == ""
    assert mark_of(0, environ=b"PATH=/bin\0QUICBED_TESTBEDS=1\0X_QUICBED_TESTBED=1\0") is None
    assert mark_of(0, environ=b"") is None
    assert mark_of(2**22 + 12345) is None  # no such process


def test_every_command_sent_into_a_namespace_is_marked(monkeypatch):
    mark = f"{MARK}={os.getpid()}"
    node = SimpleNamespace(pid=42)
    assert hosts.NsHost.popen_argv(node, ["iperf3", "-s"]) == [
        "nsenter",
        "-t",
        "42",
        "-n",
        "--",
        "env",
        mark,
        "iperf3",
        "-s",
    ]
    seen: list[list[str]] = []

    def fake_run(argv, timeout):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(hosts, "host_run", fake_run)
    hosts.in_netns(42, ["ip", "link"])
    assert seen == [["nsenter", "-t", "42", "-n", "--", "env", mark, "ip", "link"]]


@pytest.fixture
def sleepers():
    """A marked and an unmarked `sleep` in the host's namespace; both gone afterwards."""
    marked = subprocess.Popen(marked_argv(["sleep", "300"]))
    plain = subprocess.Popen(["sleep", "300"])
    deadline = time.monotonic() + 5
    while mark_of(marked.pid) is None and time.monotonic() < deadline:  # env has not exec'd yet
        time.sleep(0.01)
    yield marked, plain
    for proc in (marked, plain):
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_marked_process_is_found_and_its_host_neighbours_are_not(sleepers):
    marked, plain = sleepers
    assert marked.pid in marked_processes()
    assert marked.pid in marked_processes(owner=os.getpid())
    assert marked.pid not in marked_processes(owner=1)
    found = cleaning.testbed_processes()
    assert marked.pid in found
    # Sharing the host's namespace with a marked process makes nothing ours.
    assert not {plain.pid, os.getpid(), os.getppid(), 1} & set(found)


def test_a_run_kills_the_helpers_it_left_and_only_those(sleepers):
    marked, plain = sleepers
    killed = kill_own_helpers()
    assert any(line.startswith(f"{marked.pid} sleep 300") for line in killed)
    assert marked.wait(timeout=5) == -signal.SIGKILL
    assert plain.poll() is None


def test_a_marked_process_never_finds_itself_or_its_parents():
    code = (
        "import os; from quicbed.topology.marker import marked_processes; "
        "print(bool({os.getpid(), os.getppid()} & set(marked_processes())))"
    )
    proc = subprocess.run(
        marked_argv([sys.executable, "-c", code]), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


class LeavesAHelper(SyntheticExecutor):
    """Starts a marked helper while calibrating and, like a teardown cut short, forgets it."""

    def __init__(self) -> None:
        super().__init__()
        self.helper: subprocess.Popen | None = None

    @contextlib.contextmanager
    def condition(self, cond):
        if self.helper is None:
            self.helper = subprocess.Popen(marked_argv(["sleep", "300"]))
        with super().condition(cond) as calib:
            yield calib


def test_quicbed_run_ends_the_helpers_its_teardown_missed(tmp_path, monkeypatch, capsys):
    from quicbed import cli, paths
    from quicbed.experiments import executor

    exp_file = tmp_path / "exp.yaml"
    exp_file.write_text(EXPERIMENT)
    made: list[LeavesAHelper] = []
    monkeypatch.setattr(paths, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(
        executor, "TestbedExecutor", lambda *a, **kw: made.append(LeavesAHelper()) or made[-1]
    )
    args = cli.build_parser().parse_args(["run", str(exp_file), "--no-progress"])
    try:
        assert cli.cmd_run(args) == 0
        helper = made[0].helper
        assert helper is not None and helper.wait(timeout=5) == -signal.SIGKILL
    finally:
        for ex in made:
            if ex.helper and ex.helper.poll() is None:
                ex.helper.kill()
                ex.helper.wait()
    assert f"stopped a helper the teardown left: {helper.pid} sleep 300" in capsys.readouterr().err


# --- on the real path (root, Docker; unrun by the unit suite) -------------------------------


def _named_netns() -> set[str]:
    """`ip netns` names, as /proc/PID/ns/net spells namespaces (a name is a bind mount)."""
    return {f"net:[{os.stat(path).st_ino}]" for path in Path("/run/netns").glob("*")}


def _india_with_two_containers():  # a TestbedConfig; imported here, as the path tests do
    from quicbed.topology.net import HostSpec, TestbedConfig
    from quicbed.topology.profiles import load_profile

    image = os.environ.get("QUICBED_TEST_IMAGE", "debian:trixie-slim")
    return TestbedConfig(profile=load_profile("india"), client=HostSpec(image), servers=(HostSpec(image),))


@pytest.mark.path
@pytest.mark.usefixtures("clean_slate")
def test_clean_after_a_bring_up_that_failed_midway(monkeypatch):
    """Calibration's iperf3 server and client, and a helper in the router, are running when
    the bring-up fails: the teardown removes the containers, the helpers stay in namespaces
    nothing names any more, and `quicbed clean` still finds and ends them."""
    from quicbed.topology import calibrate as calibration
    from quicbed.topology.clean import leftovers
    from quicbed.topology.net import Testbed

    started: list[subprocess.Popen] = []

    def fail_midway(tb: Testbed) -> None:
        server, client = calibration.start_iperf(tb, calibration.IPERF_PORT, ["-t", "120"], timeout=150)
        router = subprocess.Popen(tb.router.popen_argv(["sleep", "600"]))
        started.extend([server, client, router])
        time.sleep(1)
        raise RuntimeError("bring-up failed midway (test)")

    monkeypatch.setattr(Testbed, "_measure_forwarding_latency", fail_midway)
    with pytest.raises(RuntimeError, match="midway"), Testbed(_india_with_two_containers()):
        pass
    alive = [p for p in started if p.poll() is None]
    assert alive, "the helpers died with the teardown; nothing left to test"
    host_ns, named = os.readlink("/proc/self/ns/net"), _named_netns()
    for proc in alive:
        netns = os.readlink(f"/proc/{proc.pid}/ns/net")
        assert netns != host_ns and netns not in named  # an unnamed namespace
        assert mark_of(proc.pid) == str(os.getpid())
    assert {p.pid for p in alive} <= set(cleaning.testbed_processes())
    result = subprocess.run(
        [sys.executable, "-m", "quicbed.cli", "clean"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    for proc in started:
        proc.wait(timeout=10)  # reaped: ended by clean, not by this test
    assert marked_processes() == []
    assert leftovers() == []


@pytest.mark.path
@pytest.mark.usefixtures("clean_slate")
def test_a_signal_during_the_teardown_waits_for_its_end(monkeypatch):
    """SIGTERM comes as the teardown starts (while the router's link backend stops): every
    host is still removed, and the signal's exception comes after, from the caller's own
    handler, as a run's or a lab's does."""
    from quicbed.topology.clean import leftovers
    from quicbed.topology.net import Testbed

    class Stopped(Exception):
        pass

    def raise_stopped(_signum: int, _frame: object) -> None:
        raise Stopped

    previous = signal.signal(signal.SIGTERM, raise_stopped)
    try:
        with pytest.raises(Stopped), Testbed(_india_with_two_containers()) as tb:
            backend_stop = tb.backend.stop

            def signalled_stop() -> None:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.1)  # the handler has had its chance to run, here, if not held
                backend_stop()

            monkeypatch.setattr(tb.backend, "stop", signalled_stop)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert leftovers() == []


@pytest.mark.path
def test_clean_in_a_scope_leaves_what_others_started_alone(tmp_path, monkeypatch):
    """The suite's clean-up (QUICBED_SCOPE) ends its own testbed processes and state, and
    leaves a user's UML router and lab state (no scope) as they were."""
    from quicbed.topology.marker import SCOPE, SCOPE_FILE

    monkeypatch.setattr(cleaning, "STATE", tmp_path)
    monkeypatch.setattr(cleaning, "_remove_root_veths", list)  # half-made links: not the subject
    ours_dir, users_dir = tmp_path / "runs" / "ours", tmp_path / "labs" / "user"
    for directory in (ours_dir, users_dir):
        directory.mkdir(parents=True)
    (ours_dir / SCOPE_FILE).write_text(os.environ[SCOPE])
    sleep = [sys.executable, "-c", "import time; time.sleep(300)", "umid=quicbed-scopetest"]
    user_env = {k: v for k, v in os.environ.items() if k != SCOPE}
    users = subprocess.Popen(sleep, env=user_env)
    ours = subprocess.Popen(sleep)
    try:
        deadline = time.monotonic() + 5
        while "umid=" not in cleaning._cmdline(ours.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        found = cleaning.testbed_processes()
        assert ours.pid in found and users.pid not in found
        removed = cleaning.clean()
        assert any(line.startswith(f"process {ours.pid} ") for line in removed), removed
        assert ours.wait(timeout=5) == -signal.SIGKILL
        assert users.poll() is None and users_dir.exists() and not ours_dir.exists()
    finally:
        for proc in (users, ours):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
