"""Containernet-style scripting on quicbed's topology, for instructors who know Containernet.

Containernet itself (a Mininet fork with Docker hosts) is in no package registry this project
may use, so this is not Containernet: it is the same way of writing a script, with the same
names and arguments where they make sense, on quicbed's own topology and link backends.

    net = Containernet()
    client = net.addDocker("client", dimage="quicbed/client:dev")
    server = net.addDocker("server", dimage="quicbed/nginx")
    net.addLink(client, server, delay="40ms", bw=20, loss=1)
    net.start()
    print(net.calibrate())
    CLI(net)
    net.stop()

How the link is applied: quicbed's path is client ─ router ─ server, and `addLink(a, b, ...)`
shapes that whole path. `delay` is ONE-WAY and applied once in EACH direction (the RTT is twice
it, as for a Mininet TCLink between two hosts); it is not added again per interface or per hop,
and the router's own forwarding latency is measured at start and subtracted. `bw` (Mbit/s) is
the bottleneck rate in each direction (htb over a drop-tail queue of one BDP, or
`max_queue_size` packets), `loss` (%) is random loss in each direction, `jitter` as Mininet's.

Where it differs from Containernet: exactly one link, between one client-side container (the
first argument) and one server container; no switches or controllers (the router is
quicbed's); a server container must use a server image quicbed describes (servers/*/server.yaml),
and its server, certificate and content are started for you; `addHost` adds the namespace-only
host `cross` on the client's LAN (cross traffic); node names in the CLI are quicbed's
(`client`, `server`, `cross`), whatever the script called them (`net.get(name)` maps them).
"""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from quicbed.errors import InputError
from quicbed.experiments.options import PathOptions
from quicbed.labs.lab import DEFAULT_SERVER, lab_path
from quicbed.topology.net import DEFAULT_IMAGE

_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|us|s)?\s*$")


def parse_delay_ms(value: str | float | int) -> float:
    """Mininet's delay strings ("80ms", "0.08s", "500us") or a number of ms."""
    match = _DELAY.match(str(value))
    if not match:
        raise InputError(f"delay: {value!r} is not a time like '80ms'", field="addLink")
    scale = {"ms": 1.0, "us": 1e-3, "s": 1e3, None: 1.0}[match.group(2)]
    return float(match.group(1)) * scale


@dataclass
class Node:
    """A node as the script named it; `role` is quicbed's name for it."""

    name: str
    role: str
    dimage: str | None = None
    net: Containernet | None = field(default=None, repr=False)

    def cmd(self, command: str) -> str:
        """Run a shell command in the node (as Mininet's node.cmd) and return its output."""
        assert self.net and self.net.tb, "net.start() first"
        return self.net.tb.net.get(self.role).cmd(command)


class Containernet:
    def __init__(
        self, backend: str = "auto", tcp_cc: str = "cubic", lab_id: str | None = None, **_mininet_args: Any
    ) -> None:
        self.backend, self.tcp_cc, self.lab_id = backend, tcp_cc, lab_id
        self.nodes: dict[str, Node] = {}
        self.link: dict[str, str] = {}
        self.tb: Any = None
        self._stack = contextlib.ExitStack()

    # -- building ------------------------------------------------------------------------
    def addDocker(self, name: str, dimage: str = DEFAULT_IMAGE, **_docker_args: Any) -> Node:
        return self._add(Node(name, "", dimage, self))

    def addHost(self, name: str, **_params: Any) -> Node:
        if any(n.role == "cross" for n in self.nodes.values()):
            raise InputError("one namespace host only (quicbed's cross-traffic host)", field="addHost")
        return self._add(Node(name, "cross", None, self))

    def _add(self, node: Node) -> Node:
        if node.name in self.nodes:
            raise InputError(f"{node.name!r} is already in the network", field="add")
        self.nodes[node.name] = node
        return node

    def addLink(
        self,
        a: Node,
        b: Node,
        delay: str | float = 0,
        bw: float | None = None,
        loss: float = 0,
        jitter: str | float = 0,
        max_queue_size: int | None = None,
        **_tc_args: Any,
    ) -> None:
        if self.link:
            raise InputError("one link only: quicbed's path is client ─ router ─ server", field="addLink")
        if bw is None:
            raise InputError("bw (Mbit/s) is required: the path's bottleneck", field="addLink")
        a.role, b.role = "client", "server"
        one_way = parse_delay_ms(delay)
        self.link = {
            "down.delay_ms": f"{one_way}",
            "up.delay_ms": f"{one_way}",
            "rate_mbit": f"{bw}",
            "loss_pct": f"{loss}",
            "jitter_ms": f"{parse_delay_ms(jitter)}",
        }
        if max_queue_size is not None:
            self.link["queue_packets"] = str(max_queue_size)

    def get(self, name: str) -> Any:
        """The running Mininet node of the node the script named `name`."""
        return self.tb.net.get(self.nodes[name].role)

    # -- running -------------------------------------------------------------------------
    def start(self) -> None:
        from quicbed.servers.descriptors import servers_serving
        from quicbed.topology.profiles import apply_overrides, load_profile

        if not self.link:
            raise InputError("addLink(client, server, ...) first", field="start")
        client = next(n for n in self.nodes.values() if n.role == "client")
        server = next(n for n in self.nodes.values() if n.role == "server")
        # A server image with or without its pinned tag ("quicbed/nginx" or ":1.26.3"); of
        # the servers that serve the testbed's content (not a replay server, whose image may
        # be a client's too).
        content = servers_serving("content")
        names = {spec.image.split(":")[0]: name for name, spec in content.items()}
        names |= {spec.image: name for name, spec in content.items()}
        server_name = names.get(
            server.dimage or "", DEFAULT_SERVER if server.dimage in (None, DEFAULT_IMAGE) else None
        )
        if server_name is None:
            raise InputError(
                f"{server.dimage!r} is no server image quicbed describes " f"({', '.join(sorted(names))})",
                field="addDocker",
            )
        profile = apply_overrides(load_profile("india"), self.link)
        profile = replace(profile, name="containernet", description="the link of a Containernet-style script")
        self.tb = self._stack.enter_context(
            lab_path(
                profile,
                lab_id=self.lab_id,
                server=server_name,
                path=PathOptions(backend=self.backend, client_image=client.dimage),
                tcp_cc=self.tcp_cc,
            )
        )

    def calibrate(self, rtt_samples: int = 20, udp_packets: int = 2000, goodput_seconds: float = 2.0) -> Any:
        """One call: RTT, goodput each way, loss and route against the link, as a table."""
        from quicbed.topology.calibrate import calibrate
        from quicbed.topology.calibration_table import print_calibration

        cal = calibrate(
            self.tb, rtt_samples=rtt_samples, udp_packets=udp_packets, goodput_seconds=goodput_seconds
        )
        print_calibration(cal)
        return cal

    def stop(self) -> None:
        self._stack.close()
        self.tb = None

    def __enter__(self) -> Containernet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def CLI(net: Containernet) -> None:  # Mininet's name
    """The lab's CLI (Mininet's, plus `link`, `cc` and `play`) on the running network."""
    from quicbed.labs.lab import lab_cli_class

    lab_cli_class(net.tb)(net.tb.net)


def run_example(net: Containernet, argv: list[str] | None = None) -> int:
    """What every example in labs/examples does with its network: start, calibrate, the CLI
    (unless --no-cli), stop. Exit 0 if the path matched its link, 3 if not."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        net.start()
        calibration = net.calibrate()
        if "--no-cli" not in argv:
            CLI(net)
    finally:
        net.stop()
    return 0 if calibration.passed else 3
