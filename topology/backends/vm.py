"""`vm`: the host kernel has no sch_netem, and a real Linux kernel is the router: Debian's kernel
in a small QEMU guest (vmimage.py), with KVM where a boot probe shows that it boots and TCG
elsewhere. Its two virtio NICs sit on tap devices in the router namespace, one on each LAN
bridge, and the same tc commands as in the `netem` backend run inside it
(topology/vm_router.sh is its init; commands and results pass through a control directory
shared over 9p, as with UML)."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from quicbed.doctor import require
from quicbed.errors import EnvironmentProblem, HostProblem
from quicbed.paths import REPO
from quicbed.topology.backends.base import (
    Impairment,
    KernelRouter,
    Lan,
    frame_port_up,
)
from quicbed.topology.backends.proof import Proof, forget_vm_proof, prove_vm, vm_failure
from quicbed.topology.backends.vmimage import VM_MARK, pinned_kernel, qemu_argv, qemu_version
from quicbed.topology.hosts import NsHost
from quicbed.topology.linkspec import AQM_KINDS, netem_commands, rate_commands

VM_ROUTER_INIT = REPO / "topology" / "vm_router.sh"
# What the router forwards on 2 cores (bench/link_bench.py --rates): under TCG 200 Mbit/s at
# 0.996 of the TCP model with 78 % of a core, 500 at 0.77 (CPU-bound). Above it `auto` passes it
# over. KVM's is not measured (no host of ours boots a guest under KVM), so TCG's stands.
VM_MAX_RATE_MBIT = {"kvm": 200.0, "tcg": 200.0}
# Measured on a Xeon whose only kernel router is QEMU under TCG (bench/handshake_bench.py,
# india): a QUIC handshake's captured path was 0.975 of the calibrated RTT (the delay line's
# 1.000), and dsl's 10-packet queue dropped paced datagrams, because the emulated vCPU passes
# packets on in bunches when it waits for the host's CPU. Pings at 50 ms meet an idle guest,
# so calibration alone does not see it. auto's order puts it last, so it reaches it only for a
# queue that needs its kernel (or where nothing else runs), and then says this in its reason.
TCG_TIMING = (
    "under tcg its emulated CPU passes packets on in bunches (a handshake's path runs 2.5 % "
    "short of the RTT)"
)


class VmBackend(KernelRouter):
    name = "vm"
    what = "QEMU router"
    down_dev, up_dev = "eth0", "eth1"
    # Debian's kernel has every queue, and this backend runs its bottleneck in it: netem, then
    # htb and the queue as netem's child, on each egress NIC (linkspec.rate_commands).
    queue_kinds = frozenset(AQM_KINDS)
    owns_bottleneck = True
    # Last: auto reaches it for an `aqm` this host's kernel lacks (choose_backend), or where
    # nothing before it runs; under TCG its timing is the coarsest (TCG_TIMING).
    auto_rank = 30
    marks = (VM_MARK,)
    BOOT_TIMEOUT = 30.0
    COMMAND_TIMEOUT = 20.0

    @classmethod
    def prove(cls, fresh: bool = False) -> Proof:
        return prove_vm(fresh)

    @classmethod
    def ceiling_mbit(cls, proof: Proof) -> float:
        return VM_MAX_RATE_MBIT.get(proof.accelerator, 0.0)

    @classmethod
    def timing_caveat(cls, proof: Proof) -> str:
        return TCG_TIMING if proof.accelerator == "tcg" else ""

    def __init__(self, router: NsHost, state_dir: Path) -> None:
        super().__init__(router, state_dir, "vm")
        self.vm_name = f"{VM_MARK}{uuid.uuid4().hex[:8]}"
        self.accelerator = "?"
        self.boot_s = 0.0

    def forward(self, client_lan: Lan, server_lan: Lan) -> None:
        require("vm")
        proof = prove_vm()
        if not proof.runs:
            raise HostProblem(proof.reason)
        self.accelerator = proof.accelerator or "tcg"
        # The router namespace only carries frames: the guest's NICs own the addresses.
        for lan, tap in ((client_lan, "vm0"), (server_lan, "vm1")):
            self.router.run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"])
            self.router.run(["ip", "link", "set", tap, "master", lan.bridge])
            frame_port_up(self.router, tap)
        self.ctl.mkdir(parents=True, exist_ok=True)
        (self.ctl / "net.conf").write_text(
            f"VEC0_ADDR={client_lan.router_cidr}\nVEC1_ADDR={server_lan.router_cidr}\n"
        )
        self._boot()

    def _boot(self) -> None:
        argv = qemu_argv(
            self.vm_name, self.accelerator, VM_ROUTER_INIT, {}, ctl=self.ctl, taps=("vm0", "vm1")
        )
        log = open(self.ctl / "console.log", "wb")  # QEMU writes it until stop
        started = time.monotonic()
        # A router does not wait for the CPU behind its endpoints: when the TCG vCPU was
        # descheduled for a few ms, the packets that arrived meanwhile left netem together and
        # overflowed dsl's 10-packet queue (5 of 20000 paced datagrams lost, none with -10).
        self.process = subprocess.Popen(
            self.router.popen_argv(["nice", "-n", "-10", *argv]),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = started + self.BOOT_TIMEOUT
        while not (self.ctl / "ready").exists():
            timed_out = time.monotonic() > deadline
            if self.process.poll() is not None or timed_out:
                forget_vm_proof()  # it booted for the probe, not now: probe again next time
                console = (self.ctl / "console.log").read_text(errors="replace")
                raise HostProblem(f"the QEMU router did not come up: {vm_failure(console, timed_out)}")
            time.sleep(0.05)
        self.boot_s = time.monotonic() - started

    def impair(self, down: Impairment, up: Impairment) -> None:
        rtt = down[0].delay_ms + up[0].delay_ms
        commands: list[list[str]] = []
        for dev, (spec, delay) in ((self.down_dev, down), (self.up_dev, up)):
            commands += netem_commands(dev, spec, delay_ms=delay)
            commands += rate_commands(dev, spec, rtt, under_netem=True)
        self.tc(commands)

    def queue_stats(self, dev: str) -> str:
        rc, out = self.run(f"tc -s qdisc show dev {dev}\n")
        if rc != 0:
            raise EnvironmentProblem(f"cannot read the queue of {dev} in the QEMU router: {out}")
        return out

    def describe(self) -> dict[str, str]:
        ready = self.ctl / "ready"
        kernel = pinned_kernel()
        return {
            "backend": self.name,
            "vm_kernel": ready.read_text().strip() if ready.exists() else "?",
            "vm_kernel_package": f"{kernel.package} {kernel.version}",
            "vm_accelerator": self.accelerator,
            "vm_boot_s": f"{self.boot_s:.2f}",
            "qemu": qemu_version(),
        }
