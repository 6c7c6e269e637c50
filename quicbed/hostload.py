"""The host's CPU contention, and whether a timing measurement may be judged on it.

- Over a whole measurement (`LoadMeter`, `Load`): contention is any of
  - CPU steal (/proc/stat's steal) as a share of the NON-IDLE CPU time, over STEAL_LIMIT: a
    share of all jiffies would let a mostly idle VM dilute a heavy spell (`steal_share`);
  - the kernel's pressure stall information (/proc/pressure/cpu, "some": the share of the
    time in which a runnable task waited for a CPU; sampled run queue where the kernel has
    none) over CONTENDED_WAIT. It rises with a CPU-heavy measurement's neighbours;
  - the measurement's own CPU-bound flag, or the host's CPU beyond the containers it names
    (`OtherWork`) over CONTENDED_OTHER_PCT;
  - a slow spell: a fixed small probe (fresh processes, first-touched memory;
    `slow_spell_probe_s`) taking SLOW_SPELL_LIMIT times its best on this host or more. A
    cloud VM has spells in which exactly that costs 3-4x what it did, with steal near 0, so
    neither steal nor PSI sees them.
- Over one trial (the executor's host_cpu_other_pct, `OtherWork`, `contended(row)`): the CPU
  the host spent on anything but the trial's client and server containers (/proc/stat less
  their cgroups). A short trial's tasks mostly sleep; when they wake, the scheduler runs them
  soon, so PSI barely moves (8-16 % of a handshake trial's wall time with a busy neighbour core,
  6-11 % without) while the neighbour still delays them by a millisecond or two. The busy time
  moves: a CPU hog beside india handshakes measured 1.1 cores of other work, 0.2 without it.
- Before measuring again (`wait_for_calm`): consecutive windows of the host's steal, pressure,
  busy CPU and probe, until one is calm or the wait's limit passes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import mmap
import os
import secrets
import stat
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from subprocess import DEVNULL

from quicbed.dockercli import docker

PSI_CPU = Path("/proc/pressure/cpu")
PROC_STAT = Path("/proc/stat")
# Above this share of its wall time with a task waiting for a CPU, a measurement's timing says
# as much about the host as about the path (tests/contention.py).
CONTENDED_WAIT = 0.25
# Above this much other work (% of one core), a trial shared the host: the link's own router
# and the executor's polling take about 20 %, a neighbour that spins takes 100 %.
CONTENDED_OTHER_PCT = 50.0
# Above this share of the non-idle CPU time stolen by the hypervisor, someone else ran on our
# cores while we measured (steal_share).
STEAL_LIMIT = 0.05
# At or above this ratio of the slow-spell probe's time to its best on this host, fresh
# processes and first-touched memory cost what they do in a slow spell: a calm host's probe
# stays within 1.6x of its best (80 probes on a calm 2-core EPYC VM: 9 in 10 under 1.4x), a
# spell makes it 3-4x.
SLOW_SPELL_LIMIT = 2.0
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
CPUINFO = Path("/proc/cpuinfo")
PROBE_BEST_FILE = "probe-best.json"  # under $QUICBED_CACHE/hostload


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


def steal_share(before: Sequence[int] | None, after: Sequence[int] | None) -> float | None:
    """The share of the NON-IDLE CPU time (user, nice, system, irq, softirq, steal; not idle or
    iowait) that the hypervisor stole between two cpu_jiffies readings; None without both
    readings or without a tick between them. Pure: the caller reads /proc/stat.

    Of all jiffies, a heavy spell on a mostly idle VM reads as almost nothing; of the non-idle
    ones it reads as what it took from the work that ran. But a nearly idle window has few
    non-idle jiffies, and 1 stolen of 2 busy ones is a tick's rounding, not a 50 % spell: the
    divisor is floored at a tenth of the window's jiffies. A busy window is above the floor;
    in an idle one, steal of more than 0.5 % of the whole window (STEAL_LIMIT of the floor)
    still reads as a spell."""
    if before is None or after is None or len(before) < 5 or len(after) < 5:
        return None
    deltas = [max(b - a, 0) for a, b in zip(before, after, strict=False)]
    total = sum(deltas)
    if total <= 0:
        return None
    stolen = deltas[7] if len(deltas) > 7 else 0
    busy = total - deltas[3] - deltas[4]  # less idle and iowait
    return min(stolen / max(busy, 0.1 * total), 1.0)


def busy_pct(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The host's busy CPU between two cpu_times readings, in % of one core (all cores
    summed, like the containers' cpu_*_pct: 200 % is two busy cores)."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    share = (after[0] - before[0]) / (after[1] - before[1])
    return min(max(share, 0.0), 1.0) * 100 * (os.cpu_count() or 1)


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
        # Steal of the non-idle CPU time over the block (steal_share): recorded with a trial's
        # row, so a run says what the hypervisor took while it measured. A short trial spans
        # few jiffies (10 ms each), so one trial's figure is coarse; a condition's are not.
        self.steal: float | None = None
        self.wall_s = 0.0

    def __enter__(self) -> OtherWork:
        self._own = {c: container_cpu_us(c) for c in self.containers}
        self._machine = cpu_times()
        self._jiffies = cpu_jiffies()
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = max(time.monotonic() - self._start, 1e-6)
        self.steal = steal_share(self._jiffies, cpu_jiffies())
        machine = busy_pct(self._machine, cpu_times())
        self.own_pct = {c: (container_cpu_us(c) - us) / 1e4 / self.wall_s for c, us in self._own.items()}
        if machine is not None:
            self.other_pct = max(machine - sum(self.own_pct.values()), 0.0)


# --- the slow-spell probe ----------------------------------------------------------------

PROBE_SPAWNS = 4  # fresh processes per repetition
PROBE_BYTES = 8 << 20  # fresh anonymous memory per repetition, first-touched a page at a time
PROBE_REPEATS = 3  # the median of these: one preempted repetition does not make a spell
_best_lock = threading.Lock()
_process_best: float | None = None  # this process's fastest probe


def _probe_once() -> float:
    start = time.perf_counter()
    for _ in range(PROBE_SPAWNS):  # no shell: one fork/exec each, what a slow spell slows
        subprocess.run(["/bin/true"], stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL, check=True, timeout=10)
    # private and anonymous, as a fresh process's heap: each first write faults a zeroed page in
    with mmap.mmap(-1, PROBE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as memory:
        for offset in range(0, PROBE_BYTES, mmap.PAGESIZE):
            memory[offset] = 1
    return time.perf_counter() - start


def slow_spell_probe_s() -> float:
    """A fixed small piece of the work a slow spell slows (seconds): 4 runs of /bin/true and
    8 MiB of fresh memory written one byte per page, the median of 3 repetitions. Measured on
    a calm 2-core AMD EPYC VM: 6.5-9 ms a repetition (the spawns and the memory about half
    each), 21-32 ms a call of slow_spell_ratio (median 29 ms); more in a spell. Raises OSError
    or subprocess.SubprocessError where it cannot run."""
    return statistics.median(_probe_once() for _ in range(PROBE_REPEATS))


def _host_key() -> dict[str, str] | None:
    """What a stored best belongs to: this boot (a VM may wake on another host) and CPU model."""
    try:
        boot = BOOT_ID.read_text().strip()
        lines = CPUINFO.read_text().splitlines()
    except OSError:
        return None
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "")
    return {"boot_id": boot, "cpu": model}


def _best_dir(create: bool) -> int | None:
    """An fd of $QUICBED_CACHE/hostload, or None. Never through a symlink: this runs as root."""
    directory = Path(os.environ.get("QUICBED_CACHE", "/var/cache/quicbed")) / "hostload"
    try:
        if create and not os.path.lexists(directory):
            directory.mkdir(parents=True, exist_ok=True)
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None


def _stored_best(dir_fd: int, key: dict[str, str]) -> float | None:
    """The best probe stored for this boot and CPU; None for anything else (missing, another
    boot, malformed, a symlink, not a regular file: O_NONBLOCK so a FIFO cannot hang us)."""
    try:
        fd = os.open(PROBE_BEST_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = json.loads(os.read(fd, 4096))
    except (OSError, ValueError):  # ValueError: bad JSON or bad UTF-8
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or any(data.get(k) != v for k, v in key.items()):
        return None
    best = data.get("best_s")
    if isinstance(best, bool) or not isinstance(best, int | float) or not 1e-4 <= best <= 10:
        return None  # no probe runs in under 0.1 ms, and one over 10 s is no best
    return float(best)


def _store_best(dir_fd: int, key: dict[str, str], best_s: float) -> None:
    """Atomically (a fresh temporary file renamed over it): a reader never sees half a file,
    and a symlink planted at the name is replaced, not followed."""
    tmp = f".{PROBE_BEST_FILE}.{secrets.token_hex(6)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "w") as out:
            json.dump({**key, "best_s": best_s}, out)
        os.replace(tmp, PROBE_BEST_FILE, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)


def _ratio_to_best(probe_s: float) -> float:
    """probe_s over the best of this process's probes (this one included) and the host's
    stored best; the stored best lowered when this process beats it."""
    global _process_best
    with _best_lock:
        _process_best = probe_s if _process_best is None else min(_process_best, probe_s)
        best = _process_best
    key = _host_key()
    dir_fd = _best_dir(create=True) if key is not None else None
    if dir_fd is None or key is None:
        return probe_s / best
    try:
        stored = _stored_best(dir_fd, key)
        if stored is None or best < stored:
            _store_best(dir_fd, key, best)
        return probe_s / min(best, stored if stored is not None else best)
    finally:
        os.close(dir_fd)


def slow_spell_ratio() -> float | None:
    """The slow-spell probe's time over its best on this host (1.0 when it is the best), or
    None when the probe cannot run. At or above SLOW_SPELL_LIMIT, the host is in a slow spell.
    The best: this process's fastest probe and the one stored for this boot and CPU model in
    $QUICBED_CACHE/hostload/probe-best.json (a process's first probe has only the stored one
    to go by)."""
    try:
        probe_s = slow_spell_probe_s()
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return _ratio_to_best(probe_s)


# --- a measurement's load ------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """The host while a measurement ran."""

    seconds: float
    steal: float  # share of the non-idle CPU time stolen by the hypervisor (steal_share)
    pressure: float  # share of wall time with a task waiting for a CPU
    cpu_bound: bool = False
    other_pct: float | None = None  # the host's CPU beyond the measured containers (% of a core)
    slow_ratio: float | None = None  # the slow-spell probe over its best (slow_spell_ratio)
    # The pressure is the measured work's own (a fresh browser's processes wait for each other
    # on two cores: about 42 % of a page load) and so part of what is measured, not a
    # neighbour: reported, not counted. Steal, slow spells and others' CPU still count.
    own_pressure: bool = False

    @property
    def contended(self) -> bool:
        busy = self.other_pct is not None and self.other_pct > CONTENDED_OTHER_PCT
        slow = self.slow_ratio is not None and self.slow_ratio >= SLOW_SPELL_LIMIT
        waited = self.pressure > CONTENDED_WAIT and not self.own_pressure
        return self.steal > STEAL_LIMIT or waited or self.cpu_bound or busy or slow

    def describe(self) -> str:
        """One line: the verdict, then every figure with its limit."""
        state = "contended" if self.contended else "uncontended"
        line = (
            f"{state}: CPU waited {self.pressure:.0%} of {self.seconds:.1f} s "
            + ("(its own work's, not counted)" if self.own_pressure else f"(limit {CONTENDED_WAIT:.0%})")
            + f", steal {self.steal:.1%} of busy CPU (limit {STEAL_LIMIT:.0%}), "
            f"cpu-bound {'yes' if self.cpu_bound else 'no'}"
        )
        if self.other_pct is not None:
            line += f", other work {self.other_pct:.0f} % of a core (limit {CONTENDED_OTHER_PCT:.0f})"
        if self.slow_ratio is not None:
            line += f", slow-spell probe {self.slow_ratio:.1f}× its best (limit {SLOW_SPELL_LIMIT:.1f}×)"
        return line

    def to_dict(self) -> dict:
        """The figures, rounded, and the verdict: for manifests and rows."""
        return {
            "seconds": round(self.seconds, 2),
            "steal": round(self.steal, 4),
            "pressure": round(self.pressure, 4),
            "own_pressure": self.own_pressure,
            "cpu_bound": self.cpu_bound,
            "other_pct": None if self.other_pct is None else round(self.other_pct, 1),
            "slow_ratio": None if self.slow_ratio is None else round(self.slow_ratio, 2),
            "contended": self.contended,
        }


def _worst(*ratios: float | None) -> float | None:
    seen = [r for r in ratios if r is not None]
    return max(seen) if seen else None


class LoadMeter:
    """The host's contention over a `with` block; `.load` is its Load after the block.

    Steal (of the non-idle time) and pressure cover the block alone. The slow-spell probe runs
    just before the block and just after it, outside the figures (its processes are not the
    measurement's load, and the measurement's load is not in its time), and the worse of the
    two counts: a spell long enough to slow a measurement covers one of its ends, and the two
    probes cost some 60 ms against a measurement of seconds. `own`: the containers the
    measurement runs in; the host's CPU beyond them is other work (OtherWork)."""

    def __init__(
        self,
        own: Iterable[str] = (),
        *,
        probe: Callable[[], float | None] = slow_spell_ratio,
        own_pressure: bool = False,
    ) -> None:
        self.load: Load | None = None
        self._own_pressure = own_pressure  # Load.own_pressure
        self._probe = probe
        self._work = OtherWork(own) if own else None
        self._stack = contextlib.ExitStack()  # the host's other work, where `own` names containers
        self._queued = 0
        self._samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LoadMeter:
        self._ratio_before = self._probe()
        self._start = time.monotonic()
        self._jiffies = cpu_jiffies()
        self._psi = cpu_wait_us()
        if self._work:
            self._stack.enter_context(self._work)
        if self._psi is None:  # no PSI in this kernel: sample the run queue instead
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        cores = os.cpu_count() or 1
        while not self._stop.wait(0.05):
            try:
                text = PROC_STAT.read_text()
                running = int(text.split("procs_running ", 1)[1].split()[0]) - 1  # not this reader
            except (OSError, IndexError, ValueError):
                return
            self._samples += 1
            self._queued += running > cores

    def __exit__(self, *exc: object) -> None:
        seconds = max(time.monotonic() - self._start, 1e-6)
        self._stack.close()  # the other work's figures end where this block's do
        other = self._work.other_pct if self._work else None
        steal = steal_share(self._jiffies, cpu_jiffies()) or 0.0
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            pressure = self._queued / max(self._samples, 1)
        else:
            pressure = wait_share(self._psi, cpu_wait_us(), seconds) or 0.0
        slow = _worst(self._ratio_before, self._probe())
        self.load = Load(
            round(seconds, 2),
            steal,
            min(max(pressure, 0.0), 1.0),
            other_pct=other,
            slow_ratio=slow,
            own_pressure=self._own_pressure,
        )


# --- waiting for a calm host ---------------------------------------------------------------


def measure_window(window_s: float) -> Load:
    """The host over window_s of doing nothing: steal, pressure, the probe (LoadMeter), and
    all of its busy CPU as other work, since nothing of ours runs in the window."""
    with LoadMeter() as meter, OtherWork([]) as work:
        time.sleep(window_s)
    assert meter.load is not None
    return dataclasses.replace(meter.load, other_pct=work.other_pct)


# Steal on a cloud VM comes in spells (seen: 0-40 % of a 10 s window, spells minutes apart):
# one calm 2 s window between two bursts predicted nothing. In CI (stop 68) re-measurements
# begun after 2-4 s of calm saw 8 % and 37 % steal again, and 17 of 104 checks went unjudged.
# So the wait ends after CALM_S of calm windows in a row, the scale of a spell's window.
CALM_S = 10.0
CALM_MAX_WAIT_S = 120.0


def wait_for_calm(
    window_s: float = 2.0,
    max_wait_s: float = CALM_MAX_WAIT_S,
    say: Callable[[str], None] = lambda _m: None,
    *,
    calm_s: float = CALM_S,
    measure_window: Callable[[float], Load] = measure_window,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[bool, Load]:
    """Windows of window_s, one after the other, until calm_s of them in a row were calm (each
    Load uncontended) or max_wait_s has passed: (calm reached, the last window's Load). `say`
    gets a line when the wait starts and one when it ends. The measurer and clock are
    parameters so that recorded figures can stand in for the host."""
    start = clock()
    say(
        f"waiting for a calm host: {calm_s:.0f} s of calm windows of {window_s:.0f} s in a row, "
        f"at most {max_wait_s:.0f} s"
    )
    needed = max(1, round(calm_s / window_s))
    in_a_row = 0
    while True:
        load = measure_window(window_s)
        waited = clock() - start
        in_a_row = 0 if load.contended else in_a_row + 1
        if in_a_row >= needed or waited >= max_wait_s:
            break
    calm = in_a_row >= needed
    state = "calm" if calm else f"not calm for {calm_s:.0f} s in a row"
    say(f"{state} after {waited:.0f} s (last window: {load.describe()})")
    return calm, load
