"""The testbed's topology on Mininet's API: clients ─ router ─ servers.

    client (container) ─┐                         ┌─ server (container)
                        ├─ lanc ═ router ═ lans ─┤
    cross  (namespace) ─┘   (bridges inside the router namespace)

The router's egress toward lanc is the "down" direction, toward lans the "up" direction;
the backend (kernel netem, or a UML router) shapes both. Bridges live inside the router
namespace, never in the root namespace, where Docker's br_netfilter would drop their frames.
"""

from __future__ import annotations

import statistics
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mininet.link import Link
from mininet.net import Mininet

from quicbed import hostsettings
from quicbed.dockercli import docker
from quicbed.doctor import require
from quicbed.errors import EnvironmentProblem, HostProblem
from quicbed.topology.backends import (
    REGISTRY,
    Backend,
    BackendChoice,
    Lan,
    announce,
    check_links,
    choose_backend,
    make_backend,
    router_state_dir,
    tc_script,
)
from quicbed.topology.hosts import DockerHost, HostIntf, NsHost
from quicbed.topology.linkspec import LinkSpec, rate_commands
from quicbed.topology.profiles import Profile
from quicbed.topology.signals import held_stop_signals

CLIENT_NET, SERVER_NET = "10.77.1", "10.77.2"
ROUTER_CLIENT_IP, ROUTER_SERVER_IP = f"{CLIENT_NET}.1", f"{SERVER_NET}.1"
ADDRESSES = {"client": f"{CLIENT_NET}.10", "cross": f"{CLIENT_NET}.11", "server": f"{SERVER_NET}.10"}
DEFAULT_IMAGE = "quicbed/client:dev"
# The least netem delay per direction while the path's own latency is measured: some of that
# latency (timers) only shows while netem holds packets.
PROBE_DELAY_MS = 5.0
# Calibration's pings and the latency probe's alike: in a TCG guest, how long the vCPU idles
# between packets changes how late its timers fire.
RTT_PING_INTERVAL_S = 0.05
FORWARDING_PINGS = 30  # the bring-up's probe of what the path adds (_measure_forwarding_latency)
OFFLOADS = ("gso", "tso", "gro", "tx-udp-segmentation", "rx-udp-gro-forwarding", "rx-gro-list")
# What a backend that carries super-frames (the delay line) gets back on: the senders'
# segmentation. Receive aggregation stays off (a fraglist or forwarded-UDP GRO frame has no
# vnet header form), so super-frames are only ever the senders' own.
SEGMENTATION_OFFLOADS = ("gso", "tso", "tx-udp-segmentation")
# From this rate both ways super-frames cross a backend that carries them (Testbed.super_frames):
# a 64 KB one is then at most 1.3 ms of the link, about what TCP's own TSO sizing sends at
# once (1 ms of its pacing rate); the delay line's per-packet CPU matters only above ~200.
SUPER_FRAMES_FROM_MBIT = 400.0


DOMAIN = "quicbed"
# Container hosts resolve from the testbed alone: their hosts file names every host, and the
# resolver is loopback, where nothing listens, so any other lookup is refused at once. With the
# host's resolver the query went out through the emulated path (the default route) and timed
# out at the router: 5 s before every libcurl trial, and foreign packets on the measured link.
NO_RESOLVER = "127.0.0.1"


def server_host_name(index: int) -> str:
    return "server" if index == 0 else f"server{index + 1}"


def server_address(index: int) -> str:
    return f"{SERVER_NET}.{10 + index}"


def testbed_hosts(servers: int) -> dict[str, str]:
    """Every name a container can look up -> its address: name.quicbed, and the short name,
    which is also each container's hostname (libcurl's curl_version() makes OpenLDAP resolve
    the local hostname once per process; Docker lists it only on its own networks)."""
    short = {"client": ADDRESSES["client"], "cross": ADDRESSES["cross"], "router": ROUTER_CLIENT_IP}
    short.update({server_host_name(i): server_address(i) for i in range(servers)})
    return {**{f"{name}.{DOMAIN}": a for name, a in short.items()}, **short}


def name_service_args(servers: int) -> tuple[str, ...]:
    """`docker run` options that keep a container's name service inside the testbed."""
    args = ["--dns", NO_RESOLVER, "--dns-search", "."]
    for name, address in testbed_hosts(servers).items():
        args += ["--add-host", f"{name}:{address}"]
    return tuple(args)


@dataclass(frozen=True)
class HostSpec:
    """A container host: its image and extra `docker run` options (mounts, capabilities).
    image=None: a plain namespace host running the host's own programs, for where Docker
    cannot run (the netem guest, topology/guest.py); calibration needs nothing more."""

    image: str | None = DEFAULT_IMAGE
    docker_args: tuple[str, ...] = ()


@dataclass
class TestbedConfig:
    __test__ = False  # not a pytest class

    profile: Profile
    backend: str | BackendChoice = "auto"  # a name (chosen at start), or a choice made already
    client: HostSpec = HostSpec()
    # One host per server (server, server2, ...): they share the server LAN behind the router.
    servers: tuple[HostSpec, ...] = (HostSpec(),)
    tcp_cc: str = "cubic"
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])


def require_docker() -> None:
    proc = docker("info", "--format", "{{.ServerVersion}}")  # a hung dockerd: HostProblem in 30 s
    if proc.returncode != 0:
        raise HostProblem(
            "Docker is not running. Start it with `make docker` (or `dockerd "
            ">/var/log/dockerd.log 2>&1 &` as root; `systemctl start docker` where systemd runs)"
        )


def allow_congestion_control(name: str) -> None:
    """Namespaces other than the host's may only pick "allowed" algorithms; add ours."""
    proc_dir = Path("/proc/sys/net/ipv4")
    available = (proc_dir / "tcp_available_congestion_control").read_text().split()
    if name not in available:
        raise EnvironmentProblem(
            f"TCP congestion control {name!r} is not in this kernel " f"(available: {', '.join(available)})"
        )
    allowed_file = proc_dir / "tcp_allowed_congestion_control"
    allowed = allowed_file.read_text().split()
    if name not in allowed:  # the host's own list is recorded; `quicbed clean` puts it back
        hostsettings.change(allowed_file, " ".join([*allowed, name]))


class Testbed:
    """Brings the path up, shapes it, and tears everything down (also on errors)."""

    __test__ = False  # not a pytest class

    def __init__(self, config: TestbedConfig) -> None:
        self.config = config
        self.profile = config.profile
        self.state_dir: Path = router_state_dir(config.run_id)
        self.net: Mininet | None = None
        self.backend: Backend | None = None
        self.backend_choice: BackendChoice | None = None
        self.forwarding_rtt_ms = 0.0
        self.forwarding_probe: dict[str, Any] = {}  # the pings it was taken from
        self.applied: dict[str, Any] = {}

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        require("core")
        cfg = self.config
        if any(spec.image for spec in (cfg.client, *cfg.servers)):
            require_docker()
        self.backend_choice = (  # a run's executor chose it once for the run
            self.config.backend
            if isinstance(self.config.backend, BackendChoice)
            else choose_backend(
                self.config.backend,
                self.profile.max_rate_mbit,
                self.profile.has_trace,
                (self.profile.down.aqm, self.profile.up.aqm),
            )
        )
        # An aqm this backend's kernel lacks, or a trace it cannot replay, is refused before
        # anything is brought up.
        check_links(self.profile.down, self.profile.up, self.backend_choice, f"profile {self.profile.name}: ")
        announce(self.backend_choice)
        net = Mininet(topo=None, build=False, controller=None, cleanup=False)
        self.net = net
        self.router = net.addHost("router", cls=NsHost, ip=None)
        self.client = self._add_host("client", cfg.client)
        self.cross = net.addHost("cross", cls=NsHost, ip=None)
        self.servers = [self._add_host(server_host_name(i), spec) for i, spec in enumerate(cfg.servers)]
        self.server = self.servers[0]  # calibration's far end
        addresses = {
            self.client: ADDRESSES["client"],
            self.cross: ADDRESSES["cross"],
            **{host: server_address(i) for i, host in enumerate(self.servers)},
        }
        # The router is always node1: Mininet creates each veth from the router's namespace
        # with its peer directly in the host's (fast), so no veth ever exists in the root
        # namespace under a node's name (`router-eth0`): two testbeds on one host (course
        # labs) would collide there, and Mininet deletes a same-named veth before making one.
        links = {
            host: net.addLink(self.router, host, cls=Link, intf=HostIntf, fast=True) for host in addresses
        }
        self._wire(links, addresses)
        self.backend = make_backend(self.backend_choice.name, self.router, self.state_dir)
        self.backend.forward(Lan("lanc", f"{ROUTER_CLIENT_IP}/24"), Lan("lans", f"{ROUTER_SERVER_IP}/24"))
        self._measure_forwarding_latency()
        self.apply_link(self.profile.down, self.profile.up)

    def stop(self) -> None:
        # A Ctrl-C (or a second one) during the teardown waits for its end: raised inside,
        # it would leave the router or a host behind.
        with held_stop_signals():
            if self.backend:
                self.backend.stop()
            if self.net:
                for host in self.net.hosts:
                    try:
                        host.terminate()
                    except Exception:  # teardown goes on whatever one host does
                        pass
            self.net = None
            self.backend = None

    # -- wiring ------------------------------------------------------------------------
    def _add_host(self, name: str, spec: HostSpec) -> NsHost:
        assert self.net
        if spec.image is None:
            return self.net.addHost(name, cls=NsHost, ip=None)
        names = name_service_args(len(self.config.servers))
        return self.net.addHost(
            name,
            cls=DockerHost,
            image=spec.image,
            run_id=self.config.run_id,
            docker_args=(*names, *spec.docker_args),
            ip=None,
        )

    def _wire(self, links: dict[NsHost, Link], addresses: dict[NsHost, str]) -> None:
        r = self.router.run
        allow_congestion_control(self.config.tcp_cc)
        self._sysctls(self.router)
        for bridge in ("lanc", "lans"):
            r(["ip", "link", "add", bridge, "type", "bridge", "forward_delay", "0"])
            r(["sysctl", "-qw", f"net.ipv6.conf.{bridge}.disable_ipv6=1"])
            r(["ip", "link", "set", bridge, "up"])
        for host, link in links.items():
            server_side = host in self.servers
            port = link.intf1.name
            r(["ip", "link", "set", port, "master", "lans" if server_side else "lanc"])
            self._set_offloads(self.router, port)
            r(["ip", "link", "set", port, "up"])
            self._configure_host(
                host, link.intf2.name, addresses[host], ROUTER_SERVER_IP if server_side else ROUTER_CLIENT_IP
            )

    def _configure_host(self, host: NsHost, intf: str, ip: str, gateway: str) -> None:
        self._sysctls(host)
        self._set_offloads(host, intf)
        host.intf(intf).setIP(f"{ip}/24")
        host.run(["ip", "link", "set", intf, "up"])
        host.run(["ip", "route", "replace", "default", "via", gateway, "dev", intf])

    def _sysctls(self, host: NsHost) -> None:
        settings = [
            f"net.ipv4.tcp_congestion_control={self.config.tcp_cc}",
            # A fresh connection must not inherit ssthresh/cwnd cached from the last one.
            "net.ipv4.tcp_no_metrics_save=1",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]
        for setting in settings:
            proc = host.run(["sysctl", "-qw", setting], check=False)
            if proc.returncode != 0:
                raise EnvironmentProblem(f"{host.name}: cannot set {setting}: " f"{proc.stderr.strip()}")
        # Best effort: where br_netfilter is loaded, keep iptables out of our bridges.
        host.run(["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=0"], check=False)

    @property
    def super_frames(self) -> bool:
        """Whether GSO super-frames cross this path whole: a backend that carries them (the
        delay line) on a path fast enough that one is a short burst. The bottleneck's htb
        passes a super-frame on at once and waits out its debt: 64 KB is 0.5 ms at 1 Gbit/s
        but 26 ms at 20 Mbit/s, where per-packet spacing is the physics a trial measures (and
        the per-packet cost is small). Decided by the path's profile at bring-up, so offloads
        and queue agree for the path's life."""
        choice = self.backend_choice
        rates = (self.config.profile.down.rate_mbit, self.config.profile.up.rate_mbit)
        return (
            choice is not None
            and REGISTRY[choice.name].carries_super_frames
            and min(rates) >= SUPER_FRAMES_FROM_MBIT
        )

    def _set_offloads(self, host: NsHost, intf: str) -> None:
        """Per-packet rate and loss: no super-packets anywhere on the path. UDP GSO counts
        too: quic-go sends with UDP_SEGMENT, and a UDP GSO frame reaching the UML router
        whole was lost there (Caddy's HTTP/3 stalled ~1 s per response until this). A backend
        that cuts super-frames itself where a decision is per packet (the delay line) gets
        the senders' segmentation back: at 1 Gbit/s, per-frame work is what limits it."""
        on = SEGMENTATION_OFFLOADS if self.super_frames else ()
        for feature in OFFLOADS:
            host.run(["ethtool", "-K", intf, feature, "on" if feature in on else "off"], check=False)

    # -- link --------------------------------------------------------------------------
    def _measure_forwarding_latency(self) -> None:
        """What the path adds to netem's delay: forwarding, and timer latency that only shows
        when netem holds packets. Measured at the profile's own delays and subtracted from
        them for the testbed's life: in a TCG guest, timers fire late in proportion to the
        time they wait (80 ms added 1.3-1.5 ms where a 5 ms probe showed 0.6-1.05), so a
        latency measured at another delay misses part of it.

        The least excess of the probe's pings is subtracted, not their median: a bring-up never
        makes a path short. A pause of the router (a hypervisor's steal, a busy core) can only
        make a ping later, so a median taken during pauses is too high, and subtracting it
        delays every later packet too little (pausing the delay line 25 ms in every 40 during
        these pings made india's path 71.7 ms against 80.08; with the least, 80.0:
        tests/topology/test_bringup_pauses_path.py). The least excess is what an undisturbed
        packet costs, so no packet arrives before its configured delay; a backend's own jitter
        leaves its median RTT above the configured one by the spread, which calibration
        judges. tb.applied records the probe's figures."""
        assert self.backend
        down, up = (max(PROBE_DELAY_MS, spec.delay_ms) for spec in (self.profile.down, self.profile.up))
        rate = self.profile.down.rate_mbit
        self.backend.impair(
            (LinkSpec(rate_mbit=rate, delay_ms=down), down), (LinkSpec(rate_mbit=rate, delay_ms=up), up)
        )
        self.ping(count=3, interval=0.05)  # ARP and caches
        samples = self.ping(count=FORWARDING_PINGS, interval=RTT_PING_INTERVAL_S)
        if len(samples) < 20:
            raise EnvironmentProblem("the router does not forward: client cannot reach the server")
        excess = [rtt - down - up for rtt in samples]
        self.forwarding_probe = {
            "pings": len(excess),
            "excess_min_ms": round(min(excess), 3),
            "excess_median_ms": round(statistics.median(excess), 3),
            "compensation": "min",
        }
        self.forwarding_rtt_ms = max(0.0, min(excess))

    def apply_link(self, down: LinkSpec, up: LinkSpec) -> None:
        """Shape both directions; a backend that cannot apply a parameter raises (a queue its
        kernel lacks, before anything changes: a lab's `link aqm=...` on this path)."""
        assert self.backend
        if self.backend_choice:
            check_links(down, up, self.backend_choice)
        rtt = down.delay_ms + up.delay_ms
        half = self.forwarding_rtt_ms / 2
        applied: dict[str, Any] = {
            # subtracted from the two delays, half each (_measure_forwarding_latency)
            "forwarding_rtt_ms": round(self.forwarding_rtt_ms, 3),
            "forwarding_probe": self.forwarding_probe,
        }
        delays = {}
        for name, spec in (("down", down), ("up", up)):
            delays[name] = max(0.0, spec.delay_ms - half)
            applied[name] = {
                **spec.to_dict(),
                "netem_delay_ms": round(delays[name], 3),
                "netem_limit_packets": spec.delay_line_limit(),
                "queue_packets_effective": spec.queue_size_packets(rtt),
            }
        self.backend.impair((down, delays["down"]), (up, delays["up"]))
        if not self.backend.owns_bottleneck:  # else impair() put it in the backend's kernel
            rate: list[list[str]] = []
            for port, spec in self._rate_ports(down, up):
                # A trace's rate is the backend's (check_links proved it replays traces).
                rate += (
                    [["tc", "qdisc", "del", "dev", port, "root"]]
                    if spec.trace
                    else rate_commands(port, spec, rtt, super_frames=self.super_frames)
                )
            self.router.run(["sh", "-c", tc_script(rate)])
        self.applied = applied
        self.current = (down, up)

    def _rate_ports(self, down: LinkSpec, up: LinkSpec) -> list[tuple[str, LinkSpec]]:
        """The router's ports toward each host: the bottleneck of the direction into it."""
        return [
            (intf.name, up if intf.link.intf2.node in self.servers else down)
            for intf in self.router.intfList()
            if intf.name != "lo"
        ]

    def bottleneck_port(self, direction: str) -> str:
        """The router's port whose queue is this direction's bottleneck: toward the server
        for "up", toward the client for "down" (the backend's egress device where its own
        kernel runs the bottleneck)."""
        assert self.backend
        if self.backend.owns_bottleneck:
            return self.backend.up_dev if direction == "up" else self.backend.down_dev
        host = self.server if direction == "up" else self.client
        return next(
            intf.name for intf in self.router.intfList() if intf.name != "lo" and intf.link.intf2.node is host
        )

    def without_loss(self) -> tuple[LinkSpec, LinkSpec]:
        down, up = self.profile.down, self.profile.up
        return (replace(down, loss_pct=0.0, gemodel=None), replace(up, loss_pct=0.0, gemodel=None))

    # -- probes ------------------------------------------------------------------------
    def ping(
        self, count: int, interval: float = 0.05, src: NsHost | None = None, dst_ip: str | None = None
    ) -> list[float]:
        """RTT samples (ms) from the client to the server, with the host's ping."""
        src = src or self.client
        dst_ip = dst_ip or ADDRESSES["server"]
        timeout = count * interval + 5 + 3 * self.profile.rtt_ms / 1000
        proc = src.run(
            ["ping", "-n", "-c", str(count), "-i", str(interval), "-W", "3", dst_ip],
            timeout=timeout + 10,
            check=False,
        )
        return [
            float(part.split("=")[1])
            for line in proc.stdout.splitlines()
            for part in line.split()
            if part.startswith("time=")
        ]

    def describe(self) -> dict[str, Any]:
        assert self.backend
        reason = self.backend_choice.reason if self.backend_choice else ""
        return {
            **self.backend.describe(),
            "backend_reason": reason,
            "tcp_cc": self.config.tcp_cc,
            "profile": self.profile.to_dict(),
            "applied": self.applied,
            "addresses": ADDRESSES,
            "client_image": self.config.client.image,
            "server_images": [spec.image for spec in self.config.servers],
        }
