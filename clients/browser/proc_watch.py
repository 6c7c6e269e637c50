"""What the browser's processes do, from /proc: which processes belong to one load (a marker in
their environment, the load's directory on their command line), their CPU, what limited the
load (cpu_limits), their sockets, and killing them all. Standard library only; shared by
every browser driver."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

TMP_PREFIX = "quicbed-browser-"
MARKER = "QUICBED_BROWSER_RUN"  # in the environment of every process of one load's browser
# A load is CPU-bound when a CPU limited it (README "CPU-bound"): the CPUs the browser may run
# on had (almost) no idle time over the load, or the container's CPU quota throttled it, or one
# of the browser's threads ran for (almost) the whole load (it was the critical path).
HOST_IDLE_MIN_PCT = 10.0  # of the allowed CPUs' time over the load
THREAD_BUSY_MAX_PCT = 90.0  # of the load's wall time, one thread
THROTTLED_MAX_PCT = 10.0  # of the load's wall time throttled by the cgroup's quota
CPU_CGROUP_STAT = ("/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpu/cpu.stat")  # cgroup v2, v1
CPU_SAMPLE_S = 0.5
HARD_GRACE_S = 10.0  # beyond --timeout: launch + collection + close, then the watchdog kills


@dataclass(frozen=True)
class CpuSnapshot:
    """What limits a load, read at its start and its end: the allowed CPUs' jiffies (all,
    idle), every browser thread's CPU and run-queue wait (ns), the cgroup's throttled time."""

    wall_s: float
    cpu_jiffies: tuple[int, int]
    threads: dict[tuple[int, int], tuple[str, int, int]]  # (pid, tid) -> (name, run ns, wait ns)
    throttled_ns: int | None
    kinds: dict[int, str] = field(default_factory=dict)  # pid -> its process kind (process_kind)


def cpu_limits(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, Any]:
    """The row's CPU columns from two snapshots, and cpu_bound: the allowed CPUs idle under
    HOST_IDLE_MIN_PCT of their time, or one browser thread busy over THREAD_BUSY_MAX_PCT of
    the wall time, or the quota throttling over THROTTLED_MAX_PCT of it."""
    wall_ms = max(1e-3, (after.wall_s - before.wall_s) * 1e3)
    d_all = after.cpu_jiffies[0] - before.cpu_jiffies[0]
    d_idle = after.cpu_jiffies[1] - before.cpu_jiffies[1]
    idle_pct = round(100.0 * d_idle / d_all, 1) if d_all > 0 else None
    busiest, busiest_ns, wait_ns = "", 0, 0
    for key, (name, run_ns, wait) in after.threads.items():
        run0, wait0 = before.threads.get(key, (name, 0, 0))[1:]  # a thread born in the load: all
        wait_ns += max(0, wait - wait0)
        if run_ns - run0 > busiest_ns:
            busiest, busiest_ns = name, run_ns - run0
    throttled_ms = None
    if after.throttled_ns is not None and before.throttled_ns is not None:
        throttled_ms = round((after.throttled_ns - before.throttled_ns) / 1e6, 1)
    busiest_pct = round(100.0 * busiest_ns / 1e6 / wall_ms, 1)
    by_process, by_thread = cpu_breakdown(before, after)
    bound = (
        (idle_pct is not None and idle_pct < HOST_IDLE_MIN_PCT)
        or busiest_pct >= THREAD_BUSY_MAX_PCT
        or (throttled_ms is not None and 100.0 * throttled_ms / wall_ms >= THROTTLED_MAX_PCT)
    )
    return {
        "host_idle_pct": idle_pct,
        "busiest_thread_pct": busiest_pct,
        "busiest_thread": busiest,
        "cpu_wait_ms": round(wait_ns / 1e6, 1),
        "cpu_throttled_ms": throttled_ms,
        "cpu_bound": bool(bound),
        "cpu_by_process": by_process,
        "cpu_top_threads": by_thread,
    }


TOP_THREADS = 6


def cpu_breakdown(before: CpuSnapshot, after: CpuSnapshot) -> tuple[dict[str, float], list[list[Any]]]:
    """Where the load's CPU went: ms on a CPU per process kind (process_kind: Chromium's
    browser, renderer, GPU and network-service processes; Firefox's by name), most first, and
    the TOP_THREADS busiest threads as [thread name, process kind, ms]. Threads born in the load
    count whole; threads gone before its end are not seen (their time is in browser_cpu_ms)."""
    by_process: dict[str, float] = {}
    threads: list[list[Any]] = []
    for key, (name, run_ns, _) in after.threads.items():
        ms = max(0, run_ns - before.threads.get(key, (name, 0, 0))[1]) / 1e6
        kind = after.kinds.get(key[0], "?")
        by_process[kind] = by_process.get(kind, 0.0) + ms
        threads.append([name, kind, ms])
    ordered = dict(sorted(((k, round(v, 1)) for k, v in by_process.items()), key=lambda kv: -kv[1]))
    top = sorted(threads, key=lambda t: -t[2])[:TOP_THREADS]
    return ordered, [[name, kind, round(ms, 1)] for name, kind, ms in top if ms > 0]


def process_kind(cmdline: list[str], comm: str) -> str:
    """A browser process's kind: Chromium's `--type` (`browser` without one), a utility's
    service by its sub-type (`utility:network` for network.mojom.NetworkService), else its name
    (Firefox's "Web Content", "Socket Process", "firefox-esr"...). Chromium's children set
    their title (setproctitle): the whole command line in one NUL-free string."""
    if len(cmdline) == 1:
        cmdline = cmdline[0].split(" ")
    args = dict(a[2:].split("=", 1) for a in cmdline[1:] if a.startswith("--") and "=" in a)
    kind = args.get("type")
    if kind is None:
        chromium = any(a.startswith("--user-data-dir") for a in cmdline) or "chrom" in comm
        return "browser" if chromium else comm
    if kind == "utility" and "utility-sub-type" in args:
        service = args["utility-sub-type"].split(".")[0]
        return f"utility:{service}"
    return kind


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def marked_pids(token: str) -> list[int]:
    """Every process of this load's browser: those whose environment carries the load's marker
    (the browser, its crashpad handlers even when reparented to init) or whose command line
    names the load's directory (Chromium starts its zygotes, utilities and renderers with an
    environment of its own, but with --user-data-dir), and all their descendants."""
    env_needle = f"{MARKER}={token}\0".encode()
    cmd_needle = f"/tmp/{token}".encode()
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        fields = _stat_fields(pid)
        if not fields or len(fields) < 2:
            continue
        parents[pid] = int(fields[1])
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if cmd_needle in f.read():
                    found.add(pid)
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if env_needle in f.read() + b"\0":
                    found.add(pid)
        except OSError:
            continue
    grown = True
    while grown:
        extra = {pid for pid, ppid in parents.items() if ppid in found and pid not in found}
        found |= extra
        grown = bool(extra)
    found.discard(os.getpid())
    return sorted(found)


# A fresh browser's start-up work (its spare renderer, network service, profile writes) would
# otherwise run inside the timed load: on 2 cores it made chromium-full CPU-bound in 8 of 8
# germany loads (bench/README.md). Before navigating, the load waits until a window of
# QUIET_WINDOW_S in which the browser's processes used at most QUIET_CPU_S (a tenth of a core,
# one clock tick at 100 Hz), or the cap (--settle).
QUIET_WINDOW_S = 0.1
QUIET_CPU_S = 0.01


def settle_until_quiet(token: str, cap_s: float) -> float:
    """Wait until the load's browser is quiet (a window of QUIET_WINDOW_S with at most
    QUIET_CPU_S of its CPU) or cap_s has passed; the seconds waited."""
    start = time.monotonic()
    used = process_cpu_s(marked_pids(token))
    while time.monotonic() - start < cap_s:
        time.sleep(QUIET_WINDOW_S)
        now = process_cpu_s(marked_pids(token))
        if now - used <= QUIET_CPU_S + 1e-9:
            break
        used = now
    return time.monotonic() - start


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def process_cpu_s(pids: list[int]) -> float:
    """utime + stime of these processes and of the children they reaped, in seconds."""
    ticks = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields and fields[0] != "Z":
            ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return ticks * _TICK_S


def allowed_cpu_jiffies(text: str, cpus: set[int]) -> tuple[int, int]:
    """(all, idle + iowait) jiffies of these CPUs from /proc/stat's text (a container sees
    the host's: the CPUs it may run on are the ones its processes wait for)."""
    total = idle = 0
    for line in text.splitlines():
        name, *values = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        numbers = [int(x) for x in values[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(numbers)
        idle += numbers[3] + numbers[4]
    return total, idle


def _thread_times(pids: list[int]) -> dict[tuple[int, int], tuple[str, int, int]]:
    """Every thread of these processes: (name, ns on a CPU, ns waiting in a run queue), from
    /proc/<pid>/task/<tid>/schedstat (nanoseconds, unlike stat's 10 ms ticks)."""
    out: dict[tuple[int, int], tuple[str, int, int]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, ValueError):
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        run_ns, wait_ns = (int(x) for x in f.read().split()[:2])
                    with open(f"/proc/{pid}/task/{tid}/comm") as f:
                        name = f.read().strip()
                    out[(pid, int(tid))] = (name, run_ns, wait_ns)
    return out


def _throttled_ns() -> int | None:
    """The container's CPU-quota throttled time (cgroup v2 throttled_usec, v1 throttled_time)."""
    for path in CPU_CGROUP_STAT:
        with contextlib.suppress(OSError), open(path) as f:
            fields = dict(line.split() for line in f if len(line.split()) == 2)
            if "throttled_usec" in fields:
                return int(fields["throttled_usec"]) * 1000
            if "throttled_time" in fields:
                return int(fields["throttled_time"])
    return None


def _process_kinds(pids: list[int]) -> dict[int, str]:
    kinds = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            with open(f"/proc/{pid}/comm") as f:
                kinds[pid] = process_kind(cmdline, f.read().strip())
    return kinds


def cpu_snapshot(pids: list[int]) -> CpuSnapshot:
    with open("/proc/stat") as f:
        jiffies = allowed_cpu_jiffies(f.read(), os.sched_getaffinity(0))
    threads = _thread_times(pids)
    return CpuSnapshot(time.monotonic(), jiffies, threads, _throttled_ns(), _process_kinds(pids))


def _system_jiffies() -> tuple[int, int]:
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return sum(values), values[3] + (values[4] if len(values) > 4 else 0)


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and len(fields) > 1 and fields[1] == str(pid):
                kids.append(int(entry))
    return kids


def _socket_inodes(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    return inodes


def _hex_endpoint(text: str) -> tuple[str, int]:
    address, port = text.split(":")
    if len(address) == 8:
        ip = ".".join(str(b) for b in bytes.fromhex(address)[::-1])
    else:  # IPv6: four little-endian 32-bit words
        raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, 32, 8))
        import ipaddress

        ip = str(ipaddress.IPv6Address(raw))
        ip = ip.removeprefix("::ffff:")
    return ip, int(port, 16)


def local_endpoints(
    pids: list[int], remote_ip: str, remote_port: int, unconnected_udp: bool = False
) -> list[tuple[str, int]]:
    """The local (ip, port) of the browser's sockets connected to the server (TCP, or the
    connected UDP socket of a QUIC connection), from /proc/net. With `unconnected_udp`, also
    the browser's UDP sockets connected to nobody: Firefox's QUIC socket is not always
    connect()ed, and then its remote end reads 0.0.0.0:0."""
    inodes = _socket_inodes(pids)
    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        with contextlib.suppress(OSError), open(f"/proc/net/{table}") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if len(cols) < 10 or cols[9] not in inodes:
                    continue
                with contextlib.suppress(ValueError):
                    remote = _hex_endpoint(cols[2])
                    loose = unconnected_udp and table.startswith("udp") and remote[1] == 0
                    if remote == (remote_ip, remote_port) or loose:
                        found.append(_hex_endpoint(cols[1]))
    return sorted(set(found))


def kill_marked(token: str, rounds: int = 20) -> None:
    """SIGKILL every process of this load's browser until none is left (a process forked while
    killing is found in the next round)."""
    for _ in range(rounds):
        pids = [p for p in marked_pids(token) if p != os.getpid()]
        live = [p for p in pids if (_stat_fields(p) or ["Z"])[0] != "Z"]
        if not live:
            return
        for pid in live:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
