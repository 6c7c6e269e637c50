"""The host's CPU contention: how long runnable tasks waited for a CPU.

The kernel's pressure stall information (/proc/pressure/cpu, "some") counts the microseconds
in which at least one runnable task waited. Over a trial it says whether the trial shared
the host's cores with other work; the trial's own containers' CPU share (the executor's
cpu_*_pct) cannot, since a neighbour's load is not theirs. Read by the executor (a row's
host_cpu_wait_pct) and the tests' re-measurement (tests/contention.py).
"""

from __future__ import annotations

from pathlib import Path

PSI_CPU = Path("/proc/pressure/cpu")
# Above this share of its wall time with a task waiting for a CPU, a trial's timing says as
# much about the host as about the path (tests/contention.py uses the same limit).
CONTENDED_WAIT = 0.25


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
