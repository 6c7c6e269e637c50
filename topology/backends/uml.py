"""`uml`: the host kernel has no sch_netem (this machine, CI, WSL2), and a user asks for it
(`--backend uml`; auto takes the delay line first). A User-Mode Linux kernel, whose modules
include sch_netem, is the router: its two vector interfaces sit on veths in the
router namespace, and the same tc commands run inside it (topology/uml_router.sh is its init;
commands and their results pass through a control directory)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from quicbed import hostsettings
from quicbed.doctor import require
from quicbed.errors import HostProblem
from quicbed.paths import REPO
from quicbed.topology.backends.base import (
    KernelRouter,
    Lan,
    frame_port_up,
)
from quicbed.topology.backends.proof import Proof, forget_uml_proof, prove_uml, uml_binary, uml_failure
from quicbed.topology.hosts import NsHost

UML_BINARY = "linux.uml"  # Debian's; $QUICBED_UML_BINARY may name another (proof.uml_binary)
UML_MARK = "umid=quicbed-"  # `quicbed clean` finds UML routers (and netem guests) by this
UML_SOCKET_BUFFER = 8 << 20
RMEM_DEFAULT = Path("/proc/sys/net/core/rmem_default")
WMEM_DEFAULT = Path("/proc/sys/net/core/wmem_default")
UML_MAX_RATE_MBIT = 100.0  # above this, one UML vCPU falls short of the rate (bench/link_bench.py)


class UmlBackend(KernelRouter):
    name = "uml"
    # After the delay line (under steal its calibrated RTT came out short), before the QEMU
    # router: it boots in a second and bunches no packets. In practice a user names it.
    auto_rank = 20
    marks = (UML_MARK,)
    what = "UML router"
    down_dev, up_dev = "vec0", "vec1"
    BOOT_TIMEOUT = 30.0
    COMMAND_TIMEOUT = 15.0

    @classmethod
    def prove(cls, fresh: bool = False) -> Proof:
        return prove_uml(fresh)

    @classmethod
    def ceiling_mbit(cls, proof: Proof) -> float:
        return UML_MAX_RATE_MBIT

    def __init__(self, router: NsHost, state_dir: Path) -> None:
        super().__init__(router, state_dir, "uml")
        self.umid = f"quicbed-{uuid.uuid4().hex[:8]}"
        self.priority = "default"

    def forward(self, client_lan: Lan, server_lan: Lan) -> None:
        require("uml")  # linux.uml, and what its init runs from the host's / (insmod...)
        r = self.router.run
        # The router namespace only carries frames: UML's vector devices own the addresses.
        for lan, veth in ((client_lan, "uml0"), (server_lan, "uml1")):
            r(["ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}br"])
            r(["ip", "link", "set", f"{veth}br", "master", lan.bridge])
            for dev in (veth, f"{veth}br"):
                frame_port_up(self.router, dev)
        self.ctl.mkdir(parents=True, exist_ok=True)
        (self.ctl / "net.conf").write_text(
            f"VEC0_ADDR={client_lan.router_cidr}\n" f"VEC1_ADDR={server_lan.router_cidr}\n"
        )
        self._boot()

    def _boot(self) -> None:
        init = REPO / "topology" / "uml_router.sh"
        argv = [
            uml_binary(),
            "mem=256M",
            "rootfstype=hostfs",
            "rootflags=/",
            "ro",
            f"init={init}",
            f"QUICBED_CTL={self.ctl}",
            "con=null",
            "con0=null,fd:1",
            f"umid={self.umid}",
            "vec0:transport=raw,ifname=uml0",
            "vec1:transport=raw,ifname=uml1",
        ]
        log = open(self.ctl / "console.log", "wb")  # UML writes it until stop
        # UML's packet sockets take the host's default receive buffer when its init brings
        # vec0/vec1 up; 208 KB overflowed whenever UML waited for the CPU (hundreds of drops
        # a second at 100 Mbit/s), so the default is raised for the boot only. Their send
        # buffer too: a frame UML sends stays charged to it until it leaves the host's pfifo
        # behind the router, so at 208 KB UML stopped sending before that pfifo was full: it
        # never dropped, and the backlog stood in UML's netem and receive buffer instead
        # (india under load: 341 ms of RTT where a full pfifo is 161).
        at_least = {path: _at_least(UML_SOCKET_BUFFER) for path in (RMEM_DEFAULT, WMEM_DEFAULT)}
        if not os.access(RMEM_DEFAULT, os.W_OK):  # a network namespace other than the host's
            raise HostProblem(
                "the UML router needs to raise net.core.rmem_default, which this network "
                "namespace cannot set: run quicbed in the host's namespace, or --backend delayline"
            )
        with hostsettings.held(at_least):  # the host's own values again once it has booted
            self.process = subprocess.Popen(
                self.router.popen_argv(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            deadline = time.monotonic() + self.BOOT_TIMEOUT
            while not (self.ctl / "ready").exists():
                timed_out = time.monotonic() > deadline
                if self.process.poll() is not None or timed_out:
                    forget_uml_proof()  # it booted for the probe, not now: probe again next time
                    console = (self.ctl / "console.log").read_text(errors="replace")
                    raise HostProblem(
                        f"the UML router did not come up: " f"{uml_failure(console, timed_out)}"
                    )
                time.sleep(0.05)

        self.priority = take_realtime(self.process.pid)

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(Path.home() / ".uml" / self.umid, ignore_errors=True)

    def describe(self) -> dict[str, str]:
        ready = self.ctl / "ready"
        kernel = ready.read_text().strip() if ready.exists() else "?"
        return {"backend": self.name, "uml_kernel": kernel, "uml_priority": self.priority}


def _at_least(value: int) -> Callable[[str], str]:
    return lambda old: str(max(value, int(old)))


REALTIME_PRIORITY = 50  # as the delay line's (topology/delayline/delayline.c take_realtime)


def take_realtime(session: int) -> str:
    """Schedule the booted router's tasks (the UML kernel and its helpers: the processes of
    its session, each thread) SCHED_FIFO, ahead of the endpoints, as the delay line is: a
    browser starting on both cores held a UML router's first flights back by 10-23 ms in
    CI, where netem in a host kernel waits for no task; with three busy loops on 2 cores,
    india's ping rose to +0.42 ms at p99 and +4.6 ms at most at the default priority, and
    stayed below the configured RTT as SCHED_FIFO (2026-11-29). Tasks UML starts later
    inherit it.
    Returns what the manifest records: "SCHED_FIFO 50", or "default" where the host refused."""
    param = os.sched_param(REALTIME_PRIORITY)
    tasks = [
        int(tid)
        for pid in _session_pids(session)
        for tid in _listdir(Path(f"/proc/{pid}/task"))
        if tid.isdigit()
    ]
    try:
        for tid in tasks:
            os.sched_setscheduler(tid, os.SCHED_FIFO, param)
    except (PermissionError, ProcessLookupError, OSError):
        return "default"
    return f"SCHED_FIFO {REALTIME_PRIORITY}" if tasks else "default"


def _session_pids(session: int) -> list[int]:
    """The processes of a session (its leader's pid), from /proc."""
    out = []
    for entry in _listdir(Path("/proc")):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # after "(comm)", which may hold spaces
        if len(fields) > 3 and fields[3] == str(session):
            out.append(int(entry))
    return out


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
