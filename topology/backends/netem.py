"""`netem`: the router namespace forwards, and the host kernel's netem shapes its egress; and the
probe for whether this kernel has sch_netem at all."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Sequence

from quicbed.errors import InputError
from quicbed.topology.backends.base import Lan, TcBackend, tc_script


class NetemBackend(TcBackend):
    name = "netem"

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


@functools.cache
def host_has_qdisc(kind: str, *args: str) -> bool:
    """Whether this kernel takes a `kind` qdisc (with args), proven by adding one in a scratch
    namespace, never by a module's presence on disk; once per process and qdisc, as every
    testbed and the executor ask and the kernel does not change."""
    ns = f"quicbed-probe-{os.getpid()}-{kind}"
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        subprocess.run(
            ["ip", "-n", ns, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"],
            check=True,
            capture_output=True,
        )
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "probe0", "root", kind, *args],
            capture_output=True,
        )
        return proc.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
