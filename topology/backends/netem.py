"""`netem`: the router namespace forwards, and the host kernel's netem shapes its egress; and the
probe for whether this kernel has sch_netem at all."""

from __future__ import annotations

from collections.abc import Sequence

from quicbed.errors import InputError
from quicbed.topology.backends.base import Lan, TcBackend, host_has_qdisc, tc_script
from quicbed.topology.backends.proof import Proof


class NetemBackend(TcBackend):
    name = "netem"
    auto_rank = 0  # the host's own kernel: nothing to boot, nothing between

    @classmethod
    def prove(cls, fresh: bool = False) -> Proof:
        if host_has_netem():
            return Proof("netem", True, "the host kernel has sch_netem")
        return Proof("netem", False, "this kernel has no sch_netem: tc qdisc add ... netem fails")

    @classmethod
    def passed_over(cls, proof: Proof) -> str:
        return "no sch_netem in this kernel"

    def forward(self, client_lan: Lan, server_lan: Lan) -> None:
        r = self.router.run
        for lan in (client_lan, server_lan):
            r(["ip", "addr", "add", lan.router_cidr, "dev", lan.bridge])
        r(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        self.down_dev, self.up_dev = client_lan.bridge, server_lan.bridge

    def tc(self, commands: Sequence[Sequence[str]]) -> str:
        proc = self.router.run(["sh", "-c", tc_script(commands)], check=False)
        if proc.returncode != 0:
            raise InputError(f"the kernel refused a link parameter: {proc.stderr.strip()}")
        return proc.stdout


def host_has_netem() -> bool:
    """Probe for sch_netem in a scratch namespace (never touches a real interface)."""
    return host_has_qdisc("netem", "delay", "1ms")
