"""What every link backend shares: the interface (`Backend`, `TcBackend` for the ones whose
netem stage is the kernel's), a router's LAN, tc commands as a shell script, the veth ports
that only carry frames, the egress counters, and the run's state directory."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from quicbed.errors import EnvironmentProblem, HostProblem, InputError
from quicbed.hostcalls import IP_TIMEOUT_S, host_run
from quicbed.paths import STATE
from quicbed.topology.backends.proof import Proof
from quicbed.topology.hosts import NsHost
from quicbed.topology.linkspec import Aqm, LinkSpec, netem_commands
from quicbed.topology.marker import mark_scope

# One direction of the netem stage: the spec and the delay netem should add (the spec's delay
# minus what the path itself adds).
Impairment = tuple[LinkSpec, float]


@dataclass(frozen=True)
class Lan:
    """One side of the router: a bridge in the router namespace and the router's address."""

    bridge: str
    router_cidr: str


# Every link backend, by name: a subclass of Backend with a `name` registers itself here when
# its module is imported (topology/backends/__init__.py imports every module of the package).
REGISTRY: dict[str, type[Backend]] = {}


class Backend(ABC):
    """One way to run the link's netem stage. Everything the rest of quicbed needs to know of a
    backend is a member here: how it proves that it runs on this host, where auto tries it,
    the rate it forwards, what `quicbed clean` finds it by, which queues and traces it runs.
    Adding a backend is adding a module with one subclass (and its tests)."""

    name: ClassVar[str]
    # auto tries backends in this order, lowest first: netem 0, delayline 10, uml 20, vm 30.
    auto_rank: ClassVar[int]
    # Marks in the command lines of the processes it leaves running: `quicbed clean` kills
    # what carries one (after a kill -9 of the run).
    marks: ClassVar[tuple[str, ...]] = ()
    down_dev: str  # egress toward the clients (the "down" direction)
    up_dev: str  # egress toward the servers (the "up" direction)
    # The queue kinds (linkspec.AQM_KINDS) the kernel under this backend's bottleneck has.
    # None: that kernel is this host's (netem, uml and delayline put htb and its queue in the
    # router namespace), so each kind is proven here (host_has_qdisc). A backend that brings
    # its own kernel names what it has, e.g. `queue_kinds = frozenset(AQM_KINDS)`.
    queue_kinds: ClassVar[frozenset[str] | None] = None
    # Whether the backend's own kernel runs the rate stage too (the QEMU router, whose kernel
    # has the AQMs): net.py then leaves the router namespace's ports unshaped.
    owns_bottleneck: ClassVar[bool] = False
    # Whether it replays a trace-driven rate (linkspec `trace`) exactly: tc has no trace
    # replay, so only the delay line does (its own link queue, as Mahimahi's mm-link).
    replays_traces: ClassVar[bool] = False
    # Whether GSO super-frames may cross it whole (the delay line: it cuts them into wire
    # packets itself where a decision is per packet): net.py then leaves the endpoints' and
    # ports' segmentation offloads on, and drop-tail counts bytes (linkspec.droptail_qdisc).
    carries_super_frames: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            REGISTRY[cls.name] = cls

    def __init__(self, router: NsHost, state_dir: Path) -> None:
        self.router, self.state_dir = router, state_dir

    @classmethod
    @abstractmethod
    def prove(cls, fresh: bool = False) -> Proof:
        """Whether it runs on this host, shown by running it (proof.py); `fresh`: not from a
        cache (quicbed doctor)."""

    @classmethod
    def ceiling_mbit(cls, proof: Proof) -> float:
        """The highest rate it forwards at the TCP model on 2 cores (bench/link_bench.py);
        auto passes it over above that. Unbounded unless measured."""
        return math.inf

    @classmethod
    def timing_caveat(cls, proof: Proof) -> str:
        """Why its timing is coarser than the others' ('' when it is not): auto's reason says
        it where auto takes it (its auto_rank puts it after the backends whose timing is fine)."""
        return ""

    @classmethod
    def passed_over(cls, proof: Proof) -> str:
        """How auto's reason names it when it cannot run here."""
        return proof.reason

    @classmethod
    def runs_queue(cls, aqm: Aqm) -> bool:
        """Whether this backend's bottleneck can run the queue: drop-tail (pfifo) always."""
        if aqm.kind == "droptail":
            return True
        if cls.queue_kinds is not None:
            return aqm.kind in cls.queue_kinds
        return host_has_qdisc(aqm.kind)

    def trace_start_ns(self, direction: str) -> int:
        """When (CLOCK_MONOTONIC) this direction's trace began: its time 0. Only backends that
        replay traces know it."""
        raise NotImplementedError(f"{self.name} does not replay traces")

    def queue_stats(self, dev: str) -> str:
        """`tc -s qdisc show dev DEV` where the bottleneck runs: the router namespace here; a
        backend whose bottleneck is in its own kernel reads it there."""
        return self.router.run(["tc", "-s", "qdisc", "show", "dev", dev]).stdout

    @abstractmethod
    def forward(self, client_lan: Lan, server_lan: Lan) -> None: ...

    @abstractmethod
    def impair(self, down: Impairment, up: Impairment) -> None:
        """Set the netem stage of both directions; raise InputError if it cannot be applied."""

    def counters(self) -> dict[str, dict[str, int]]:
        """Packet and byte counters of the router's two egress devices (in its namespace)."""
        out = {}
        for dev in (self.down_dev, self.up_dev):
            proc = self.router.run(["ip", "-s", "-j", "link", "show", dev])
            out[dev] = parse_counters(proc.stdout)
        return out

    def stop(self) -> None:  # noqa: B027 - optional hook
        pass

    def router_pids(self) -> list[int]:
        """The host processes that forward (none where the host kernel does)."""
        return []

    def describe(self) -> dict[str, str]:
        return {"backend": self.name}


class TcBackend(Backend):
    """A backend whose netem stage is the kernel's: tc argument lists on its egress devices."""

    @abstractmethod
    def tc(self, commands: Sequence[Sequence[str]]) -> str:
        """Run tc argument lists on the router; raise InputError if one is refused."""

    def impair(self, down: Impairment, up: Impairment) -> None:
        self.tc(
            [
                *netem_commands(self.down_dev, down[0], delay_ms=down[1]),
                *netem_commands(self.up_dev, up[0], delay_ms=up[1]),
            ]
        )


def tc_script(commands: Sequence[Sequence[str]]) -> str:
    """tc commands as one shell script; `qdisc del` may fail (nothing there yet)."""
    lines = []
    for argv in commands:
        quoted = " ".join(_shell_word(a) for a in argv)
        tolerant = len(argv) > 2 and argv[1] == "qdisc" and argv[2] == "del"
        lines.append(f"{quoted} 2>/dev/null || true" if tolerant else f"{quoted} || exit $?")
    return "\n".join(lines) + "\n"


def _shell_word(word: str) -> str:
    # Arguments come from validated numbers and our own device names; quote anyway.
    safe = all(c.isalnum() or c in "-_.:/%" for c in word)
    return word if safe and word else "'" + word.replace("'", "'\\''") + "'"


def frame_port_up(router: NsHost, dev: str, super_frames: bool = False) -> None:
    """A veth end that only carries frames between the router and a LAN: no IPv6 chatter,
    no super-packets (rate and loss stay per packet) unless `super_frames` (GSO frames pass
    whole: the delay line decides per packet itself), up."""
    router.run(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"])
    for feature in ("gso", "tso", "gro", "tx-udp-segmentation"):
        state = "on" if super_frames and feature != "gro" else "off"
        router.run(["ethtool", "-K", dev, feature, state], check=False)
    router.run(["ip", "link", "set", dev, "up"])


def parse_counters(ip_json: str) -> dict[str, int]:
    """The counters of `ip -s -j link show DEV`."""
    stats = json.loads(ip_json)[0]["stats64"]
    return {
        "tx_packets": stats["tx"]["packets"],
        "tx_bytes": stats["tx"]["bytes"],
        "rx_packets": stats["rx"]["packets"],
        "rx_bytes": stats["rx"]["bytes"],
    }


def router_state_dir(run_id: str) -> Path:
    path = STATE / "runs" / run_id
    path.mkdir(parents=True, exist_ok=True)
    mark_scope(path)
    return path


class ControlDir:
    """Commands into a router kernel of its own (UML, QEMU) and their results back, through a
    host directory its init polls (topology/router_serve.sh): cmd in; out and rc back."""

    def __init__(self, path: Path, what: str, timeout_s: float = 15.0) -> None:
        self.path, self.what, self.timeout_s = path, what, timeout_s

    def run(self, script: str, process: subprocess.Popen[bytes] | None) -> tuple[int, str]:
        for name in ("rc", "out"):
            (self.path / name).unlink(missing_ok=True)
        tmp = self.path / "cmd.tmp"
        tmp.write_text(script)
        os.replace(tmp, self.path / "cmd")
        deadline = time.monotonic() + self.timeout_s
        while not (self.path / "rc").exists():
            if process is None or process.poll() is not None:
                raise EnvironmentProblem(f"the {self.what} has stopped")
            if time.monotonic() > deadline:
                raise EnvironmentProblem(f"the {self.what} did not answer a command in time")
            time.sleep(0.02)
        return int((self.path / "rc").read_text().strip() or 1), (self.path / "out").read_text()


@functools.cache
def host_has_qdisc(kind: str, *args: str) -> bool:
    """Whether this kernel takes a `kind` qdisc (with args), proven by adding one in a scratch
    namespace, never by a module's presence on disk; once per process and qdisc, as every
    testbed and the executor ask and the kernel does not change."""
    ns = f"quicbed-probe-{os.getpid()}-{kind}"
    try:
        host_run(["ip", "netns", "add", ns], IP_TIMEOUT_S, check=True)
        host_run(
            ["ip", "-n", ns, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"],
            IP_TIMEOUT_S,
            check=True,
        )
        proc = host_run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "probe0", "root", kind, *args],
            IP_TIMEOUT_S,
        )
        return proc.returncode == 0
    finally:
        with contextlib.suppress(HostProblem):  # the probe's answer, or its own error, matters more
            host_run(["ip", "netns", "del", ns], IP_TIMEOUT_S)


class KernelRouter(TcBackend):
    """A router with a kernel of its own (UML, QEMU): its init serves commands through the
    control directory `ctl` (router_serve.sh), and `process` is its process group."""

    what: str  # how messages name it, e.g. "QEMU router"
    COMMAND_TIMEOUT = 15.0

    def __init__(self, router: NsHost, state_dir: Path, ctl_name: str) -> None:
        super().__init__(router, state_dir)
        self.ctl = state_dir / ctl_name
        self.process: subprocess.Popen[bytes] | None = None

    def run(self, script: str) -> tuple[int, str]:
        """Run a shell script inside the router through the control directory."""
        return ControlDir(self.ctl, self.what, self.COMMAND_TIMEOUT).run(script, self.process)

    def tc(self, commands: Sequence[Sequence[str]]) -> str:
        rc, out = self.run(tc_script(commands))
        if rc != 0:
            raise InputError(f"the {self.what} refused a link parameter: {out.strip()}")
        return out

    def counters(self) -> dict[str, dict[str, int]]:
        out = {}
        for dev in (self.down_dev, self.up_dev):
            rc, text = self.run(f"ip -s -j link show {dev}\n")
            if rc != 0:
                raise EnvironmentProblem(f"cannot read counters of {dev} in the {self.what}: {text}")
            out[dev] = parse_counters(text)
        return out

    def router_pids(self) -> list[int]:
        return [self.process.pid] if self.process else []

    def stop(self) -> None:
        # The whole process group: UML's processes are ptrace children of its kernel.
        if self.process and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, 9)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)
