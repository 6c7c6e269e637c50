"""The emulated path with the servers behind it: one container per named server (content,
per-run PKI and logs mounted) and the client with the CA. Used by the experiment executor, the
benches and the path tests; below experiments, above topology and the server lifecycle.

A replayed page (workloads/replay.py) is served by the one named server whose descriptor says
`serves: replay`: its site is that server's content, each origin's address is added to that
server's LAN interface, each origin has a certificate of its own from the run's CA, and the
client's hosts file names every origin (no name leaves the testbed: topology/net.py).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from quicbed.perfargs import contract_argv
from quicbed.topology.backends import BackendChoice
from quicbed.topology.hosts import DockerHost
from quicbed.topology.net import DEFAULT_IMAGE, DOMAIN, HostSpec, Testbed, TestbedConfig, server_address
from quicbed.topology.profiles import Profile

from . import pki
from .descriptors import get_server
from .lifecycle import container_options, start_server
from .pairing import QUIC_HTTP, TCP_HTTP
from .spec import ServerError

SERVER_NAME = f"server.{DOMAIN}"  # in every container's hosts file (topology.net)
CLIENT_PKI = "/etc/quicbed/pki"  # where the client container sees the run's CA


@dataclass(frozen=True)
class ReplaySite:
    """A replayed page as workloads/replay.py wrote it (`write_site`): the site's directory and
    each origin's name -> its address on the server LAN (`ReplayPlan.hosts()`)."""

    root: Path
    hosts: Mapping[str, str] = field(default_factory=dict)


def ensure_pki(pki_dir: Path, origins: tuple[str, ...] = ()) -> None:
    """One private CA and server certificate per run, kept across its conditions and resumes;
    with a replayed page's `origins`, a certificate for each, made in the same pass (the CA's
    key is discarded after it, so origins cannot be added to a PKI made without them)."""
    if not (pki_dir / "server.pem").exists():
        # Every server host presents the same certificate; clients connect by name.
        pki.generate_pki(pki_dir, server_address(0), SERVER_NAME, origins)
        return
    missing = [name for name in origins if not pki.origin_files(pki_dir, name)[0].is_file()]
    if missing:
        raise ServerError(
            f"{pki_dir} was made without a certificate for {missing[0]} (+{len(missing) - 1} more "
            "origins): a run's CA signs only in the pass that makes it; start the run afresh"
        )


@contextlib.contextmanager
def served_testbed(
    profile: Profile,
    names: list[str],
    *,
    log_root: Path,
    pki_dir: Path,
    content_dir: Path,
    backend: str | BackendChoice = "auto",
    client_image: str = DEFAULT_IMAGE,
    tcp_cc: str = "cubic",
    start: bool = False,
    run_id: str | None = None,
    client_mounts: tuple[tuple[Path, str], ...] = (),
    replay: ReplaySite | None = None,
) -> Iterator[tuple[Testbed, dict[str, DockerHost]]]:
    """The path with one container per named server (content, PKI and logs mounted) and the
    client with the CA. With `start`, every server is started and ready; otherwise the caller
    starts them (the runner does, once per condition, after calibration). `run_id` names the
    testbed's containers and state (a lab's id); default a fresh one. `client_mounts`:
    (host directory, path in the client) pairs, writable (a run's capture files). `replay`:
    the page the one `serves: replay` server among `names` serves (the module's text)."""
    replayer = _replay_server(names, replay)
    ensure_pki(pki_dir, tuple(replay.hosts) if replay else ())
    specs = []
    for name in names:
        log_dir = log_root / name
        log_dir.mkdir(parents=True, exist_ok=True)
        content = replay.root if replay and name == replayer else content_dir
        options = container_options(name, content, pki_dir, log_dir)
        specs.append(HostSpec(image=get_server(name).image, docker_args=tuple(options)))
    origins = tuple(
        a for n, addr in (replay.hosts.items() if replay else ()) for a in ("--add-host", f"{n}:{addr}")
    )
    cfg = TestbedConfig(
        profile=profile,
        backend=backend,
        tcp_cc=tcp_cc,
        client=HostSpec(client_image, (*client_docker_args(pki_dir, client_mounts), *origins)),
        servers=tuple(specs),
        **({"run_id": run_id} if run_id else {}),
    )
    with Testbed(cfg) as tb:
        hosts = dict(zip(names, tb.servers, strict=True))
        if replay and replayer:
            add_origin_addresses(hosts[replayer], replay.hosts.values())
        for name, host in hosts.items() if start else ():
            start_server(host.container, name, timeout=30)
            warm_up(tb, host, name)
        yield tb, hosts


def _replay_server(names: list[str], replay: ReplaySite | None) -> str:
    """The one named server that serves `replay` ("" without one); a replay server without a
    page, or a page without (or with two) replay servers, is refused: it could not run."""
    replayers = [name for name in names if get_server(name).serves == "replay"]
    if replay is None:
        if replayers:
            raise ServerError(f"{replayers[0]} serves a recorded page (serves: replay), and none was given")
        return ""
    if len(replayers) != 1:
        raise ServerError(f"a replayed page needs one replay server among {names}, got {len(replayers)}")
    return replayers[0]


def add_origin_addresses(host: DockerHost, addresses: Iterable[str]) -> None:
    """Every origin's own address on the replay server's LAN interface (a /24 like its first:
    the router reaches each by ARP on the server LAN, no route to add)."""
    intf = host.defaultIntf().name
    for address in dict.fromkeys(addresses):
        host.run(["ip", "addr", "add", f"{address}/24", "dev", intf])


def client_docker_args(pki_dir: Path, mounts: tuple[tuple[Path, str], ...] = ()) -> tuple[str, ...]:
    """The client's mounts: the CA certificate alone, read-only (the run's PKI directory also
    holds the server's private key, which no client image may read), and `mounts`, writable."""
    ca = Path(pki_dir).resolve() / "ca.pem"
    return ("-v", f"{ca}:{CLIENT_PKI}/ca.pem:ro", *(a for h, c in mounts for a in ("-v", f"{h}:{c}")))


# A server's first connection after the path comes up cost half an RTT more than every later
# one (+40 ms on india, +150 ms at 300 ms RTT): its container has no neighbour (ARP) entry for
# its gateway yet, and the lookup's reply crosses the emulated delay (`quicbed explain` shows
# the SYN-ACK one one-way delay late). Calibration pings the first server only. A ping from
# the router makes the entries (the router's for the server, the server's for its gateway):
# the fetches below cannot where the client's image has no tls_perf or quic_perf (a stack's
# own, quicbed/quicgo), and the first trial of every stack to nginx and HAProxy (servers 1
# and 2) was 40 ms late in three CIs. One untimed fetch over TCP and one over QUIC take any
# first-handshake cost of the server itself, before anything is measured.
WARM_UP_URL = f"https://{SERVER_NAME}/web/index.html"  # a 404 without web content: same handshake
WARM_UP_TIMEOUT_S = 10


def warm_up(tb: Testbed, host: DockerHost, name: str) -> None:
    """After a server starts: the client fetches from it once per transport, untimed. A failure
    is left to the trials, which record theirs; the access-log lines come before any trial's.
    Only over what the server speaks (an HTTP/3-only server has no TCP listener)."""
    address = server_address(tb.servers.index(host))
    # Neighbours resolved before any trial: the router's of the server, and the client's of its
    # gateway. The host's ping in each namespace (a stack client's image may have neither ping
    # nor the perf tools below). Where the link runs in a router kernel (UML, QEMU), an ARP
    # reply to the client crosses the delayed egress: a cold entry cost the first trial of a
    # stack client half an RTT on india.
    for node in (tb.router, tb.client):
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            node.run(["ping", "-n", "-q", "-c", "1", "-W", "5", address], timeout=10, check=False)
    spec = get_server(name)
    tools = [
        tool
        for tool, http in (("tls_perf", TCP_HTTP), ("quic_perf", QUIC_HTTP))
        if any(h in spec.http_versions for h in http)
    ]
    for tool in tools:
        argv = warm_up_argv(tool, address)
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            tb.client.exec(argv, timeout=WARM_UP_TIMEOUT_S + 5)


def warm_up_argv(tool: str, address: str) -> list[str]:
    """The warm-up's fetch: the contract's arguments alone (quicbed.perfargs; clients.tools is a
    layer above this one), with no --cpu: untimed."""
    resolve = f"{SERVER_NAME}:443:{address}"
    return contract_argv((tool,), WARM_UP_URL, resolve, f"{CLIENT_PKI}/ca.pem", WARM_UP_TIMEOUT_S, cpu=False)
