"""The `netem` backend where the host kernel has no sch_netem: run it in a guest kernel.

Every machine whose kernel has sch_netem (a laptop, a cloud VM) gets the `netem` backend: tc
netem in the router namespace of the host kernel. This machine and CI cannot load it, so the
guest brings such a kernel, booted with the host's / as a read-only root: Debian's kernel under
QEMU where its probe boots (the `vm` backend's guest, vmimage.py; topology/vm_guest.sh is its
init), else Debian's UML kernel where it boots (topology/uml_guest.sh; it panics on Xeons with
AVX-512/AMX). Inside it the whole
topology comes up in namespace-only form (client and server are plain namespaces running the
host's ping, iperf3 and udpprobe.py: no Docker in the guest) with `--backend netem`, and
`calibrate` runs unchanged. The control directory carries job.json in and calibration.json,
guest.log and rc out.

    python -m quicbed.topology.guest calibrate india --set loss_pct=1 [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from quicbed.doctor import require
from quicbed.errors import EnvironmentProblem, HostProblem, QuicbedError
from quicbed.paths import REPO
from quicbed.topology.backends import VM_MARK, prove_uml, prove_vm, router_state_dir, uml_binary
from quicbed.topology.backends.vmimage import qemu_argv
from quicbed.topology.profiles import load_profile, parse_overrides

GUEST_INIT = REPO / "topology" / "uml_guest.sh"
VM_GUEST_INIT = REPO / "topology" / "vm_guest.sh"
GUEST_MEM = "512M"
VM_GUEST_MEM_MB = 768
DEFAULT_TIMEOUT_S = 900.0
# One UML vCPU runs the endpoints, the router and the probes: fewer datagrams than on the host
# (the loss checks still have their binomial interval; 1 % of 8000 gives ~80 loss runs).
GUEST_UDP_PACKETS = 8000
GUEST_GOODPUT_SECONDS = 4.0


@dataclass(frozen=True)
class GuestJob:
    """What the guest calibrates: a profile with overrides, and calibrate()'s sample sizes."""

    profile: str
    overrides: dict[str, str]
    rtt_samples: int = 30
    udp_packets: int = GUEST_UDP_PACKETS
    goodput_seconds: float = GUEST_GOODPUT_SECONDS


@dataclass
class GuestResult:
    calibration: dict[str, Any]  # Calibration.to_dict() from inside the guest
    log: str  # the guest's progress and its calibration table
    kernel: str  # the guest kernel's release
    seconds: float  # boot to power-off
    guest: str = "uml"  # which kernel: "vm (tcg)", "vm (kvm)" or "uml"

    @property
    def passed(self) -> bool:
        return bool(self.calibration.get("passed"))


# -- host side ------------------------------------------------------------------------------
def calibrate_in_guest(job: GuestJob, timeout_s: float = DEFAULT_TIMEOUT_S) -> GuestResult:
    """Boot the guest, calibrate job's profile through the netem backend inside it, power off.
    Raises EnvironmentProblem (with the console and log tails) if the guest gives no result."""
    return calibrate_jobs_in_guest([job], timeout_s)[0]


def calibrate_jobs_in_guest(jobs: list[GuestJob], timeout_s: float = DEFAULT_TIMEOUT_S) -> list[GuestResult]:
    """The jobs one after another in one boot (a TCG boot costs tens of seconds): one result
    each, in order, sharing the boot's log, kernel and time."""
    guest = _guest_kernel()
    for job in jobs:
        load_profile(job.profile, job.overrides)  # bad input fails here, not in the guest's log
    ctl = router_state_dir(uuid.uuid4().hex[:8]) / "guest"
    ctl.mkdir(parents=True)
    (ctl / "job.json").write_text(json.dumps({"jobs": [asdict(job) for job in jobs]}))
    start = time.monotonic()
    if guest == "uml":
        argv = guest_argv(ctl, f"quicbed-guest-{uuid.uuid4().hex[:8]}")
    else:
        argv = vm_guest_argv(ctl, f"{VM_MARK}guest-{uuid.uuid4().hex[:8]}", guest.split()[1].strip("()"))
    _boot_and_wait(ctl, argv, timeout_s)
    seconds = time.monotonic() - start
    log, kernel = _read(ctl / "guest.log"), _read(ctl / "kernel").strip()
    results = []
    for index in range(len(jobs)):
        result_file = ctl / _result_name(index)
        if not result_file.exists():
            raise EnvironmentProblem(
                f"the netem guest gave no calibration for job {index + 1} of {len(jobs)} (rc "
                f"{_read(ctl / 'rc').strip() or 'none'}):\n{_tails(ctl)}"
            )
        calibration = json.loads(result_file.read_text())
        results.append(GuestResult(calibration, log, kernel, round(seconds, 1), guest))
    return results


def _result_name(index: int) -> str:
    return "calibration.json" if index == 0 else f"calibration-{index + 1}.json"


def _guest_kernel() -> str:
    """Debian's kernel under QEMU where it boots here, else the UML kernel where that boots."""
    vm = prove_vm()
    if vm.runs:
        require("vm")
        return f"vm ({vm.accelerator})"
    uml = prove_uml()
    if uml.runs:
        require("uml")
        return "uml"
    raise HostProblem(f"no guest kernel boots here: {vm.reason}; {uml.reason}")


def _keep() -> str:
    """The checkout and the interpreter's environment: the guest mounts them again over its own
    /tmp when they live there (a CI clone in /tmp would otherwise vanish under the tmpfs)."""
    inside = Path(sys.prefix).resolve().is_relative_to(REPO.resolve())
    return ":".join([str(REPO), *([] if inside else [sys.prefix])])


def vm_guest_argv(ctl: Path, name: str, accel: str, python: str = sys.executable) -> list[str]:
    """QEMU's command line for the guest, the job's control directory on /mnt. One vCPU: with
    two, TCG's goodput on india fell to 0.939-0.948 of the rate (one vCPU: 0.955-0.956)."""
    env = {"QUICBED_PYTHON": python, "QUICBED_KEEP": _keep()}
    for value in (str(ctl), *env.values()):
        if any(c.isspace() for c in value):
            raise EnvironmentProblem(f"the guest's kernel command line cannot carry {value!r} (whitespace)")
    return qemu_argv(name, accel, VM_GUEST_INIT, env, memory_mb=VM_GUEST_MEM_MB, ctl=ctl)


def guest_argv(ctl: Path, umid: str, python: str = sys.executable) -> list[str]:
    """linux.uml's command line. Unknown KEY=VALUE words reach init's environment; the kernel
    splits its command line on spaces, so no path may contain one."""
    keep = _keep()
    for value in (str(ctl), python, str(GUEST_INIT), keep):
        if any(c.isspace() for c in value):
            raise EnvironmentProblem(
                f"the UML kernel command line cannot carry {value!r} " "(it contains whitespace)"
            )
    return [
        uml_binary(),
        f"mem={GUEST_MEM}",
        "rootfstype=hostfs",
        "rootflags=/",
        "ro",
        f"init={GUEST_INIT}",
        f"QUICBED_CTL={ctl}",
        f"QUICBED_PYTHON={python}",
        f"QUICBED_KEEP={keep}",
        "con=null",
        "con0=null,fd:1",
        f"umid={umid}",
    ]


def _boot_and_wait(ctl: Path, argv: list[str], timeout_s: float) -> None:
    # umid=quicbed-… or -name quicbed-vm-…: `quicbed clean` finds the guest as it finds a router.
    with open(ctl / "console.log", "wb") as console:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(
                f"the netem guest did not finish in {timeout_s:.0f} s:\n" f"{_tails(ctl)}"
            ) from None
        finally:
            _stop(process, argv)


def _stop(process: subprocess.Popen[bytes], argv: list[str]) -> None:
    if process.poll() is None:
        # UML runs as a process group (its processes are ptrace children): end them all.
        try:
            os.killpg(process.pid, 9)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)
    for word in argv:
        if word.startswith("umid="):
            shutil.rmtree(Path.home() / ".uml" / word.removeprefix("umid="), ignore_errors=True)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tails(ctl: Path) -> str:
    return (
        f"--- console ({ctl / 'console.log'}) ---\n{_read(ctl / 'console.log')[-1500:]}\n"
        f"--- guest log ({ctl / 'guest.log'}) ---\n{_read(ctl / 'guest.log')[-3000:]}"
    )


# -- guest side (run by uml_guest.sh) ---------------------------------------------------------
def inside(ctl: Path) -> int:
    """Calibrate job.json's jobs with the netem backend and namespace hosts, one after another;
    0 if every check of every job passed, 3 if one failed (as `quicbed calibrate`). Jobs of one
    profile in a row share its bring-up (22 s under TCG), each with its own link applied."""
    from quicbed.topology.calibration_table import brought_up, calibrate_up, progress_printer
    from quicbed.topology.net import HostSpec, TestbedConfig

    jobs = [GuestJob(**job) for job in json.loads((ctl / "job.json").read_text())["jobs"]]
    say = progress_printer()
    say(f"guest kernel {os.uname().release}")
    passed = True
    for _, same_profile in itertools.groupby(enumerate(jobs), key=lambda item: item[1].profile):
        group = list(same_profile)
        namespace_host = HostSpec(image=None)
        first = group[0][1]
        cfg = TestbedConfig(
            profile=load_profile(first.profile, first.overrides),
            backend="netem",
            client=namespace_host,
            servers=(namespace_host,),
        )
        with brought_up(cfg, say) as tb:
            for index, job in group:
                say(f"job {index + 1} of {len(jobs)}: {job.profile} {job.overrides}")
                if job is not first:  # the bring-up applied the first job's link
                    tb.profile = load_profile(job.profile, job.overrides)
                    tb.apply_link(tb.profile.down, tb.profile.up)
                cal = calibrate_up(
                    tb,
                    rtt_samples=job.rtt_samples,
                    udp_packets=job.udp_packets,
                    goodput_seconds=job.goodput_seconds,
                    say=say,
                )
                (ctl / _result_name(index)).write_text(json.dumps(cal.to_dict(), indent=2))
                passed = passed and cal.passed
    return 0 if passed else 3


# -- command line -----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m quicbed.topology.guest", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("calibrate", help="calibrate a profile via kernel netem in a guest kernel")
    p.add_argument("profile")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--samples", type=int, default=30, help="ping samples (>= 20)")
    p.add_argument("--udp-packets", type=int, default=GUEST_UDP_PACKETS)
    p.add_argument("--seconds", type=float, default=GUEST_GOODPUT_SECONDS)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    p.add_argument("--json", help="write the calibration as JSON here")
    p = sub.add_parser("inside", help="(the guest's init runs this)")
    p.add_argument("ctl", type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "inside":
        return inside(args.ctl)
    try:
        job = GuestJob(args.profile, parse_overrides(args.set), args.samples, args.udp_packets, args.seconds)
        result = calibrate_in_guest(job, args.timeout)
    except QuicbedError as exc:
        print(f"quicbed guest: {exc}", file=sys.stderr)
        return exc.exit_code
    print(result.log, end="")
    print(f"guest kernel {result.kernel} ({result.guest}); {result.seconds:.0f} s from boot to power-off")
    if args.json:
        Path(args.json).write_text(json.dumps(result.calibration, indent=2))
    return 0 if result.passed else 3


if __name__ == "__main__":
    sys.exit(main())
