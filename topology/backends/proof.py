"""Which link backends run on this host, proven rather than assumed from what is installed.

A backend is chosen only after it has shown that it runs here:
- `netem`: the host kernel takes a netem qdisc in a scratch namespace;
- `uml`: Debian's User-Mode Linux kernel boots with `uml_probe.sh` as its init, loads the
  router's qdisc modules, puts a netem qdisc on its loopback and answers, within seconds. On
  Xeons with AVX-512/AMX it panics at boot (`ptrace set fp regs failed, errno = 14`) whatever
  the package's version: only a boot tells;
- `vm`: QEMU boots Debian's kernel (vmimage.py) with `vm_probe.sh` as its init, which takes a
  netem qdisc and answers: first under KVM (on some hosts KVM exists but a stock kernel hangs
  in it, e.g. a nested, PVM-backed KVM), then under TCG;
- `delayline`: the user-space delay line builds and runs.

The UML and QEMU boots are cached per host, CPU (model and flags), host kernel and binary,
under $QUICBED_CACHE/probes; `quicbed doctor` boots them afresh and rewrites the cache. The UML
binary may be replaced through $QUICBED_UML_BINARY (a stand-in kernel that panics, in tests),
and QEMU through $QUICBED_QEMU_BINARY (a stand-in that cannot boot a guest).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from quicbed.paths import CACHE, REPO

UML_PROBE_INIT = REPO / "topology" / "uml_probe.sh"
VM_PROBE_INIT = REPO / "topology" / "vm_probe.sh"
VM_PROBE_TIMEOUT_S = {"kvm": 10.0, "tcg": 25.0}  # TCG boots in ~5 s; a hung KVM boot never answers
UML_PROBE_TIMEOUT_S = 20.0
UML_READY = "QUICBED-PROBE-OK"
PROBE_CACHE = CACHE / "probes"
# A boot that did not answer is asked again after this long: a timed-out boot on a busy host
# must not rule a backend out on that host for good. A boot that answered is kept until the
# host, CPU, kernel or binary changes (the cache key).
NEGATIVE_PROOF_TTL_S = 3600.0
# What a failed boot's console says, most telling first: the line shown as the reason.
_FAILURE_LINES = (
    re.compile(r"ptrace set fp regs failed, errno = \d+"),
    re.compile(r"QUICBED-PROBE-FAILED: .*"),
    re.compile(r"QUICBED-FAILED: .*"),
    re.compile(r"Kernel panic - not syncing: .*"),
    re.compile(r"qemu-system-x86_64: .*"),
)
_CPU_FAILURE = re.compile(r"ptrace set fp regs")


@dataclass(frozen=True)
class Proof:
    """Whether a backend runs on this host, and the one-line reason."""

    backend: str
    runs: bool
    reason: str
    cached: bool = False
    accelerator: str = ""  # vm: kvm or tcg, the one that booted
    boot_s: float = 0.0  # vm: wall time from QEMU's start to the probe's answer
    # A step of the set-up is missing (a package not installed, a kernel not fetched, a build
    # that failed): the host could run the backend, so this is a failure to fix, never a
    # "cannot run here" (tests/backends_plugin.py fails such a test instead of skipping it).
    setup: bool = False

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def uml_binary() -> str:
    """The User-Mode Linux kernel the router and the netem guest boot."""
    return os.environ.get("QUICBED_UML_BINARY") or "linux.uml"


def prove_uml(fresh: bool = False) -> Proof:
    """Boot the UML kernel once (or read this host's cached result)."""
    binary = shutil.which(uml_binary())
    if binary is None:
        return Proof(
            "uml", False, f"{uml_binary()} is not installed (apt-get install user-mode-linux)", setup=True
        )
    cache = PROBE_CACHE / f"uml-{_host_key(binary, UML_PROBE_INIT)}.json"
    cached = None if fresh else _read_proof(cache)
    if cached:
        return cached
    proof = _boot_uml(binary)
    _write_proof(cache, proof, _host_facts(binary, UML_PROBE_INIT))
    return proof


def _read_proof(cache: Path, now: float | None = None) -> Proof | None:
    """The cached proof, or None: none cached, unreadable, or a negative one that has expired."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads(cache.read_text())
        fields = {k: data[k] for k in ("backend", "runs", "reason", "accelerator", "boot_s") if k in data}
        proof = Proof(**fields, cached=True)
        age = (time.time() if now is None else now) - cache.stat().st_mtime
        if not proof.runs and age > NEGATIVE_PROOF_TTL_S:
            return None
        return proof
    return None


def _write_proof(cache: Path, proof: Proof, host: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**proof.to_dict(), "host": host}, indent=1))
        os.replace(tmp, cache)


def forget_uml_proof() -> None:
    """Drop this host's cached UML proof (a router that then failed to boot)."""
    binary = shutil.which(uml_binary())
    if binary:
        (PROBE_CACHE / f"uml-{_host_key(binary, UML_PROBE_INIT)}.json").unlink(missing_ok=True)


def prove_vm(fresh: bool = False) -> Proof:
    """Boot the QEMU router's kernel once, KVM first (or read this host's cached result)."""
    from quicbed.topology.backends import vmimage
    from quicbed.topology.backends.vmimage import kernel_ready, pinned_kernel, qemu_binary

    qemu = shutil.which(qemu_binary())
    if qemu is None:
        return Proof(
            "vm", False, f"{qemu_binary()} is not installed (apt-get install qemu-system-x86)", setup=True
        )
    kernel = pinned_kernel()
    if not kernel_ready(kernel):
        return Proof(
            "vm", False, f"the QEMU router's kernel {kernel.package} is not fetched here: make vm", setup=True
        )
    # The guest's kernel, its probe, and the QEMU command line (vmimage.py) key the cache.
    probe_files = (VM_PROBE_INIT, kernel.vmlinuz, Path(vmimage.__file__))
    cache = PROBE_CACHE / f"vm-{_host_key(qemu, *probe_files)}.json"
    cached = None if fresh else _read_proof(cache)
    if cached:
        return cached
    kvm = _boot_vm("kvm") if os.access("/dev/kvm", os.R_OK | os.W_OK) else "no usable /dev/kvm"
    proof = kvm if isinstance(kvm, Proof) else _boot_vm("tcg", f"kvm: {kvm}")
    if isinstance(proof, str):
        proof = Proof("vm", False, f"vm cannot run on this host: tcg: {proof}; kvm: {kvm}")
    _write_proof(cache, proof, _host_facts(qemu, *probe_files))
    return proof


def forget_vm_proof() -> None:
    """Drop this host's cached QEMU proof (a router that then failed to boot)."""
    for path in PROBE_CACHE.glob("vm-*.json"):
        path.unlink(missing_ok=True)


def _boot_vm(accel: str, other: str = "") -> Proof | str:
    """A Proof if the probe answered under this accelerator, else why not (one line)."""
    from quicbed.errors import QuicbedError
    from quicbed.topology.backends.vmimage import VM_MARK, qemu_argv

    try:
        argv = qemu_argv(f"{VM_MARK}probe-{os.getpid()}", accel, VM_PROBE_INIT, {}, memory_mb=128)
    except QuicbedError as exc:
        return str(exc)
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=VM_PROBE_TIMEOUT_S[accel])
        timed_out = False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=10)
        timed_out = True
    seconds = time.monotonic() - started
    text = out.decode(errors="replace")
    found = re.search(rf"{UML_READY} (\S+)", text)
    if found:
        note = f" ({other})" if other else ""
        reason = (
            f"the QEMU router boots here under {accel} in {seconds:.1f} s: kernel {found.group(1)}, "
            f"its netem loads{note}"
        )
        return Proof("vm", True, reason, accelerator=accel, boot_s=round(seconds, 2))
    return vm_failure(text, timed_out, VM_PROBE_TIMEOUT_S[accel])


def vm_failure(console: str, timed_out: bool = False, timeout_s: float = 0.0) -> str:
    """One line on why the QEMU guest did not come up, from its console."""
    for pattern in _FAILURE_LINES:
        found = pattern.search(console)
        if found:
            return found.group(0).strip()
    if timed_out:
        return f"the guest did not answer within {timeout_s:.0f} s" if timeout_s else "no answer in time"
    lines = [ln.strip() for ln in console.splitlines() if ln.strip()]
    return lines[-1] if lines else "QEMU exited without output"


def prove(backend: str, fresh: bool = False) -> Proof:
    """The named backend's proof (its class's `prove`)."""
    from quicbed.topology.backends import BACKENDS

    return BACKENDS[backend].prove(fresh)


def _boot_uml(binary: str) -> Proof:
    umid = f"quicbed-probe-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
    with tempfile.TemporaryDirectory(prefix="quicbed-uml-probe-") as tmp:
        console = Path(tmp) / "console.log"
        argv = [
            binary,
            "mem=64M",
            "rootfstype=hostfs",
            "rootflags=/",
            "ro",
            f"init={UML_PROBE_INIT}",
            "con=null",
            "con0=null,fd:1",
            f"umid={umid}",
        ]
        with open(console, "wb") as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                proc.wait(timeout=UML_PROBE_TIMEOUT_S)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        text = console.read_text(errors="replace")
    shutil.rmtree(Path.home() / ".uml" / umid, ignore_errors=True)
    found = re.search(rf"{UML_READY} (\S+)", text)
    if found:
        return Proof("uml", True, f"the UML router boots here: kernel {found.group(1)}, " "its netem loads")
    return Proof("uml", False, uml_failure(text, timed_out))


def uml_failure(console: str, timed_out: bool = False) -> str:
    """One line on why a UML kernel did not come up, from its console."""
    for pattern in _FAILURE_LINES:
        found = pattern.search(console)
        if found:
            where = "this CPU" if _CPU_FAILURE.search(found.group(0)) else "this host"
            return f"uml cannot run on {where}: {found.group(0).strip()}"
    if timed_out:
        return f"uml cannot run on this host: no answer within {UML_PROBE_TIMEOUT_S:.0f} s"
    lines = [ln.strip() for ln in console.splitlines() if ln.strip()]
    return f"uml cannot run on this host: {lines[-1] if lines else 'it exited without output'}"


def _host_facts(binary: str, *probe_files: Path) -> dict[str, object]:
    stat = os.stat(binary)
    return {
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu": _cpu_identity(),
        "binary": os.path.realpath(binary),
        "binary_size": stat.st_size,
        "binary_mtime": int(stat.st_mtime),
        # The init (and guest kernel) and this module: a changed probe or reason is probed again.
        "probe": hashlib.sha256(b"".join(p.read_bytes() for p in (*probe_files, Path(__file__)))).hexdigest()[
            :16
        ],
    }


def _host_key(binary: str, *probe_files: Path) -> str:
    facts = json.dumps(_host_facts(binary, *probe_files), sort_keys=True)
    return hashlib.sha256(facts.encode()).hexdigest()[:16]


def _cpu_identity() -> str:
    """The CPU model and its flags: two machines called "AMD EPYC" may differ in both."""
    model, flags = "", ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = hashlib.sha256(value.strip().encode()).hexdigest()[:12]
            if model and flags:
                break
    return f"{model or platform.processor()} flags:{flags}"
