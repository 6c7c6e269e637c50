"""Where the emulated link's tc commands run.

- `netem`: the router namespace forwards, and the host kernel's htb+netem shape its egress.
- `uml`: the host kernel has no sch_netem (this machine, CI, WSL2). A User-Mode Linux kernel,
  whose modules include sch_netem, is the router: its two vector interfaces sit on veths in the
  router namespace, and the same tc commands run inside it.

Both present the same interface: `forward(...)` makes the router route between the client
LAN and the server LAN, `tc(...)` runs tc argument lists on the router's egress devices.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from quicbed.errors import EnvironmentProblem, InputError
from quicbed.paths import REPO, STATE
from quicbed.topology.hosts import NsHost

UML_BINARY = "linux.uml"
UML_MARK = "umid=quicbed-"
UML_SOCKET_BUFFER = 8 << 20
RMEM_DEFAULT = Path("/proc/sys/net/core/rmem_default")  # `quicbed clean` finds UML routers by this argument


@dataclass(frozen=True)
class Lan:
    """One side of the router: a bridge in the router namespace and the router's address."""

    bridge: str
    router_cidr: str


class Backend(ABC):
    name: str
    down_dev: str  # egress toward the clients (the "down" direction)
    up_dev: str    # egress toward the servers (the "up" direction)

    def __init__(self, router: NsHost, state_dir: Path) -> None:
        self.router, self.state_dir = router, state_dir

    @abstractmethod
    def forward(self, client_lan: Lan, server_lan: Lan) -> None: ...

    @abstractmethod
    def tc(self, commands: Sequence[Sequence[str]]) -> str:
        """Run tc argument lists on the router; raise InputError if one is refused."""

    @abstractmethod
    def counters(self) -> dict[str, dict[str, int]]:
        """Packet and byte counters of the router's two egress devices."""

    def stop(self) -> None:  # noqa: B027 - optional hook
        pass

    def describe(self) -> dict[str, str]:
        return {"backend": self.name}


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


def _parse_counters(ip_json: str) -> dict[str, int]:
    import json

    stats = json.loads(ip_json)[0]["stats64"]
    return {"tx_packets": stats["tx"]["packets"], "tx_bytes": stats["tx"]["bytes"],
            "rx_packets": stats["rx"]["packets"], "rx_bytes": stats["rx"]["bytes"]}


class NetemBackend(Backend):
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

    def counters(self) -> dict[str, dict[str, int]]:
        out = {}
        for dev in (self.down_dev, self.up_dev):
            proc = self.router.run(["ip", "-s", "-j", "link", "show", dev])
            out[dev] = _parse_counters(proc.stdout)
        return out


class UmlBackend(Backend):
    name = "uml"
    down_dev, up_dev = "vec0", "vec1"
    BOOT_TIMEOUT = 30.0
    COMMAND_TIMEOUT = 15.0

    def __init__(self, router: NsHost, state_dir: Path) -> None:
        super().__init__(router, state_dir)
        self.ctl = state_dir / "uml"
        self.umid = f"quicbed-{uuid.uuid4().hex[:8]}"
        self.process: subprocess.Popen[bytes] | None = None

    def forward(self, client_lan: Lan, server_lan: Lan) -> None:
        if not shutil.which(UML_BINARY):
            raise EnvironmentProblem("the UML backend needs Debian's user-mode-linux package "
                                     "(apt-get install user-mode-linux)")
        r = self.router.run
        # The router namespace only carries frames: UML's vector devices own the addresses.
        for lan, veth in ((client_lan, "uml0"), (server_lan, "uml1")):
            r(["ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}br"])
            r(["ip", "link", "set", f"{veth}br", "master", lan.bridge])
            for dev in (veth, f"{veth}br"):
                r(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"])
                for feature in ("gso", "tso", "gro", "tx-udp-segmentation"):
                    r(["ethtool", "-K", dev, feature, "off"], check=False)
                r(["ip", "link", "set", dev, "up"])
        self.ctl.mkdir(parents=True, exist_ok=True)
        (self.ctl / "net.conf").write_text(f"VEC0_ADDR={client_lan.router_cidr}\n"
                                           f"VEC1_ADDR={server_lan.router_cidr}\n")
        self._boot()

    def _boot(self) -> None:
        init = REPO / "topology" / "uml_router.sh"
        argv = [UML_BINARY, "mem=256M", "rootfstype=hostfs", "rootflags=/", "ro",
                f"init={init}", f"QUICBED_CTL={self.ctl}", "con=null", "con0=null,fd:1",
                f"umid={self.umid}",
                "vec0:transport=raw,ifname=uml0", "vec1:transport=raw,ifname=uml1"]
        log = open(self.ctl / "console.log", "wb")  # noqa: SIM115 - UML writes it until stop
        # UML's packet sockets take the host's default receive buffer when its init brings
        # vec0/vec1 up; 208 KB overflowed whenever UML waited for the CPU (hundreds of drops
        # a second at 100 Mbit/s), so the default is raised for the boot only.
        with _socket_default(RMEM_DEFAULT, UML_SOCKET_BUFFER):
            self.process = subprocess.Popen(self.router.popen_argv(argv),
                                            stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + self.BOOT_TIMEOUT
            while not (self.ctl / "ready").exists():
                if self.process.poll() is not None or time.monotonic() > deadline:
                    tail = (self.ctl / "console.log").read_text(errors="replace")[-1500:]
                    raise EnvironmentProblem(f"the UML router did not come up:\n{tail}")
                time.sleep(0.05)

    def run(self, script: str) -> tuple[int, str]:
        """Run a shell script inside the UML router through the control directory."""
        for name in ("rc", "out"):
            (self.ctl / name).unlink(missing_ok=True)
        tmp = self.ctl / "cmd.tmp"
        tmp.write_text(script)
        os.replace(tmp, self.ctl / "cmd")
        deadline = time.monotonic() + self.COMMAND_TIMEOUT
        while not (self.ctl / "rc").exists():
            if self.process is None or self.process.poll() is not None:
                raise EnvironmentProblem("the UML router has stopped")
            if time.monotonic() > deadline:
                raise EnvironmentProblem("the UML router did not answer a command in time")
            time.sleep(0.02)
        return int((self.ctl / "rc").read_text().strip() or 1), (self.ctl / "out").read_text()

    def tc(self, commands: Sequence[Sequence[str]]) -> str:
        rc, out = self.run(tc_script(commands))
        if rc != 0:
            raise InputError(f"the UML router refused a link parameter: {out.strip()}")
        return out

    def counters(self) -> dict[str, dict[str, int]]:
        out = {}
        for dev in (self.down_dev, self.up_dev):
            rc, text = self.run(f"ip -s -j link show {dev}\n")
            if rc != 0:
                raise EnvironmentProblem(f"cannot read counters of {dev} in UML: {text}")
            out[dev] = _parse_counters(text)
        return out

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            # UML runs as a process group (its processes are ptrace children): end them all.
            try:
                os.killpg(self.process.pid, 9)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)
        shutil.rmtree(Path.home() / ".uml" / self.umid, ignore_errors=True)

    def describe(self) -> dict[str, str]:
        ready = self.ctl / "ready"
        kernel = ready.read_text().strip() if ready.exists() else "?"
        return {"backend": self.name, "uml_kernel": kernel}


@contextlib.contextmanager
def _socket_default(path: Path, value: int) -> Iterator[None]:
    old = path.read_text().strip()
    path.write_text(str(max(value, int(old))))
    try:
        yield
    finally:
        path.write_text(old)


BACKENDS = {"netem": NetemBackend, "uml": UmlBackend}


def host_has_netem() -> bool:
    """Probe for sch_netem in a scratch namespace (never touches a real interface)."""
    ns = f"quicbed-probe-{os.getpid()}"
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        subprocess.run(["ip", "-n", ns, "link", "add", "probe0", "type", "veth", "peer", "name",
                        "probe1"], check=True, capture_output=True)
        proc = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "probe0",
                               "root", "netem", "delay", "1ms"], capture_output=True)
        return proc.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def choose_backend(requested: str | None) -> str:
    """The backend named by the user, else netem if the kernel has it, else UML."""
    if requested and requested != "auto":
        if requested not in BACKENDS:
            raise InputError(f"unknown link backend {requested!r} "
                             f"(choose from auto, {', '.join(BACKENDS)})", field="--backend")
        if requested == "netem" and not host_has_netem():
            raise EnvironmentProblem("this kernel has no sch_netem (tc qdisc netem fails); "
                                     "use --backend uml or leave it on auto")
        return requested
    return "netem" if host_has_netem() else "uml"


def make_backend(name: str, router: NsHost, state_dir: Path) -> Backend:
    return BACKENDS[name](router, state_dir)


def router_state_dir(run_id: str) -> Path:
    path = STATE / "runs" / run_id
    path.mkdir(parents=True, exist_ok=True)
    return path
