"""Remove everything the testbed made, even after `kill -9` of a run.

What a run leaves when killed: containers (labelled `quicbed`), UML and QEMU routers and delay
lines (found by their `umid=quicbed-` or `-name quicbed-vm-` argument and binary name) that keep
the router namespace alive, Mininet shells, processes started inside those namespaces, veths
half-made in the root namespace, and probe namespaces. Every command the testbed sends into a
namespace carries the QUICBED_TESTBED mark in its environment (topology/marker.py), so a helper
is found even in a namespace that has no name and no other process left.

With QUICBED_SCOPE set (the test suite sets one per session; topology/marker.py), clean and
leftovers see only what was started under that scope: a user's lab or run on the same host is
left alone. Probe namespaces, which live for a moment and carry no scope, are then left too.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from quicbed.paths import STATE
from quicbed.topology.backends import DELAYLINE_MARK, UML_MARK, VM_MARK
from quicbed.topology.hosts import LABEL
from quicbed.topology.marker import (
    dir_in_scope,
    in_scope,
    marked_processes,
    scope,
    this_process_and_ancestors,
)

NODE_NAMES = ("client", "cross", "router", r"server\d*")
_VETH = re.compile(rf"^({'|'.join(NODE_NAMES)})-eth\d+$")
_SHELL = re.compile(rf"mininet:({'|'.join(NODE_NAMES)})$")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
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
    return any(mark in cmdline for mark in (UML_MARK, VM_MARK, DELAYLINE_MARK)) or bool(
        _SHELL.search(cmdline)
    )


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


def clean() -> list[str]:
    wanted = scope()
    removed: list[str] = []
    removed += _remove_containers(_container_label(wanted))
    killed, umids = _kill(testbed_processes())
    removed += killed
    removed += _remove_root_veths()
    if wanted is None:
        removed += _remove_netns()
        umids |= {p.name for p in (Path.home() / ".uml").glob("quicbed-*")}
    _remove_uml_dirs(umids)
    for state in ("runs", "labs"):
        for directory in (STATE / state).glob("*"):
            if dir_in_scope(directory, wanted):
                shutil.rmtree(directory, ignore_errors=True)
    return removed


def _container_label(wanted: str | None) -> str:
    return f"{LABEL}.scope={wanted}" if wanted is not None else LABEL


def clean_testbed(run_id: str, owner: int | None = None, netns: tuple[str, ...] = ()) -> list[str]:
    """Remove one testbed (a lab) and leave every other alone: its containers (labelled with
    its run id), the processes that name it (its UML router or delay lines, whose control
    files are under STATE/runs/RUN_ID, and the `docker exec` shells of its containers), the
    helpers its owner process marked, and everything in its nodes' namespaces."""
    removed = _remove_containers(f"{LABEL}.run={run_id}")
    names = (f"/runs/{run_id}/", f"quicbed-{run_id}-")
    pids = _pids()
    ours = {pid for pid in pids if any(n in _cmdline(pid) for n in names)}
    if owner is not None:
        ours |= set(marked_processes(owner))
    namespaces = ({_netns(pid) for pid in ours} | set(netns)) - {None, _netns(1), _netns("self")}
    ours |= {pid for pid in pids if _netns(pid) in namespaces}
    killed, umids = _kill(sorted(ours - this_process_and_ancestors() - {owner}))
    removed += killed
    _remove_uml_dirs(umids)
    shutil.rmtree(STATE / "runs" / run_id, ignore_errors=True)
    return removed


def _kill(pids: list[int]) -> tuple[list[str], set[str]]:
    """SIGKILL each; what was killed, and the UML ids (umid=) their command lines named."""
    removed, umids = [], set()
    for pid in pids:
        what = _cmdline(pid)  # before the kill: afterwards it is gone
        umids.update(re.findall(r"umid=(quicbed-\S+)", what))
        try:
            os.kill(pid, signal.SIGKILL)
            removed.append(f"process {pid} ({what[:60] or '?'})")
        except ProcessLookupError:
            pass
    return removed, umids


def _remove_uml_dirs(umids: set[str]) -> None:
    for umid in umids:
        shutil.rmtree(Path.home() / ".uml" / umid, ignore_errors=True)


def _remove_containers(label: str = LABEL) -> list[str]:
    if not shutil.which("docker"):
        return []
    proc = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True
    )
    ids = proc.stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    return [f"container {cid}" for cid in ids]


def _remove_root_veths() -> list[str]:
    proc = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    removed = []
    for line in proc.stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if _VETH.match(name):
            subprocess.run(["ip", "link", "del", name], capture_output=True)
            removed.append(f"link {name}")
    return removed


def _remove_netns() -> list[str]:
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    removed = []
    for line in proc.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith("quicbed-"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            removed.append(f"netns {name}")
    return removed


def leftovers() -> list[str]:
    """What clean would remove now (for tests and the before-exit check)."""
    found = [
        f"process {pid}"
        for pid in testbed_processes()
        if Path(f"/proc/{pid}/stat").exists() and _state(pid) != "Z"
    ]
    wanted = scope()
    proc = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={_container_label(wanted)}"],
        capture_output=True,
        text=True,
    )
    found += [f"container {cid}" for cid in proc.stdout.split()]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [
        f"link {ln.split(':')[1].strip()}"
        for ln in links.splitlines()
        if _VETH.match(ln.split(":")[1].strip().split("@")[0])
    ]
    if wanted is None:
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        found += [f"netns {ln.split()[0]}" for ln in netns.splitlines() if ln.startswith("quicbed-")]
    return found


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"
