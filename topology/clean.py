"""Remove everything the testbed made, even after `kill -9` of a run.

What a run leaves when killed: containers (labelled `quicbed`), UML routers and delay lines
(found by their `umid=quicbed-` argument and binary name) that keep the router namespace
alive, Mininet shells, processes started inside those namespaces, veths half-made in the root
namespace, and probe namespaces.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from quicbed.paths import STATE
from quicbed.topology.backends import DELAYLINE_MARK, UML_MARK
from quicbed.topology.hosts import LABEL

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
    return UML_MARK in cmdline or DELAYLINE_MARK in cmdline or bool(_SHELL.search(cmdline))


def testbed_processes() -> list[int]:
    """UML routers and Mininet shells of the testbed, and every process sharing their netns."""
    # The host's namespace is never a testbed's: Docker hosts' shells (`docker exec`) live in
    # it. PID 1's link is not readable everywhere (a Firecracker init here), so ours counts too.
    host_namespaces = {None, _netns(1), _netns("self")}
    marked = [pid for pid in _pids() if _is_testbed_process(_cmdline(pid))]
    namespaces = {_netns(pid) for pid in marked} - host_namespaces
    in_ns = [pid for pid in _pids() if _netns(pid) in namespaces]
    return sorted(set(marked) | set(in_ns) - {os.getpid()})


def clean() -> list[str]:
    removed: list[str] = []
    removed += _remove_containers()
    for pid in testbed_processes():
        try:
            os.kill(pid, signal.SIGKILL)
            removed.append(f"process {pid} ({_cmdline(pid)[:60] or '?'})")
        except ProcessLookupError:
            pass
    removed += _remove_root_veths()
    removed += _remove_netns()
    for path in (Path.home() / ".uml").glob("quicbed-*"):
        shutil.rmtree(path, ignore_errors=True)
    if (STATE / "runs").exists():
        shutil.rmtree(STATE / "runs", ignore_errors=True)
    return removed


def _remove_containers() -> list[str]:
    if not shutil.which("docker"):
        return []
    proc = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}"],
                          capture_output=True, text=True)
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
    found = [f"process {pid}" for pid in testbed_processes()
             if Path(f"/proc/{pid}/stat").exists() and _state(pid) != "Z"]
    proc = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}"],
                          capture_output=True, text=True)
    found += [f"container {cid}" for cid in proc.stdout.split()]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"link {ln.split(':')[1].strip()}" for ln in links.splitlines()
              if _VETH.match(ln.split(":")[1].strip().split("@")[0])]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {ln.split()[0]}" for ln in netns.splitlines()
              if ln.startswith("quicbed-")]
    return found


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"
