"""Where the emulated link's netem stage (delay, jitter, loss) runs.

- `netem`: the router namespace forwards, and the host kernel's netem shapes its egress.
- `uml`: the host kernel has no sch_netem (this machine, CI, WSL2). A User-Mode Linux kernel,
  whose modules include sch_netem, is the router: its two vector interfaces sit on veths in the
  router namespace, and the same tc commands run inside it.
- `delayline`: no sch_netem either, at rates one UML vCPU cannot forward (> 100 Mbit/s here).
  The router namespace routes; between its interfaces and the LAN bridges, a C delay line
  (topology/delayline) applies netem's algorithms to the router's egress in user space.

All present the same interface: `forward(...)` makes the router route between the client LAN
and the server LAN, `impair(...)` sets the netem stage of both directions, `counters()` reads
the egress devices. The rate stage (htb) is the host kernel's in every backend (net.py).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from quicbed.doctor import require
from quicbed.errors import EnvironmentProblem, InputError
from quicbed.paths import REPO, STATE
from quicbed.topology.hosts import NsHost
from quicbed.topology.linkspec import LinkSpec, netem_commands

UML_BINARY = "linux.uml"
UML_MARK = "umid=quicbed-"
UML_SOCKET_BUFFER = 8 << 20
RMEM_DEFAULT = Path("/proc/sys/net/core/rmem_default")
DELAYLINE_DIR = REPO / "topology" / "delayline"
DELAYLINE_MARK = "quicbed-delayline"  # `quicbed clean` finds UML routers and delay lines by these
DELAYLINE_BINARY = DELAYLINE_DIR / "build" / DELAYLINE_MARK
UML_MAX_RATE_MBIT = 100.0  # above this, one UML vCPU falls short of the rate (bench/link_bench.py)

# One direction of the netem stage: the spec and the delay netem should add (the spec's delay
# minus what the path itself adds).
Impairment = tuple[LinkSpec, float]


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
    def impair(self, down: Impairment, up: Impairment) -> None:
        """Set the netem stage of both directions; raise InputError if it cannot be applied."""

    def counters(self) -> dict[str, dict[str, int]]:
        """Packet and byte counters of the router's two egress devices (in its namespace)."""
        out = {}
        for dev in (self.down_dev, self.up_dev):
            proc = self.router.run(["ip", "-s", "-j", "link", "show", dev])
            out[dev] = _parse_counters(proc.stdout)
        return out

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


def _frame_port_up(router: NsHost, dev: str) -> None:
    """A veth end that only carries frames between the router and a LAN: no IPv6 chatter,
    no super-packets (rate and loss stay per packet), up."""
    router.run(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"])
    for feature in ("gso", "tso", "gro", "tx-udp-segmentation"):
        router.run(["ethtool", "-K", dev, feature, "off"], check=False)
    router.run(["ip", "link", "set", dev, "up"])


def _parse_counters(ip_json: str) -> dict[str, int]:
    import json

    stats = json.loads(ip_json)[0]["stats64"]
    return {"tx_packets": stats["tx"]["packets"], "tx_bytes": stats["tx"]["bytes"],
            "rx_packets": stats["rx"]["packets"], "rx_bytes": stats["rx"]["bytes"]}


class TcBackend(Backend):
    """A backend whose netem stage is the kernel's: tc argument lists on its egress devices."""

    @abstractmethod
    def tc(self, commands: Sequence[Sequence[str]]) -> str:
        """Run tc argument lists on the router; raise InputError if one is refused."""

    def impair(self, down: Impairment, up: Impairment) -> None:
        self.tc([*netem_commands(self.down_dev, down[0], delay_ms=down[1]),
                 *netem_commands(self.up_dev, up[0], delay_ms=up[1])])


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


class UmlBackend(TcBackend):
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
        require("uml")  # linux.uml, and what its init runs from the host's / (insmod...)
        r = self.router.run
        # The router namespace only carries frames: UML's vector devices own the addresses.
        for lan, veth in ((client_lan, "uml0"), (server_lan, "uml1")):
            r(["ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}br"])
            r(["ip", "link", "set", f"{veth}br", "master", lan.bridge])
            for dev in (veth, f"{veth}br"):
                _frame_port_up(self.router, dev)
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


class DelayLineBackend(Backend):
    """netem's algorithms in a user-space delay line (topology/delayline/delayline.c).

    Per side, the router's address sits on a veth (dlrc, dlrs) and the LAN bridge gets another
    (dlbc, dlbs); the delay line joins their free ends (…x). Frames leaving the router are
    impaired and delayed; frames toward the router pass at once. So, as with netem, each
    direction is shaped on the router's egress, and the htb stage after it is unchanged.
    """

    name = "delayline"
    down_dev, up_dev = "dlbcx", "dlbsx"
    SIDES = (("down", "c"), ("up", "s"))
    APPLY_TIMEOUT = 5.0

    def __init__(self, router: NsHost, state_dir: Path) -> None:
        super().__init__(router, state_dir)
        self.dir = state_dir / "delayline"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.generation = 0
        self.seed = int.from_bytes(os.urandom(6), "big")

    def forward(self, client_lan: Lan, server_lan: Lan) -> None:
        binary = build_delayline()
        r = self.router.run
        for (_, side), lan in zip(self.SIDES, (client_lan, server_lan), strict=True):
            router_if, bridge_if = f"dlr{side}", f"dlb{side}"
            for dev in (router_if, bridge_if):
                r(["ip", "link", "add", dev, "type", "veth", "peer", "name", f"{dev}x"])
            r(["ip", "link", "set", bridge_if, "master", lan.bridge])
            r(["ip", "addr", "add", lan.router_cidr, "dev", router_if])
            for dev in (router_if, f"{router_if}x", bridge_if, f"{bridge_if}x"):
                _frame_port_up(self.router, dev)
        r(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        self.dir.mkdir(parents=True, exist_ok=True)
        idle = LinkSpec(rate_mbit=1.0)
        self._write_configs((idle, 0.0), (idle, 0.0))
        for direction, side in self.SIDES:
            argv = [str(binary), "--a", f"dlr{side}x", "--b", f"dlb{side}x",
                    "--config", str(self.dir / f"{direction}.conf"),
                    "--applied", str(self.dir / f"{direction}.applied")]
            log = open(self.dir / f"{direction}.log", "wb")  # noqa: SIM115 - written until stop
            self.processes[direction] = subprocess.Popen(
                self.router.popen_argv(argv), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_applied()

    def impair(self, down: Impairment, up: Impairment) -> None:
        self._write_configs(down, up)
        for process in self.processes.values():
            process.send_signal(signal.SIGHUP)
        self._wait_applied()

    def _write_configs(self, down: Impairment, up: Impairment) -> None:
        self.generation += 1
        for (direction, _), (spec, delay_ms) in zip(self.SIDES, (down, up), strict=True):
            text = delayline_config(spec, delay_ms, self.seed + (direction == "up"),
                                    self.generation)
            tmp = self.dir / f"{direction}.conf.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.dir / f"{direction}.conf")

    def _wait_applied(self) -> None:
        deadline = time.monotonic() + self.APPLY_TIMEOUT
        for direction, process in self.processes.items():
            while self.applied(direction).get("generation") != self.generation:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (self.dir / f"{direction}.log").read_text(errors="replace")[-1500:]
                    raise EnvironmentProblem(f"the {direction} delay line did not take its "
                                             f"settings:\n{log}")
                time.sleep(0.01)

    def applied(self, direction: str) -> dict[str, int]:
        """The delay line's settings generation and counters (received, lost, over its limit,
        …) as of its last change of settings, or its exit."""
        path = self.dir / f"{direction}.applied"
        try:
            lines = path.read_text().split()
        except OSError:
            return {}
        return {key: int(value) for key, value in (ln.split("=", 1) for ln in lines)}

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()  # it writes its final counters
        for process in self.processes.values():
            try:
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self.processes.clear()

    def describe(self) -> dict[str, str]:
        return {"backend": self.name, "delayline_sha256": _sha256(DELAYLINE_BINARY)[:16],
                "delayline_seed": str(self.seed)}


def delayline_config(spec: LinkSpec, delay_ms: float, seed: int, generation: int) -> str:
    """The delay line's settings for one direction: netem's parameters, key=value."""
    lines = {"delay_us": f"{delay_ms * 1000:.1f}", "jitter_us": f"{spec.jitter_ms * 1000:.1f}",
             "limit": str(spec.delay_line_limit()), "seed": str(seed),
             "generation": str(generation)}
    if spec.jitter_ms > 0:
        lines["distribution"] = jitter_table(spec.jitter_distribution)
    if spec.gemodel:
        g = spec.gemodel
        lines.update(ge_p=f"{g.p:g}", ge_r=f"{g.r:g}", ge_loss_bad=f"{g.loss_bad:g}",
                     ge_loss_good=f"{g.loss_good:g}")
    elif spec.loss_pct > 0:
        lines["loss_pct"] = f"{spec.loss_pct:g}"
    if spec.reorder_pct > 0:
        lines["reorder_pct"] = f"{spec.reorder_pct:g}"
    if spec.duplicate_pct > 0:
        lines["duplicate_pct"] = f"{spec.duplicate_pct:g}"
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def jitter_table(name: str) -> str:
    """iproute2's table for a jitter distribution (the one tc would load), or "uniform"."""
    if name == "uniform":
        return name
    for pattern in (f"/usr/lib/*/tc/{name}.dist", f"/usr/lib/tc/{name}.dist",
                    f"/usr/lib64/tc/{name}.dist", f"/usr/share/tc/{name}.dist"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise EnvironmentProblem(f"no iproute2 table for the {name} distribution "
                             "(apt-get install iproute2)")


def build_delayline() -> Path:
    """The delay line binary, compiled if missing or older than its source (about a second)."""
    source = DELAYLINE_DIR / "delayline.c"
    if DELAYLINE_BINARY.exists() and DELAYLINE_BINARY.stat().st_mtime >= source.stat().st_mtime:
        return DELAYLINE_BINARY
    require("delayline")
    proc = subprocess.run(["make", "-s", "-C", str(DELAYLINE_DIR)], capture_output=True,
                          text=True)
    if proc.returncode != 0 or not DELAYLINE_BINARY.exists():
        raise EnvironmentProblem("cannot build the delay line (needs cc and make): "
                                 f"{(proc.stderr or proc.stdout).strip()[-800:]}")
    return DELAYLINE_BINARY


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "?"


BACKENDS = {"netem": NetemBackend, "uml": UmlBackend, "delayline": DelayLineBackend}


@functools.cache
def host_has_netem() -> bool:
    """Probe for sch_netem in a scratch namespace (never touches a real interface); once per
    process, as every testbed and the executor ask and the kernel does not change."""
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


def choose_backend(requested: str | None, max_rate_mbit: float = 0.0) -> str:
    """The backend named by the user; else netem if the kernel has it; else UML, or the delay
    line for rates a UML router cannot forward."""
    if requested and requested != "auto":
        if requested not in BACKENDS:
            raise InputError(f"unknown link backend {requested!r} "
                             f"(choose from auto, {', '.join(BACKENDS)})", field="--backend")
        if requested == "netem" and not host_has_netem():
            raise EnvironmentProblem("this kernel has no sch_netem (tc qdisc netem fails); "
                                     "use --backend uml or leave it on auto")
        return requested
    if host_has_netem():
        return "netem"
    return "delayline" if max_rate_mbit > UML_MAX_RATE_MBIT else "uml"


def make_backend(name: str, router: NsHost, state_dir: Path) -> Backend:
    return BACKENDS[name](router, state_dir)


def router_state_dir(run_id: str) -> Path:
    path = STATE / "runs" / run_id
    path.mkdir(parents=True, exist_ok=True)
    return path
