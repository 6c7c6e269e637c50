"""The host's CPU contention, two ways.

- Over a whole measurement (tests/contention.py): the kernel's pressure stall information
  (/proc/pressure/cpu, "some") counts the microseconds in which a runnable task waited for a
  CPU. It rises with a CPU-heavy measurement's neighbours.
- Over one trial (the executor's host_cpu_other_pct): the CPU the host spent on anything but
  the trial's client and server containers (/proc/stat less their cgroups). A short trial's
  tasks mostly sleep; when they wake, the scheduler runs them soon, so PSI barely moves
  (8–16 % of a handshake trial's wall time with a busy neighbour core, 6–11 % without) while
  the neighbour still delays them by a millisecond or two. The busy time moves: a CPU hog
  beside india handshakes measured 1.1 cores of other work, 0.2 without it.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable
from pathlib import Path

from quicbed.dockercli import docker

PSI_CPU = Path("/proc/pressure/cpu")
PROC_STAT = Path("/proc/stat")
# Above this share of its wall time with a task waiting for a CPU, a measurement's timing says
# as much about the host as about the path (tests/contention.py).
CONTENDED_WAIT = 0.25
# Above this much other work (% of one core), a trial shared the host: the link's own router
# and the executor's polling take about 20 %, a neighbour that spins takes 100 %.
CONTENDED_OTHER_PCT = 50.0


def cpu_wait_us() -> int | None:
    """The host's total "some" CPU stall so far (µs), or None where the kernel keeps none."""
    try:
        first = PSI_CPU.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    try:
        return int(first.rsplit("total=", 1)[1])
    except (IndexError, ValueError):
        return None


def wait_share(before_us: int | None, after_us: int | None, wall_s: float) -> float | None:
    """The share of wall_s in which a runnable task waited, from two cpu_wait_us readings."""
    if before_us is None or after_us is None or wall_s <= 0:
        return None
    return min(max((after_us - before_us) / 1e6 / wall_s, 0.0), 1.0)


def cpu_jiffies() -> list[int] | None:
    """The host's CPU time so far, as /proc/stat's first line counts it: user, nice, system,
    idle, iowait, irq, softirq, steal (older kernels stop sooner); None where unreadable."""
    try:
        fields = [int(v) for v in PROC_STAT.read_text().splitlines()[0].split()[1:9]]
    except (OSError, IndexError, ValueError):
        return None
    return fields if len(fields) >= 5 else None


def cpu_times() -> tuple[int, int] | None:
    """(busy, all) jiffies of the host's CPUs so far; steal counts as busy (someone else ran)."""
    fields = cpu_jiffies()
    if fields is None:
        return None
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


def busy_pct(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The host's busy CPU between two cpu_times readings, in % of one core (all cores
    summed, like the containers' cpu_*_pct: 200 % is two busy cores)."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    share = (after[0] - before[0]) / (after[1] - before[1])
    return min(max(share, 0.0), 1.0) * 100 * (os.cpu_count() or 1)


def contended(row: dict) -> bool:
    """A trial that shared the host: CPU-bound, or other work beyond CONTENDED_OTHER_PCT."""
    other = row.get("host_cpu_other_pct")
    return bool(row.get("cpu_bound")) or (other is not None and other > CONTENDED_OTHER_PCT)


@functools.cache
def _cpu_stat_file(container: str) -> Path | None:
    """The container's cgroup CPU accounting file, found once through its init's cgroup."""
    proc = docker("inspect", "-f", "{{.State.Pid}}", container)
    try:
        lines = Path(f"/proc/{int(proc.stdout)}/cgroup").read_text().splitlines()
    except (ValueError, OSError):
        return None
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0":  # cgroup v2
            return Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.stat"
        if "cpuacct" in controllers.split(","):
            return Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/") / "cpuacct.usage"
    return None


def container_cpu_us(container: str) -> float:
    """CPU time the container's cgroup has used (µs), from cgroup v2 or v1 accounting."""
    path = _cpu_stat_file(container)
    if path is None or not path.exists():
        return 0.0
    if path.name == "cpuacct.usage":
        return float(path.read_text()) / 1000
    for line in path.read_text().splitlines():
        if line.startswith("usage_usec"):
            return float(line.split()[1])
    return 0.0


class OtherWork:
    """Over a `with` block: each named container's CPU (`own_pct`) and the host's CPU beyond
    them (`other_pct`, None where /proc/stat is unreadable), in % of one core, and the wall
    time (`wall_s`). The executor's rows and the timing tests read a trial's neighbours alike."""

    def __init__(self, containers: Iterable[str]):
        self.containers = list(containers)
        self.own_pct: dict[str, float] = {}
        self.other_pct: float | None = None
        self.wall_s = 0.0

    def __enter__(self) -> OtherWork:
        self._own = {c: container_cpu_us(c) for c in self.containers}
        self._machine = cpu_times()
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = max(time.monotonic() - self._start, 1e-6)
        machine = busy_pct(self._machine, cpu_times())
        self.own_pct = {c: (container_cpu_us(c) - us) / 1e4 / self.wall_s for c, us in self._own.items()}
        if machine is not None:
            self.other_pct = max(machine - sum(self.own_pct.values()), 0.0)
