"""Commands quicbed runs on the host, each with a bound on how long it may take.

quicbed runs as root and waits on what it starts: a hung `ip` (a netlink lock held by a stuck
namespace), a compiler or a probe of a guest kernel would otherwise hold a run, or a clean, for
ever. Each call names its bound; past it the command is killed and HostProblem raised with one
line that names the command and the bound (clean-up goes on past one: topology/clean.py).
"""

from __future__ import annotations

import subprocess

from quicbed.errors import HostProblem
from quicbed.limits import TooBig, run_capped

# `ip` and `tc` answer in milliseconds; seconds mean a netlink or namespace lock is held.
IP_TIMEOUT_S = 30.0
# A one-file C build (the delay line) takes about a second; a cold, busy host some more.
BUILD_TIMEOUT_S = 300.0
# modprobe --show-depends and qemu --version read files; they never need more than seconds.
PROBE_TIMEOUT_S = 60.0


def host_run(argv: list[str], timeout: float, *, check: bool = False) -> subprocess.CompletedProcess[str]:
    """subprocess.run(argv, capture_output=True, text=True) within `timeout` seconds, through
    limits.run_capped: past the bound the command's whole process group is killed and
    HostProblem raised; output is capped as a tool's is. check=True raises CalledProcessError on
    a nonzero exit, as run's does."""
    try:
        proc = run_capped(argv, timeout)
    except subprocess.TimeoutExpired:
        raise HostProblem(
            f"`{_shown(argv)}` did not finish within {timeout:g} s; killed (is the host hung?)"
        ) from None
    except TooBig as e:
        raise HostProblem(f"`{_shown(argv)}` {e}") from None
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc


def _shown(argv: list[str]) -> str:
    shown = " ".join(argv)
    return shown if len(shown) <= 120 else shown[:117] + "..."
