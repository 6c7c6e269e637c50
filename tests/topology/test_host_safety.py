"""Issue 46, host safety, as pure logic (no Docker, no namespace): images only from this host
(`--pull never` in every `docker run`), a deadline on every docker control call, the client
given the CA certificate alone, and `quicbed clean` removing no directory a command line of
another user (or a `../` in one) names, and no root-namespace veth under a scope."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from quicbed import dockercli, limits
from quicbed.errors import HostProblem
from quicbed.paths import REPO
from quicbed.servers.testbed import CLIENT_PKI, client_docker_args
from quicbed.topology import clean as cleaning
from quicbed.topology import hosts

SCANNED = ("topology", "servers", "clients", "experiments", "analysis", "labs", "quicbed", "images")
# A docker run/create in Python (an argv list or a docker() call; docstrings name the command
# in prose) and in a shell script.
_RUN = {
    ".py": re.compile(r'(?:"docker",\s*|docker\(\s*|(?<![\w\]])\[\s*)"(?:run|create)",\s*"-'),
    ".sh": re.compile(r"\bdocker\s+(?:run|create)\b"),
}


def _sources() -> list[Path]:
    files = [p for d in SCANNED for p in (REPO / d).rglob("*") if p.suffix in (".py", ".sh")]
    return [p for p in files if p != REPO / "images" / "build.sh"]  # its builds pull bases


def test_every_docker_run_in_the_code_says_pull_never() -> None:
    missing = []
    for path in _sources():
        text = path.read_text(errors="replace")
        for match in _RUN[path.suffix].finditer(text):
            line_start = text.rfind("\n", 0, match.start()) + 1
            if text[line_start : match.start()].lstrip().startswith("#"):
                continue  # a comment naming the command
            window = text[match.start() : match.start() + 300]
            if (
                "PULL_NEVER" not in window
                and "--pull never" not in window
                and '"--pull", "never"' not in window
            ):
                missing.append(f"{path.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}")
    assert missing == [], missing


def _recording(monkeypatch: pytest.MonkeyPatch, returncode: int = 0) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def fake(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        out = '{"Pid": 4242}' if args[0] == "inspect" else ""
        return subprocess.CompletedProcess(["docker", *args], returncode, out, "No such image")

    monkeypatch.setattr(hosts, "docker", fake)
    monkeypatch.setattr(dockercli, "docker", fake)
    return calls


def test_container_hosts_run_with_pull_never(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _recording(monkeypatch)
    host = SimpleNamespace(
        name="client", image="quicbed/client:dev", run_id="r1", container="quicbed-r1-client"
    )
    hosts.DockerHost._start_container(host, ["-v", "/a:/b"])  # type: ignore[arg-type]
    assert calls[0][:4] == ("run", "-d", "--pull", "never") and host.container_pid == 4242  # type: ignore[attr-defined]
    side = SimpleNamespace(name="client", container=host.container, run_id="r1", pid=1)
    hosts.SideContainer(side, "quicbed/tools:dev", "cross")  # type: ignore[arg-type]
    assert calls[-1][:4] == ("run", "-d", "--pull", "never")


def test_a_missing_image_is_one_host_problem_naming_make_images(monkeypatch: pytest.MonkeyPatch) -> None:
    _recording(monkeypatch, returncode=1)
    monkeypatch.setattr(hosts, "image_present", lambda image: False)
    host = SimpleNamespace(
        name="client", image="quicbed/nope:dev", run_id="r1", container="quicbed-r1-client"
    )
    with pytest.raises(HostProblem) as err:
        hosts.DockerHost._start_container(host, [])  # type: ignore[arg-type]
    assert str(err.value) == "image quicbed/nope:dev is not built on this host: make images"
    assert err.value.exit_code == 4


def test_the_client_gets_the_ca_certificate_alone(tmp_path: Path) -> None:
    args = client_docker_args(tmp_path / "pki", ((tmp_path / "trials", "/var/lib/quicbed/trials"),))
    mounts = [args[i + 1] for i, a in enumerate(args) if a == "-v"]
    assert mounts == [
        f"{(tmp_path / 'pki').resolve()}/ca.pem:{CLIENT_PKI}/ca.pem:ro",
        f"{tmp_path / 'trials'}:/var/lib/quicbed/trials",
    ]
    assert not any("server.key" in m or m.startswith(f"{tmp_path / 'pki'}:") for m in mounts)


# --- a docker that does not answer --------------------------------------------------------------


@pytest.fixture
def hung_docker(tmp_path: Path) -> dict[str, str]:
    """An environment whose `docker` never answers (a dockerd stopped with kill -STOP)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text("#!/bin/sh\nexec sleep 120\n")
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "QUICBED_SCOPE": f"t-{uuid.uuid4().hex}"}


def _python(code: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    return proc, time.monotonic() - start


def test_a_hung_docker_is_one_line_within_the_deadline(hung_docker: dict[str, str]) -> None:
    code = (
        "from quicbed import dockercli; from quicbed.errors import install_excepthook\n"
        "install_excepthook(); dockercli.DOCKER_TIMEOUT_S = 2\n"
        "from quicbed.topology.net import require_docker; require_docker()\n"
    )
    proc, took = _python(code, hung_docker)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.splitlines() == [
        "quicbed: Docker did not answer within 2 s: docker info --format {{.ServerVersion}}"
    ]
    assert took < 20


@pytest.mark.parametrize("argv", [["clean"], ["clean", "--lab", "nolab1"]])
def test_clean_with_a_hung_docker_goes_on_and_ends_with_one_line(
    hung_docker: dict[str, str], argv: list[str]
) -> None:
    """`quicbed clean` and `clean --lab` (a fresh scope: they own nothing on this host) go on
    past Docker, then end with exit 4 and one line that names the step left undone."""
    code = (
        "import sys; from quicbed import dockercli; dockercli.DOCKER_TIMEOUT_S = 2\n"
        f"from quicbed.cli import main; sys.exit(main({argv!r}))\n"
    )
    proc, took = _python(code, hung_docker)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.startswith(
        "quicbed: clean left some behind (1 step(s) failed): "
        "Docker did not answer within 2 s: docker ps -aq --filter label="
    ), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and took < 20


STAND_IN_IP = """#!/bin/sh
case "$*" in
  "-o link show") printf '1: lo: <LOOPBACK>\\n7: client-eth0@if8: <UP>\\n9: server-eth1@if10: <UP>\\n' ;;
  "link del client-eth0") exec sleep 67 ;;
  *) echo "$*" >> "$0.done" ;;
esac
"""


def test_a_clean_goes_on_past_a_hung_ip_and_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One `ip link del` held by a stuck namespace is killed at its bound; the next link is
    still removed, and the one left is named (the whole-host steps, on a stand-in `ip`)."""
    stand_in = tmp_path / "ip"
    stand_in.write_text(STAND_IN_IP)
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(cleaning, "IP_TIMEOUT_S", 1.0)
    tally = cleaning._Tally()
    start = time.monotonic()
    cleaning._remove_root_veths(tally)
    assert time.monotonic() - start < 10
    assert tally.removed == ["link server-eth1"]
    assert (tmp_path / "ip.done").read_text() == "link del server-eth1\n"
    (problem,) = tally.problems
    assert problem.startswith(
        "link client-eth0: `ip link del client-eth0` did not finish within 1 s"
    ), problem
    with pytest.raises(cleaning.CleanLeftSome) as left:
        tally.finish()
    assert left.value.removed == ["link server-eth1"] and left.value.exit_code == 4
    assert not subprocess.run(["pgrep", "-f", "sleep 67"], capture_output=True, text=True, timeout=10).stdout


def test_docker_gives_its_own_timeout_to_a_long_command(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []

    def fake_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(kwargs["timeout"])  # type: ignore[arg-type]
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(dockercli.subprocess, "run", fake_run)
    dockercli.docker("ps")
    dockercli.docker("run", "--rm", "x", timeout=300)
    assert seen == [dockercli.DOCKER_TIMEOUT_S, 300] and dockercli.DOCKER_TIMEOUT_S <= 30


# --- quicbed clean: UML directories and veths ----------------------------------------------------


def test_only_exact_umids_are_taken_from_a_command_line() -> None:
    argv = [
        "linux.uml",
        "umid=quicbed-1a2b3c4d",
        "umid=quicbed-../../etc",
        "umid=quicbed-x/y",
        "umid=quicbed-.hidden",
        "xumid=quicbed-other",
        "umid=quicbed-ok umid=quicbed-two",  # one argument with a space: not two
        "umid=quicbed-probe-123-45",
    ]
    assert cleaning.umids_of(argv) == {"quicbed-1a2b3c4d", "quicbed-probe-123-45"}


def test_only_a_process_of_roots_counts() -> None:
    root = "Name:\tlinux\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n"
    assert cleaning.root_owned(root)
    assert not cleaning.root_owned(root.replace("Uid:\t0\t0\t0\t0", "Uid:\t1000\t0\t0\t0"))
    assert not cleaning.root_owned(root.replace("Uid:\t0\t0\t0\t0", "Uid:\t1000\t1000\t1000\t1000"))
    assert not cleaning.root_owned("")


def test_a_uml_dir_must_be_a_real_directory_directly_in_uml(tmp_path: Path) -> None:
    uml, canary = tmp_path / ".uml", tmp_path / "canary"
    uml.mkdir()
    canary.mkdir()
    (canary / "keep").write_text("x")
    (uml / "quicbed-real").mkdir()
    (uml / "quicbed-link").symlink_to(canary)
    (uml / "quicbed-file").write_text("")
    assert cleaning.uml_dir("quicbed-real", uml) == uml.resolve() / "quicbed-real"
    for umid in (
        "quicbed-link",
        "quicbed-file",
        "quicbed-gone",
        "quicbed-../canary",
        "../canary",
        "quicbed-",
    ):
        assert cleaning.uml_dir(umid, uml) is None, umid


def test_remove_uml_dirs_leaves_links_and_escapes_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    uml, canary = tmp_path / ".uml", tmp_path / "canary"
    (uml / "quicbed-real").mkdir(parents=True)
    canary.mkdir()
    (canary / "keep").write_text("x")
    (uml / "quicbed-link").symlink_to(canary)
    cleaning._remove_uml_dirs({"quicbed-real", "quicbed-link", "quicbed-../canary", "quicbed-x/../../canary"})
    assert not (uml / "quicbed-real").exists() and (canary / "keep").read_text() == "x"
    assert (uml / "quicbed-link").is_symlink()


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists(), reason="needs root and setpriv"
)
def test_a_users_process_names_no_umid_that_clean_removes() -> None:
    """A user's process saying umid=quicbed-… is killed with the rest of its namespace's, but
    its umid is not taken; the same command line of root's is."""
    line = [sys.executable, "-c", "import time; time.sleep(60)", "umid=quicbed-userclaims"]
    user = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *line])
    ours = subprocess.Popen(line)
    try:
        deadline = time.monotonic() + 10
        # Popen returns once setpriv runs; it drops to uid 65534 and execs python after that.
        while time.monotonic() < deadline and not cleaning._cmdline(user.pid).startswith(sys.executable):
            time.sleep(0.02)
        assert "Uid:\t65534" in cleaning._status(user.pid)
        _, umids = cleaning._kill([user.pid])
        assert umids == set()
        _, umids = cleaning._kill([ours.pid])
        assert umids == {"quicbed-userclaims"}
    finally:
        for proc in (user, ours):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_a_scoped_clean_leaves_root_namespace_veths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root-namespace veths carry no scope (the testbed never makes one there): only an
    unscoped clean, which owns the host, removes them."""
    called: list[str] = []
    monkeypatch.setattr(cleaning, "STATE", tmp_path)
    # An unscoped clean restores the host's settings: this host's record, under a live run
    # beside this test (another worker's, a user's), would be undone mid-run.
    monkeypatch.setattr(cleaning.hostsettings, "restore_all", lambda: called.append("settings") or [])
    monkeypatch.setattr(cleaning, "_remove_containers", lambda label: [])
    monkeypatch.setattr(cleaning, "testbed_processes", lambda: [])
    monkeypatch.setattr(cleaning, "_remove_root_veths", lambda tally: called.append("veths"))
    monkeypatch.setattr(cleaning, "_remove_netns", lambda tally: called.append("netns"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("QUICBED_SCOPE", f"t-{uuid.uuid4().hex}")
    assert cleaning.clean() == [] and called == []
    monkeypatch.delenv("QUICBED_SCOPE")
    assert cleaning.clean() == [] and called == ["veths", "netns", "settings"]


def test_a_trial_held_by_a_hung_docker_ends_with_one_line(hung_docker: dict[str, str]) -> None:
    """A `docker exec` that dockerd stops answering mid-trial (kill -STOP) ends when the
    watchdog's `docker version` goes unanswered, not at the trial's own timeout; later calls
    of the process (the tear-down) then give Docker seconds, not 30 s each."""
    code = (
        "import time; from types import SimpleNamespace\n"
        "from quicbed import dockercli, limits; from quicbed.errors import install_excepthook\n"
        "install_excepthook(); limits.WATCH_EVERY_S = 0.5; dockercli.LIVENESS_TIMEOUT_S = 1\n"
        "from quicbed.topology.hosts import DockerHost\n"
        "host = SimpleNamespace(container='quicbed-x-client', name='client')\n"
        "try:\n"
        "    DockerHost.exec(host, ['quic_perf'], timeout=600)\n"
        "finally:\n"
        "    t = time.monotonic()\n"
        "    try: dockercli.docker('rm', '-f', 'x')\n"
        "    except Exception as e: print(f'after: {time.monotonic() - t:.1f} s', flush=True)\n"
    )
    proc, took = _python(code, hung_docker)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.splitlines() == [
        "quicbed: Docker did not answer within 1 s: docker version --format {{.Server.Version}}"
    ]
    after = float(proc.stdout.split("after: ")[1].split()[0])
    assert after <= dockercli.AFTER_NO_ANSWER_S + 1 and took < 15, (proc.stdout, took)


def test_run_capped_asks_its_watchdog_while_the_command_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "WATCH_EVERY_S", 0.2)
    asked: list[float] = []

    def watchdog() -> None:
        asked.append(time.monotonic())
        if len(asked) == 3:
            raise RuntimeError("gone")

    start = time.monotonic()
    with pytest.raises(RuntimeError, match="gone"):
        limits.run_capped(["sleep", "30"], timeout=60, watchdog=watchdog)
    # asked every WATCH_EVERY_S; the command was ended with the group, not waited for
    assert len(asked) == 3 and time.monotonic() - start < 3 * limits.WATCH_EVERY_S + 3
