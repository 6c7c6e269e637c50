"""`quicbed doctor`: is everything the testbed needs on this host? One line per item, ok or
missing with the exact fix.

HOST_COMMANDS is the one list of the programs the testbed runs from the host's filesystem
(directly, in a namespace through nsenter, or from the UML router's init, whose root is the
host's /). The code asks `require()` before it uses a group of them, a test holds the list
against the code (tests/base/test_doctor.py) and another checks with `dpkg -S` that the Makefile
installs the package that provides each one: a command that is on this machine by chance
cannot hide any more (a missing `insmod` once failed 29 tests on a fresh machine).

This module uses the standard library only, so that it also runs as a script
(`python3 quicbed/doctor.py --commands-only`) in a bare container before any venv exists.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

RMEM_MIN = 8 << 20  # quic-go asks for ~7 MB UDP buffers; containers inherit the host's maximum
UML_MODULE_DIR = "/usr/lib/uml/modules/*/kernel"
# Every module the UML router's init (uml_router.sh) and the netem guest's (uml_guest.sh) load
# with insmod, under UML_MODULE_DIR (tests/base/test_doctor.py holds the list against the scripts).
UML_MODULES = (
    "lib/crc-ccitt",
    "net/ipv6/ipv6",
    "net/llc/llc",
    "net/802/stp",
    "net/bridge/bridge",
    "drivers/net/veth",
    "net/sched/sch_htb",
    "net/sched/sch_tbf",
    "net/sched/sch_netem",
    # the bottleneck queues (`aqm`) the netem guest runs where the host kernel has none
    "net/sched/sch_fq_codel",
    "net/sched/sch_codel",
    "net/sched/sch_cake",
    "net/sched/sch_pie",
    "net/sched/sch_fq",
)


@dataclass(frozen=True)
class HostCommand:
    name: str
    package: str  # the Debian package that provides it; "a|b": a where the release has it, else b
    group: str  # who needs it: core, uml (the UML router's init), delayline, images, bench
    why: str


HOST_COMMANDS: tuple[HostCommand, ...] = (
    HostCommand("ip", "iproute2", "core", "namespaces, veths, bridges, routes"),
    HostCommand("tc", "iproute2", "core", "rate shaping (htb) and netem"),
    HostCommand("nsenter", "util-linux", "core", "commands inside a host's namespace"),
    HostCommand("ethtool", "ethtool", "core", "offloads off on every link"),
    HostCommand("iperf3", "iperf3", "core", "calibration's goodput test"),
    HostCommand("timeout", "coreutils", "core", "bounds calibration's iperf3 client"),
    HostCommand("sh", "dash", "core", "Mininet's interface commands"),
    HostCommand("mnexec", "mininet", "core", "Mininet's namespace hosts (router, cross)"),
    # Mininet's Intf.setIP runs ifconfig; HostIntf runs it from the host inside the namespace
    # (the code scan cannot see a command Mininet spells itself).
    HostCommand("ifconfig", "net-tools", "core", "Mininet's Intf.setIP, run in each namespace"),
    HostCommand("python3", "python3-minimal", "core", "the UDP loss probe in a namespace"),
    HostCommand("openssl", "openssl", "core", "the per-run PKI"),
    HostCommand("sysctl", "procps", "core", "per-namespace TCP settings and socket buffers"),
    HostCommand("ping", "iputils-ping", "core", "the router's forwarding latency at bring-up"),
    HostCommand("git", "git", "core", "the commit recorded in every run's manifest"),
    HostCommand("docker", "docker-cli|docker.io", "core", "container hosts (docker-cli from Debian 13)"),
    HostCommand("dockerd", "docker.io", "core", "the Docker engine (make docker starts it)"),
    HostCommand("linux.uml", "user-mode-linux", "uml", "the UML router (--backend uml) without host netem"),
    HostCommand("insmod", "kmod", "uml", "the UML inits load their kernel modules (qdiscs, veth, bridge)"),
    HostCommand("mount", "mount", "uml", "the UML router's init mounts proc, sys, hostfs"),
    HostCommand("mkfifo", "coreutils", "uml", "the UML router's init waits on a fifo"),
    HostCommand("uname", "coreutils", "uml", "the UML router's init finds its modules"),
    HostCommand("dirname", "coreutils", "uml", "the router inits find router_serve.sh beside them"),
    HostCommand("sync", "coreutils", "uml", "the netem guest's init flushes its results to the host"),
    HostCommand("qemu-system-x86_64", "qemu-system-x86", "vm", "the QEMU router (Debian's kernel)"),
    HostCommand("busybox", "busybox-static", "vm", "the QEMU router's initramfs (static)"),
    HostCommand("nice", "coreutils", "vm", "the QEMU router gets the CPU before the endpoints"),
    HostCommand("modprobe", "kmod", "vm", "the QEMU router's module list (--show-depends)"),
    HostCommand("depmod", "kmod", "vm", "indexes the QEMU router's kernel modules"),
    HostCommand("dpkg-deb", "dpkg", "vm", "unpacks the QEMU router's kernel package"),
    HostCommand("apt-get", "apt", "vm", "downloads the QEMU router's kernel package (make vm)"),
    HostCommand("make", "make", "delayline", "builds the delay line (topology/delayline)"),
    HostCommand("gcc", "gcc", "delayline", "builds the delay line"),
    HostCommand("debootstrap", "debootstrap", "images", "base images without a registry"),
    HostCommand("docker-compose", "docker-compose", "images", "make compose-up"),
    HostCommand("tcpdump", "tcpdump", "bench", "bench/handshake_bench.py captures"),
)
GROUPS = ("core", "uml", "vm", "delayline", "images", "bench")


class MissingRequirement(Exception):
    """A host command is not installed (converted to EnvironmentProblem by require())."""


def commands(*groups: str) -> list[HostCommand]:
    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise ValueError(f"unknown requirement group(s) {sorted(unknown)}")
    return [c for c in HOST_COMMANDS if c.group in groups]


def declared(name: str) -> HostCommand:
    for cmd in HOST_COMMANDS:
        if cmd.name == name:
            return cmd
    raise KeyError(f"{name!r} is not in quicbed.doctor.HOST_COMMANDS")


def command_fix(cmd: HostCommand) -> str:
    first, *rest = cmd.package.split("|")
    return f"apt-get install {first}" + "".join(f" (or {alt})" for alt in rest)


# A non-root user's PATH on Debian has no sbin, where tc, ip and insmod live; the testbed runs
# them as root, whose PATH has it, so they count as present.
SBIN_DIRS = "/usr/local/sbin:/usr/sbin:/sbin"


def find_command(name: str) -> str | None:
    """The command's path on PATH, or in sbin."""
    return shutil.which(name) or shutil.which(name, path=SBIN_DIRS)


def require(*groups: str) -> None:
    """Raise EnvironmentProblem naming the package of every missing command of these groups:
    a clear line before the first use, not a `command not found` deep in a UML console log."""
    missing = [c for c in commands(*groups) if not find_command(c.name)]
    if not missing:
        return
    fixes = sorted({c.package.split("|")[0] for c in missing})
    message = (
        f"missing host command(s) {', '.join(c.name for c in missing)}: "
        f"apt-get install {' '.join(fixes)} (or make deps); `quicbed doctor` checks all"
    )
    try:
        from quicbed.errors import HostProblem
    except ImportError:  # run as a bare script
        raise MissingRequirement(message) from None
    raise HostProblem(message)


# -- checks ---------------------------------------------------------------------------------
@dataclass
class Check:
    item: str
    ok: bool
    detail: str  # what was found, or the exact fix
    optional: bool = False  # a missing optional item is reported but does not fail doctor


def check_commands() -> list[Check]:
    out = []
    for cmd in HOST_COMMANDS:
        path = find_command(cmd.name)
        out.append(Check(f"command {cmd.name}", bool(path), path or f"{command_fix(cmd)}  ({cmd.why})"))
    return out


def check_uml_modules() -> list[Check]:
    out = []
    for mod in UML_MODULES:
        found = glob.glob(f"{UML_MODULE_DIR}/{mod}.ko")
        out.append(
            Check(
                f"UML module {mod.rsplit('/', 1)[-1]}",
                bool(found),
                found[0] if found else "apt-get install user-mode-linux",
            )
        )
    return out


def _run(argv: list[str], timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def check_kernel() -> list[Check]:
    """Namespaces, veth, bridge, htb and netem, probed in a scratch namespace (no real link)."""
    ns = f"quicbed-doctor-{os.getpid()}"
    if _run(["ip", "netns", "add", ns]).returncode != 0:
        return [
            Check(
                "network namespaces",
                False,
                "ip netns add failed: needs root and a " "kernel with network namespaces",
            )
        ]
    try:

        def probe(argv: list[str]) -> bool:
            return _run(["ip", "netns", "exec", ns, *argv]).returncode == 0

        veth = probe(["ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        bridge = probe(["ip", "link", "add", "dbr", "type", "bridge"])
        htb = veth and probe(["tc", "qdisc", "add", "dev", "d0", "root", "handle", "1:", "htb"])
        netem = veth and probe(["tc", "qdisc", "add", "dev", "d1", "root", "netem", "delay", "1ms"])
    finally:
        _run(["ip", "netns", "del", ns])
    kernel = "a kernel with CONFIG_{} (no module loading here: a kernel that has it built in)"
    return [
        Check("network namespaces", True, "ip netns add works"),
        Check("kernel veth", veth, "ok" if veth else kernel.format("VETH")),
        Check("kernel bridge", bridge, "ok" if bridge else kernel.format("BRIDGE")),
        Check("kernel htb", htb, "ok" if htb else kernel.format("NET_SCH_HTB")),
        Check(
            "kernel netem",
            netem,
            "ok: the netem backend"
            if netem
            else "absent: the delay line stands in (auto's choice), the uml and vm routers when "
            "asked for or an aqm needs vm's kernel (their items below)",
            optional=True,
        ),
    ]


def check_sysctls() -> list[Check]:
    out = []
    for key in ("net.core.rmem_max", "net.core.wmem_max"):
        path = Path("/proc/sys") / key.replace(".", "/")
        try:
            value = int(path.read_text())
        except (OSError, ValueError):
            out.append(Check(f"sysctl {key}", False, f"cannot read {path}"))
            continue
        out.append(
            Check(
                f"sysctl {key}",
                value >= RMEM_MIN,
                str(value) if value >= RMEM_MIN else f"sysctl -w {key}={RMEM_MIN}",
            )
        )
    return out


def check_docker() -> list[Check]:
    try:  # _run's 20 s: a hung dockerd is said as the check's result, not a traceback
        proc = _run(["docker", "info", "--format", "{{.ServerVersion}}"]) if shutil.which("docker") else None
    except subprocess.TimeoutExpired:
        return [Check("Docker engine", False, "Docker did not answer within 20 s: docker info")]
    version = proc.stdout.strip() if proc is not None and proc.returncode == 0 else None
    running = version is not None
    out = [Check("Docker engine", running, f"running, {version}" if running else "not running: make docker")]
    if not running:
        return out
    try:
        images = described_images()
    except DescriptorProblem as exc:
        return [*out, Check("descriptors", False, str(exc))]
    for image, on_demand in images.items():
        try:
            have = _run(["docker", "image", "inspect", "-f", "{{.Id}}", image]).returncode == 0
        except subprocess.TimeoutExpired:
            have = False
        fix = "built by the first run or test that needs it" if on_demand else "make images"
        out.append(Check(f"image {image}", have, "present" if have else fix, optional=on_demand))
    return out


def described_images() -> dict[str, bool]:
    """The images a run may need, as the descriptors name them (`python -m quicbed.servers
    list` and the clients' alike): every described server's and client's image, each once,
    and whether it is built on demand (not by make images)."""
    images: dict[str, bool] = {}
    for kind in ("servers", "clients"):
        proc = _run([sys.executable, "-m", f"quicbed.{kind}", "list", "--json"])
        if proc.returncode != 0:  # a bad descriptor: its one line is the fix
            raise DescriptorProblem(proc.stderr.strip() or f"python -m quicbed.{kind} list failed")
        for entry in json.loads(proc.stdout):
            images[entry["image"]] = images.get(entry["image"], True) and bool(entry.get("on_demand"))
    return images


class DescriptorProblem(Exception):
    """A server or client descriptor the engine refuses."""


def check_delayline() -> list[Check]:
    build = REPO / "topology" / "delayline" / "build" / "quicbed-delayline"
    source = REPO / "topology" / "delayline" / "delayline.c"
    fresh = build.exists() and build.stat().st_mtime >= source.stat().st_mtime
    return [Check("delay line binary", fresh, str(build) if fresh else "make delayline")]


def check_python() -> list[Check]:
    out = []
    for module, fix in (
        ("mininet", "apt-get install mininet"),
        ("yaml", "make venv"),
        ("pandas", "make venv"),
        ("rich", "make venv"),
    ):
        try:
            __import__(module)
            out.append(Check(f"python module {module}", True, "importable"))
        except ImportError:
            out.append(Check(f"python module {module}", False, fix))
    return out


def all_checks(commands_only: bool, backends: Callable[[], list[Check]] | None = None) -> list[Check]:
    """Every check; `backends` boots the link backends (topology's, given by the CLI: this
    module stays below topology and runs as a bare script)."""
    checks = check_commands() + check_uml_modules()
    if commands_only:
        return checks
    steps: Iterable[Callable[[], list[Check]]] = (
        check_kernel,
        check_sysctls,
        check_delayline,
        check_python,
        *([backends] if backends else []),
        check_docker,
    )
    for step in steps:
        checks += step()
    return checks


def report(checks: list[Check], out=sys.stdout) -> int:  # a text stream
    width = max(len(c.item) for c in checks)
    failed = [c for c in checks if not c.ok and not c.optional]
    for c in checks:
        status = "ok" if c.ok else ("note" if c.optional else "MISSING")
        print(f"{c.item:<{width}}  {status:<7}  {c.detail}", file=out)
    if failed:
        print(
            f"doctor: {len(failed)} item(s) missing; the fixes are above (make deps installs "
            "every package)",
            file=out,
        )
        return 4  # EnvironmentProblem's exit code
    print(f"doctor: all {len(checks)} items ok", file=out)
    return 0


def run_doctor(commands_only: bool = False, backends: Callable[[], list[Check]] | None = None) -> int:
    if not commands_only and os.geteuid() != 0:
        print(
            "quicbed doctor: needs root for the kernel and Docker checks "
            "(--commands-only checks the rest)",
            file=sys.stderr,
        )
        return 4
    return report(all_checks(commands_only, backends))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quicbed doctor", description=__doc__.split("\n")[0])
    parser.add_argument("--commands-only", action="store_true")
    return run_doctor(parser.parse_args(argv).commands_only)


if __name__ == "__main__":
    sys.exit(main())
