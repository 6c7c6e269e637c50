"""The mark on every process the testbed starts from the host into a node's namespace.

A command sent into a node with `nsenter -t PID -n` stays in the host's PID namespace and
cgroup: removing the node's container does not end it, and once its network namespace has lost
every name and every other process, nothing says it is ours (a calibration's `iperf3 -s`
outlived its container by 1.5 hours, and `quicbed clean` found "nothing left"). So each such
command runs as `env QUICBED_TESTBED=<pid of the quicbed process> ...`: the variable is
inherited by whatever it starts, survives in /proc/<pid>/environ whatever namespace the
process is in, and names the process that owns it.

No Mininet import here: the CLI's after-run sweep uses this without the topology.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

MARK = "QUICBED_TESTBED"
# Whoever sets QUICBED_SCOPE (the test suite: one value per session) owns what is started
# under it: processes inherit the variable, containers carry it as a label, state directories
# as a file, and `clean` and `leftovers` then see only that scope (topology/clean.py).
SCOPE = "QUICBED_SCOPE"
SCOPE_FILE = "scope"


def marked_argv(argv: Sequence[str], owner: int | None = None) -> list[str]:
    """`argv` run through env(1) with the mark; env execs it, so the pid stays the same."""
    return ["env", f"{MARK}={owner if owner is not None else os.getpid()}", *argv]


def mark_of(pid: int | str, environ: bytes | None = None) -> str | None:
    """The owner a process is marked with ("" if the value is empty), or None if unmarked."""
    return environ_value(pid, MARK, environ)


def environ_value(pid: int | str, name: str, environ: bytes | None = None) -> str | None:
    """A variable of a process's environment, or None if it has none (or is gone)."""
    if environ is None:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # gone, a kernel thread, or not ours to read
            return None
    entry_start = name.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(entry_start):
            return entry[len(entry_start) :].decode(errors="replace")
    return None


def scope() -> str | None:
    """This process's scope (QUICBED_SCOPE), or None: then clean sees everything."""
    return os.environ.get(SCOPE) or None


def in_scope(pid: int | str, wanted: str | None) -> bool:
    return wanted is None or environ_value(pid, SCOPE) == wanted


def mark_scope(directory: Path) -> None:
    """Say which scope a state directory belongs to (nothing to say without one)."""
    if (wanted := scope()) is not None:
        (directory / SCOPE_FILE).write_text(wanted)


def dir_in_scope(directory: Path, wanted: str | None) -> bool:
    if wanted is None:
        return True
    try:
        return (directory / SCOPE_FILE).read_text() == wanted
    except OSError:
        return False


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def this_process_and_ancestors() -> set[int]:
    """Never ours to kill, even if marked (a `quicbed clean` typed in a marked shell)."""
    pids, pid = set(), os.getpid()
    while pid > 0 and pid not in pids:
        pids.add(pid)
        pid = _parent(pid)
    return pids


def marked_processes(owner: int | None = None) -> list[int]:
    """Every marked process of this scope, or only those `owner` started; never this one or
    its ancestors."""
    spared, wanted = this_process_and_ancestors(), scope()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in spared:
            continue
        mark = mark_of(name)
        if mark is not None and (owner is None or mark == str(owner)) and in_scope(name, wanted):
            found.append(int(name))
    return sorted(found)


def kill_own_helpers() -> list[str]:
    """SIGKILL what this process started in namespaces and is still running (the teardown
    should have ended it); returns their command lines, for a warning."""
    killed = []
    for pid in marked_processes(owner=os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, FileNotFoundError):
            continue
        killed.append(f"{pid} {cmdline.decode(errors='replace').strip()[:80]}")
    return killed
