"""Remove everything the testbed made, even after `kill -9` of a run.

What a run leaves when killed: containers (labelled `quicbed`), UML and QEMU routers and delay
lines (found by their `umid=quicbed-` or `-name quicbed-vm-` argument and binary name) that keep
the router namespace alive, Mininet shells, processes started inside those namespaces, veths
half-made in the root namespace, and probe namespaces. Every command the testbed sends into a
namespace carries the QUICBED_TESTBED mark in its environment (topology/marker.py), so a helper
is found even in a namespace that has no name and no other process left.

With QUICBED_SCOPE set (the test suite sets one per session; topology/marker.py), clean and
leftovers see only what was started under that scope: a user's lab or run on the same host is
left alone. Probe namespaces, which live for a moment and carry no scope, are then left too,
and so are veths in the root namespace under a node's name: the testbed never makes one there
(topology/net.py: each veth is made from the router's namespace with its peer straight in the
node's), so such a veth carries no scope and records nothing of ours; only an unscoped clean,
which owns the whole host, removes it (what an older checkout or a killed Mininet left).

Any user can start a process whose command line says `umid=quicbed-...`: a UML directory is
only removed for a umid of exactly UMID, named by a process of root's (/proc/PID/status, which,
unlike the owner of /proc/PID, a process cannot change) in the scope, and only if it is a real
directory directly in ~/.uml (uml_dir).

A clean goes on past a step that hangs (Docker that does not answer, an `ip` held by a stuck
namespace): it removes what it can, then raises CleanLeftSome, which names what it could not.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from quicbed import hostsettings
from quicbed.dockercli import DOCKER_TIMEOUT_S, docker
from quicbed.errors import HostProblem
from quicbed.hostcalls import IP_TIMEOUT_S, host_run
from quicbed.paths import STATE
from quicbed.topology.backends import BACKENDS
from quicbed.topology.hosts import LABEL
from quicbed.topology.marker import (
    dir_in_scope,
    in_scope,
    marked_processes,
    scope,
    this_process_and_ancestors,
)

NODE_NAMES = ("client", "cross", "router", r"server\d*")
# The backends' UML ids (quicbed-<hex>, quicbed-probe-<pid>-<n>): no dot, no slash, so no
# umid can name a directory outside ~/.uml.
UMID = re.compile(r"quicbed-[A-Za-z0-9_-]+")
_VETH = re.compile(rf"^({'|'.join(NODE_NAMES)})-eth\d+$")
_SHELL = re.compile(rf"mininet:({'|'.join(NODE_NAMES)})$")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def umids_of(argv: list[str]) -> set[str]:
    """The UML ids a command line names: whole arguments umid=<UMID>, nothing else."""
    return {arg[5:] for arg in argv if arg.startswith("umid=") and UMID.fullmatch(arg[5:])}


def root_owned(status: str) -> bool:
    """Whether a /proc/PID/status text is a process of root's: real, effective, saved and
    filesystem uid all 0 (a user's process can make /proc/PID itself root's: PR_SET_DUMPABLE)."""
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return line.split()[1:] == ["0", "0", "0", "0"]
    return False


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


def _netns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _is_testbed_process(cmdline: str) -> bool:
    """A backend's process (its marks: UML and QEMU routers, delay lines) or a Mininet shell."""
    marks = [mark for backend in BACKENDS.values() for mark in backend.marks]
    return any(mark in cmdline for mark in marks) or bool(_SHELL.search(cmdline))


def testbed_processes() -> list[int]:
    """UML routers, delay lines, Mininet shells and marked helpers of the testbed, wherever
    they are, and every process sharing a non-host netns with one of them."""
    # The host's namespace is never a testbed's: Docker hosts' shells (`docker exec`) live in
    # it. PID 1's link is not readable everywhere (a Firecracker init here), so ours counts too.
    # A marked process in the host's namespace is ours, but its neighbours there are not.
    host_namespaces = {None, _netns(1), _netns("self")}
    pids, wanted = _pids(), scope()
    ours = {pid for pid in pids if _is_testbed_process(_cmdline(pid)) and in_scope(pid, wanted)}
    ours |= set(marked_processes())
    namespaces = {_netns(pid) for pid in ours} - host_namespaces
    in_ns = {pid for pid in pids if _netns(pid) in namespaces}
    return sorted((ours | in_ns) - this_process_and_ancestors())


class CleanLeftSome(HostProblem):
    """A clean that went on past steps the host did not answer: what it removed, and one line
    on what it could not (exit 4, as any host problem)."""

    def __init__(self, removed: list[str], problems: list[str]) -> None:
        self.removed = removed
        super().__init__(f"clean left some behind ({len(problems)} step(s) failed): " + "; ".join(problems))


@dataclass
class _Tally:
    removed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def step(self, remove: Callable[[], list[str]]) -> None:
        """One step of a clean; one that hangs is noted and the clean goes on."""
        try:
            self.removed += remove()
        except HostProblem as exc:
            self.problems.append(str(exc))

    def output(self, argv: list[str]) -> str:
        """A bounded listing's output; "" (and a note) when it hangs."""
        try:
            return host_run(argv, IP_TIMEOUT_S).stdout
        except HostProblem as exc:
            self.problems.append(str(exc))
            return ""

    def run(self, argv: list[str], what: str) -> None:
        """One bounded removal."""
        try:
            host_run(argv, IP_TIMEOUT_S)
        except HostProblem as exc:
            self.problems.append(f"{what}: {exc}")
            return
        self.removed.append(what)

    def finish(self) -> list[str]:
        if self.problems:
            raise CleanLeftSome(self.removed, self.problems)
        return self.removed


def clean() -> list[str]:
    wanted = scope()
    tally = _Tally()
    tally.step(lambda: _remove_containers(_container_label(wanted)))
    killed, umids = _kill(testbed_processes())
    tally.removed += killed
    if wanted is None:  # root-namespace veths carry no scope (see above): a whole-host clean's
        _remove_root_veths(tally)
        _remove_netns(tally)
        umids |= {p.name for p in (Path.home() / ".uml").glob("quicbed-*")}
        tally.removed += hostsettings.restore_all()  # shared by every scope: only a whole-host clean
    _remove_uml_dirs(umids)
    for state in ("runs", "labs"):
        for directory in (STATE / state).glob("*"):
            if dir_in_scope(directory, wanted):
                shutil.rmtree(directory, ignore_errors=True)
    return tally.finish()


def _container_label(wanted: str | None) -> str:
    return f"{LABEL}.scope={wanted}" if wanted is not None else LABEL


def clean_testbed(run_id: str, owner: int | None = None, netns: tuple[str, ...] = ()) -> list[str]:
    """Remove one testbed (a lab) and leave every other alone: its containers (labelled with
    its run id), the processes that name it (its UML router or delay lines, whose control
    files are under STATE/runs/RUN_ID, and the `docker exec` shells of its containers), the
    helpers its owner process marked, and everything in its nodes' namespaces."""
    tally = _Tally()
    tally.step(lambda: _remove_containers(f"{LABEL}.run={run_id}"))
    names = (f"/runs/{run_id}/", f"quicbed-{run_id}-")
    pids = _pids()
    ours = {pid for pid in pids if any(n in _cmdline(pid) for n in names)}
    if owner is not None:
        ours |= set(marked_processes(owner))
    namespaces = ({_netns(pid) for pid in ours} | set(netns)) - {None, _netns(1), _netns("self")}
    ours |= {pid for pid in pids if _netns(pid) in namespaces}
    killed, umids = _kill(sorted(ours - this_process_and_ancestors() - {owner}))
    tally.removed += killed
    _remove_uml_dirs(umids)
    shutil.rmtree(STATE / "runs" / run_id, ignore_errors=True)
    return tally.finish()


def _kill(pids: list[int]) -> tuple[list[str], set[str]]:
    """SIGKILL each; what was killed, and the UML ids (umid=) that root's processes of this
    scope named (another user's command line says what it likes)."""
    removed, umids, wanted = [], set(), scope()
    for pid in pids:
        what = _cmdline(pid)  # before the kill: afterwards it is gone
        if root_owned(_status(pid)) and in_scope(pid, wanted):
            umids |= umids_of(_argv(pid))
        try:
            os.kill(pid, signal.SIGKILL)
            removed.append(f"process {pid} ({what[:60] or '?'})")
        except ProcessLookupError:
            pass
    return removed, umids


def _remove_uml_dirs(umids: set[str]) -> None:
    for umid in umids:
        if (path := uml_dir(umid, Path.home() / ".uml")) is not None:
            shutil.rmtree(path, ignore_errors=True)  # fd-based: never follows a link inside


def uml_dir(umid: str, base: Path) -> Path | None:
    """base/umid if umid is a UMID and that is a real directory (not a link) directly in base."""
    if not UMID.fullmatch(umid):
        return None
    try:
        base = base.resolve(strict=True)
        path = base / umid
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or path.resolve().parent != base:
        return None
    return path


def _remove_containers(label: str = LABEL) -> list[str]:
    if not shutil.which("docker"):
        return []
    proc = docker("ps", "-aq", "--filter", f"label={label}")
    ids = proc.stdout.split()
    if ids:
        docker("rm", "-f", *ids, timeout=DOCKER_TIMEOUT_S + 10 * len(ids))  # ~1 s each when well
    return [f"container {cid}" for cid in ids]


def _remove_root_veths(tally: _Tally) -> None:
    for line in tally.output(["ip", "-o", "link", "show"]).splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if _VETH.match(name):
            tally.run(["ip", "link", "del", name], f"link {name}")


def _remove_netns(tally: _Tally) -> None:
    for line in tally.output(["ip", "netns", "list"]).splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith("quicbed-"):
            tally.run(["ip", "netns", "del", name], f"netns {name}")


def leftovers() -> list[str]:
    """What clean would remove now (for tests and the before-exit check)."""
    found = [
        f"process {pid}"
        for pid in testbed_processes()
        if Path(f"/proc/{pid}/stat").exists() and _state(pid) != "Z"
    ]
    wanted = scope()
    proc = docker("ps", "-aq", "--filter", f"label={_container_label(wanted)}")
    found += [f"container {cid}" for cid in proc.stdout.split()]
    if wanted is None:  # as clean: root-namespace veths are only a whole-host clean's
        links = host_run(["ip", "-o", "link", "show"], IP_TIMEOUT_S).stdout
        found += [
            f"link {ln.split(':')[1].strip()}"
            for ln in links.splitlines()
            if _VETH.match(ln.split(":")[1].strip().split("@")[0])
        ]
        netns = host_run(["ip", "netns", "list"], IP_TIMEOUT_S).stdout
        found += [f"netns {ln.split()[0]}" for ln in netns.splitlines() if ln.startswith("quicbed-")]
    return found


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"
