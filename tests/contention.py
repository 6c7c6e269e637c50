"""A busy CPU is re-measured, not judged.

A timing check measures, then judges. When the host was contended while it measured, the
measurement says as much about the CPU as about the path, so it is neither passed nor failed:
the check measures again, once, and says so with the figures. Contention is any of:
- CPU steal: the hypervisor ran someone else on our cores (/proc/stat's steal);
- a run queue longer than the cores: the share of the time in which some runnable task
  waited for a CPU (the kernel's pressure stall information, /proc/pressure/cpu "some"; where
  the kernel has none, /proc/stat's procs_running sampled against the cores);
- the trial's own CPU-bound flag (the rows' `cpu_bound`);
- where the check names the containers it measures (`own`): the host's CPU beyond them above
  hostload.CONTENDED_OTHER_PCT, as a run's rows judge it (a short trial's tasks mostly sleep, so
  PSI barely moves while a busy neighbour core still delays them by a millisecond or two).
The second measurement is judged whatever it found, and a failure then names the contention
of both attempts: a check that fails on an uncontended host fails. Every attempt is printed,
and each re-measurement is listed at the end of the session (tests/tiers_plugin.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from quicbed import hostload

T = TypeVar("T")

STEAL_LIMIT = 0.05  # share of all CPU time taken by the hypervisor
PRESSURE_LIMIT = hostload.CONTENDED_WAIT  # share of wall time in which a task waited for a CPU
REMEASURE_ENV = "QUICBED_REMEASURES"  # tiers_plugin.py sets it: the session's list


@dataclass(frozen=True)
class Load:
    seconds: float
    steal: float  # share of CPU time stolen
    pressure: float  # share of wall time with a task waiting for a CPU
    cpu_bound: bool = False
    other_pct: float | None = None  # the host's CPU beyond the measured containers (% of a core)

    @property
    def contended(self) -> bool:
        busy = self.other_pct is not None and self.other_pct > hostload.CONTENDED_OTHER_PCT
        return self.steal > STEAL_LIMIT or self.pressure > PRESSURE_LIMIT or self.cpu_bound or busy

    def describe(self) -> str:
        state = "contended" if self.contended else "uncontended"
        return (
            f"{state}: CPU waited {self.pressure:.0%} of {self.seconds:.1f} s "
            f"(limit {PRESSURE_LIMIT:.0%}), steal {self.steal:.1%} (limit {STEAL_LIMIT:.0%}), "
            f"cpu-bound {'yes' if self.cpu_bound else 'no'}"
            + (
                ""
                if self.other_pct is None
                else f", other work {self.other_pct:.0f} % of a core "
                f"(limit {hostload.CONTENDED_OTHER_PCT:.0f})"
            )
        )


def _cpu_times() -> tuple[int, int]:
    """(steal, all) jiffies of the host's CPUs."""
    fields = hostload.cpu_jiffies() or [0]
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


class LoadMeter:
    """The host's contention over a `with` block."""

    def __init__(self, own: Iterable[str] = ()) -> None:
        self.load: Load | None = None
        self._work = hostload.OtherWork(own) if own else None
        self._stack = contextlib.ExitStack()  # the host's other work, where `own` names containers
        self._queued = 0
        self._samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LoadMeter:
        self._start = time.monotonic()
        self._cpu = _cpu_times()
        self._psi = hostload.cpu_wait_us()
        if self._work:
            self._stack.enter_context(self._work)
        if self._psi is None:  # no PSI in this kernel: sample the run queue instead
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        cores = os.cpu_count() or 1
        while not self._stop.wait(0.05):
            text = Path("/proc/stat").read_text()
            running = int(text.split("procs_running ", 1)[1].split()[0]) - 1  # not this reader
            self._samples += 1
            self._queued += running > cores

    def __exit__(self, *exc: object) -> None:
        seconds = max(time.monotonic() - self._start, 1e-6)
        self._stack.close()  # the other work's figures end where this block's do
        other = self._work.other_pct if self._work else None
        steal0, all0 = self._cpu
        steal1, all1 = _cpu_times()
        steal = (steal1 - steal0) / max(all1 - all0, 1)
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            pressure = self._queued / max(self._samples, 1)
        else:
            pressure = hostload.wait_share(self._psi, hostload.cpu_wait_us(), seconds) or 0.0
        self.load = Load(round(seconds, 2), max(steal, 0.0), min(max(pressure, 0.0), 1.0), other_pct=other)


def remeasured(
    what: str,
    measure: Callable[[], T],
    judge: Callable[[T], None],
    cpu_bound: Callable[[T], bool] = lambda _: False,
    own: Iterable[str] = (),
) -> T:
    """measure(), judged by judge() (which raises AssertionError) unless the host was contended
    while it measured; then measured once more and that one judged. Returns what was judged.
    `own`: the containers the measurement runs in; the host's CPU beyond them is contention."""
    loads: list[Load] = []
    for attempt in (1, 2):
        with LoadMeter(own) as meter:
            result = measure()
        assert meter.load is not None
        load = dataclasses.replace(meter.load, cpu_bound=bool(cpu_bound(result)))
        loads.append(load)
        print(f"{what}: attempt {attempt}: {load.describe()}")
        if load.contended and attempt == 1:
            _record(what, load)
            continue
        try:
            judge(result)
        except AssertionError as exc:
            if len(loads) > 1:
                raise AssertionError(
                    f"{exc} [judged on a re-measurement; attempts: "
                    + "; ".join(f"{i}: {x.describe()}" for i, x in enumerate(loads, 1))
                    + "]"
                ) from None
            raise
        return result
    raise AssertionError("unreachable")


def _record(what: str, load: Load) -> None:
    """One line in the session's list of re-measurements (printed at its end)."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    line = f"{test}: {what}: measured again, attempt 1 was {load.describe()}\n"
    target = os.environ.get(REMEASURE_ENV)
    if target:
        with open(target, "a") as log:
            log.write(line)
