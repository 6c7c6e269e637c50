"""`delayline`: the host kernel has no sch_netem (auto's choice there: backends/__init__.py says
why), at any rate up to 1 Gbit/s. The router namespace routes; between its interfaces and the
LAN bridges, a C delay line (topology/delayline) applies netem's algorithms to the router's
egress in user space. This module builds it, wires it, writes its settings from a `LinkSpec`,
and stops it."""

from __future__ import annotations

import glob
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

from quicbed.doctor import require
from quicbed.errors import EnvironmentProblem, HostProblem, InputError, QuicbedError
from quicbed.hostcalls import BUILD_TIMEOUT_S, PROBE_TIMEOUT_S, host_run
from quicbed.paths import REPO
from quicbed.topology.backends.base import Backend, Impairment, Lan, frame_port_up
from quicbed.topology.backends.proof import Proof
from quicbed.topology.hosts import NsHost
from quicbed.topology.linkspec import LinkSpec
from quicbed.topology.traces import OPPORTUNITY_BYTES

DELAYLINE_DIR = REPO / "topology" / "delayline"
DELAYLINE_MARK = "quicbed-delayline"  # `quicbed clean` finds delay lines by this
DELAYLINE_BINARY = DELAYLINE_DIR / "build" / DELAYLINE_MARK


class DelayLineBackend(Backend):
    """netem's algorithms in a user-space delay line (topology/delayline/delayline.c).

    Per side, the router's address sits on a veth (dlrc, dlrs) and the LAN bridge gets another
    (dlbc, dlbs); the delay line joins their free ends (…x). Frames leaving the router are
    impaired and delayed; frames toward the router pass at once. So, as with netem, each
    direction is shaped on the router's egress, and the htb stage after it is unchanged.
    """

    name = "delayline"
    replays_traces = True
    carries_super_frames = True  # delayline.c: whole where only delay applies, else cut
    # Right after the host's netem: it carries every LinkSpec feature, runs on every CPU, up
    # to 1 Gbit/s, and a pause (steal) makes a packet late, never early (backends/__init__.py).
    auto_rank = 10
    marks = (DELAYLINE_MARK,)
    down_dev, up_dev = "dlbcx", "dlbsx"
    SIDES = (("down", "c"), ("up", "s"))
    APPLY_TIMEOUT = 5.0

    @classmethod
    def prove(cls, fresh: bool = False) -> Proof:
        """It builds, and its binary runs: with no arguments it prints its usage and exits 2."""
        try:
            binary = build_delayline()
        except QuicbedError as exc:
            return Proof("delayline", False, str(exc).splitlines()[0], setup=True)
        try:
            proc = host_run([str(binary)], PROBE_TIMEOUT_S)
        except HostProblem as exc:
            return Proof("delayline", False, str(exc), setup=True)
        if proc.returncode != 2 or "usage" not in proc.stderr:
            return Proof(
                "delayline",
                False,
                f"the delay line does not run here (exit {proc.returncode}): {proc.stderr.strip()[-200:]}",
                setup=True,
            )
        return Proof("delayline", True, "the user-space delay line runs everywhere")

    def __init__(self, router: NsHost, state_dir: Path) -> None:
        super().__init__(router, state_dir)
        self.dir = state_dir / "delayline"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.generation = 0
        self.seed = int.from_bytes(os.urandom(6), "big")
        self.kernel_returns = False

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
                frame_port_up(self.router, dev, super_frames=True)
        r(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        self.kernel_returns = all(self._kernel_return(side) for _, side in self.SIDES)
        self.dir.mkdir(parents=True, exist_ok=True)
        idle = LinkSpec(rate_mbit=1.0)
        self._write_configs((idle, 0.0), (idle, 0.0))
        for direction, side in self.SIDES:
            argv = [
                str(binary),
                "--a",
                f"dlr{side}x",
                "--b",
                f"dlb{side}x",
                "--config",
                str(self.dir / f"{direction}.conf"),
                "--applied",
                str(self.dir / f"{direction}.applied"),
                *(["--return", "kernel"] if self.kernel_returns else []),
            ]
            log = open(self.dir / f"{direction}.log", "wb")  # written until stop
            self.processes[direction] = subprocess.Popen(
                self.router.popen_argv(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_applied()

    def _kernel_return(self, side: str) -> bool:
        """Frames toward the router need no treatment: tc mirred redirects them from the
        bridge's veth end straight onto the router's, in the kernel, where the delay line
        would read and write each (at 1 Gbit/s of MTU frames, most of its CPU). Where the
        host's tc lacks clsact, u32 or mirred, the delay line passes them itself."""
        bridge_end, router_end = f"dlb{side}x", f"dlr{side}x"
        redirect = [
            ["tc", "qdisc", "add", "dev", bridge_end, "clsact"],
            ["tc", "filter", "add", "dev", bridge_end, "ingress", "protocol", "all", "u32"]
            + ["match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", router_end],
        ]
        for argv in redirect:
            if self.router.run(argv, check=False).returncode != 0:
                self.router.run(["tc", "qdisc", "del", "dev", bridge_end, "clsact"], check=False)
                return False
        return True

    def impair(self, down: Impairment, up: Impairment) -> None:
        self._write_configs(down, up)
        for process in self.processes.values():
            process.send_signal(signal.SIGHUP)
        self._wait_applied()

    def _write_configs(self, down: Impairment, up: Impairment) -> None:
        self.generation += 1
        rtt_ms = down[0].delay_ms + up[0].delay_ms
        for (direction, _), (spec, delay_ms) in zip(self.SIDES, (down, up), strict=True):
            seed = self.seed + (direction == "up")
            text = delayline_config(spec, delay_ms, seed, self.generation, rtt_ms)
            tmp = self.dir / f"{direction}.conf.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.dir / f"{direction}.conf")

    def _wait_applied(self) -> None:
        deadline = time.monotonic() + self.APPLY_TIMEOUT
        for direction, process in self.processes.items():
            while self.applied(direction).get("generation") != self.generation:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (self.dir / f"{direction}.log").read_text(errors="replace")[-1500:]
                    raise EnvironmentProblem(
                        f"the {direction} delay line did not take its " f"settings:\n{log}"
                    )
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

    def trace_start_ns(self, direction: str) -> int:
        return self.applied(direction).get("trace_start_ns", 0)

    def router_pids(self) -> list[int]:
        return [p.pid for p in self.processes.values()]

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
        return {
            "backend": self.name,
            "delayline_sha256": _sha256(DELAYLINE_BINARY)[:16],
            "delayline_seed": str(self.seed),
            "delayline_priority": self.priority(),
            "delayline_return": "tc mirred" if self.kernel_returns else "delay line",
        }

    def priority(self) -> str:
        """How the delay lines are scheduled: "SCHED_FIFO 50", ahead of the endpoints'
        processes, or "default" where the host refused it (then busy endpoints can hold
        packets back by a scheduler slice, milliseconds: delayline.c's take_realtime; the
        report says so beside the backend)."""
        flags = {self.applied(direction).get("realtime") for direction, _ in self.SIDES}
        return "SCHED_FIFO 50" if flags == {1} else "default"


def delayline_config(spec: LinkSpec, delay_ms: float, seed: int, generation: int, rtt_ms: float = 0.0) -> str:
    """The delay line's settings for one direction: netem's parameters, key=value, and a
    trace-driven link's trace and drop-tail queue: the link's queue size at the trace's mean
    rate (queue_packets, queue_ms or one BDP of `rtt_ms`) in MTU-sized packets, held as bytes
    so that small packets do not fill it (a loss probe's 92-byte datagrams in an outage)."""
    lines = {
        "delay_us": f"{delay_ms * 1000:.1f}",
        "jitter_us": f"{spec.jitter_ms * 1000:.1f}",
        "limit": str(spec.delay_line_limit()),
        "seed": str(seed),
        "generation": str(generation),
    }
    if spec.jitter_ms > 0:
        lines["distribution"] = jitter_table(spec.jitter_distribution)
    if spec.gemodel:
        g = spec.gemodel
        lines.update(
            ge_p=f"{g.p:g}", ge_r=f"{g.r:g}", ge_loss_bad=f"{g.loss_bad:g}", ge_loss_good=f"{g.loss_good:g}"
        )
    elif spec.loss_pct > 0:
        lines["loss_pct"] = f"{spec.loss_pct:g}"
    if spec.reorder_pct > 0:
        lines["reorder_pct"] = f"{spec.reorder_pct:g}"
    if spec.duplicate_pct > 0:
        lines["duplicate_pct"] = f"{spec.duplicate_pct:g}"
    if spec.trace:
        lines["trace"] = spec.trace
        lines["link_limit_bytes"] = str(spec.queue_size_packets(rtt_ms) * OPPORTUNITY_BYTES)
    unsafe = [key for key, value in lines.items() if any(ord(c) < 32 for c in value)]
    if unsafe:  # load_trace refuses such a path first; a newline here would add keys
        raise InputError(f"the delay line's {unsafe[0]} holds a control character: {lines[unsafe[0]]!r}")
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def jitter_table(name: str) -> str:
    """iproute2's table for a jitter distribution (the one tc would load), or "uniform"."""
    if name == "uniform":
        return name
    for pattern in (
        f"/usr/lib/*/tc/{name}.dist",
        f"/usr/lib/tc/{name}.dist",
        f"/usr/lib64/tc/{name}.dist",
        f"/usr/share/tc/{name}.dist",
    ):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise EnvironmentProblem(f"no iproute2 table for the {name} distribution " "(apt-get install iproute2)")


def build_delayline() -> Path:
    """The delay line binary, compiled if missing or older than its source (about a second)."""
    source = DELAYLINE_DIR / "delayline.c"
    if DELAYLINE_BINARY.exists() and DELAYLINE_BINARY.stat().st_mtime >= source.stat().st_mtime:
        return DELAYLINE_BINARY
    require("delayline")
    proc = host_run(["make", "-s", "-C", str(DELAYLINE_DIR)], BUILD_TIMEOUT_S)
    if proc.returncode != 0 or not DELAYLINE_BINARY.exists():
        raise EnvironmentProblem(
            "cannot build the delay line (needs cc and make): "
            f"{(proc.stderr or proc.stdout).strip()[-800:]}"
        )
    return DELAYLINE_BINARY


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "?"
