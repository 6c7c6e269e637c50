"""Where the emulated link's netem stage (delay, jitter, loss) runs.

Which one runs on this host is proven, not assumed (proof.py): a netem qdisc in a scratch
namespace, a boot of the UML kernel, a run of the delay line.

- `netem` (netem.py): the router namespace forwards, and the host kernel's netem shapes its
  egress.
- `uml` (uml.py): the host kernel has no sch_netem (this machine, CI, WSL2). A User-Mode Linux
  kernel, whose modules include sch_netem, is the router: its two vector interfaces sit on veths
  in the router namespace, and the same tc commands run inside it.
- `vm` (vm.py): no sch_netem either. Debian's kernel in a QEMU guest (KVM where it boots, else
  TCG) is the router: its two virtio NICs sit on taps in the router namespace, and the same tc
  commands run inside it. Under TCG, auto takes it only for a queue the host kernel lacks.
- `delayline` (delayline.py): no sch_netem either, at rates the UML and QEMU routers cannot
  forward (> 100 Mbit/s here), or where the only kernel router is emulated (TCG). The router
  namespace routes; between its interfaces and the LAN bridges, a C delay line
  (topology/delayline) applies netem's algorithms to the router's egress in user space.

All present the same interface (base.py): `forward(...)` makes the router route between the
client LAN and the server LAN, `impair(...)` sets the netem stage of both directions,
`counters()` reads the egress devices. The rate stage (htb) is the host kernel's in every
backend (net.py). This module chooses one and makes it; the names other modules use are
re-exported here, so they import from `quicbed.topology.backends` alone.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from quicbed.doctor import Check
from quicbed.errors import HostProblem, InputError, QuicbedError
from quicbed.topology.backends.base import (
    Backend,
    Impairment,
    Lan,
    TcBackend,
    host_has_qdisc,
    router_state_dir,
    tc_script,
)
from quicbed.topology.backends.delayline import (
    DELAYLINE_BINARY,
    DELAYLINE_DIR,
    DELAYLINE_MARK,
    DelayLineBackend,
    build_delayline,
    delayline_config,
    jitter_table,
)
from quicbed.topology.backends.netem import NetemBackend, host_has_netem
from quicbed.topology.backends.proof import (
    Proof,
    prove,
    prove_delayline,
    prove_netem,
    prove_uml,
    prove_vm,
    uml_binary,
)
from quicbed.topology.backends.uml import (
    UML_BINARY,
    UML_MARK,
    UML_MAX_RATE_MBIT,
    UmlBackend,
)
from quicbed.topology.backends.vm import VM_MAX_RATE_MBIT, VmBackend
from quicbed.topology.backends.vmimage import VM_MARK
from quicbed.topology.hosts import NsHost
from quicbed.topology.linkspec import AQM_KINDS, Aqm, LinkSpec

__all__ = [
    "BACKENDS",
    "DELAYLINE_BINARY",
    "DELAYLINE_DIR",
    "DELAYLINE_MARK",
    "UML_BINARY",
    "UML_MARK",
    "UML_MAX_RATE_MBIT",
    "VM_MARK",
    "VM_MAX_RATE_MBIT",
    "Backend",
    "DelayLineBackend",
    "Impairment",
    "Lan",
    "NetemBackend",
    "BackendChoice",
    "Proof",
    "TcBackend",
    "UmlBackend",
    "VmBackend",
    "announce",
    "backend_checks",
    "build_delayline",
    "check_links",
    "check_queues",
    "choose_backend",
    "delayline_config",
    "host_has_netem",
    "host_has_qdisc",
    "jitter_table",
    "make_backend",
    "proofs",
    "prove",
    "router_state_dir",
    "tc_script",
    "uml_binary",
]

BACKENDS: dict[str, type[Backend]] = {
    "netem": NetemBackend,
    "vm": VmBackend,
    "uml": UmlBackend,
    "delayline": DelayLineBackend,
}
_announced: set[BackendChoice] = set()
# Measured on a Xeon whose only kernel router is QEMU under TCG (bench/handshake_bench.py,
# india): a QUIC handshake's captured path was 0.975 of the calibrated RTT (the delay line's
# 1.000), and dsl's 10-packet queue dropped paced datagrams, because the emulated vCPU passes
# packets on in bunches when it waits for the host's CPU. Pings at 50 ms meet an idle guest,
# so calibration alone does not see it.
TCG_TIMING = (
    "under tcg its emulated CPU passes packets on in bunches (a handshake's path runs 2.5 % "
    "short of the RTT), so a path that needs no queue of its kernel goes to the delay line"
)


@dataclass(frozen=True)
class BackendChoice:
    """The backend a path uses, and why: printed once, kept with every calibration."""

    name: str
    reason: str

    def line(self) -> str:
        return f"link backend: {self.name} ({self.reason})"


def choose_backend(
    requested: str | None, max_rate_mbit: float = 0.0, trace: bool = False, queues: Sequence[Aqm] = ()
) -> BackendChoice:
    """The backend named by the user, once it has proven that it runs here (HostProblem if not);
    on auto, the first that runs here and forwards the profile's rate: the host's netem, a
    UML router, a QEMU router with Debian's kernel, the delay line. A QEMU router under TCG
    comes after the delay line unless the path's `queues` need its kernel (TCG_TIMING). A
    trace-driven link (`trace`) goes to the delay line, the only backend that replays a
    trace exactly."""
    if requested and requested != "auto":
        if requested not in BACKENDS:
            raise InputError(
                f"unknown link backend {requested!r} " f"(choose from auto, {', '.join(BACKENDS)})",
                field="--backend",
            )
        proof = prove(requested)
        if not proof.runs:
            raise HostProblem(
                f"--backend {requested}: {proof.reason}; leave --backend on auto "
                "(`quicbed doctor` shows which backends run here)"
            )
        return BackendChoice(requested, f"--backend {requested}; {proof.reason}")
    if trace:
        return _trace_replayer()
    netem = prove_netem()
    if netem.runs:
        return BackendChoice("netem", netem.reason)
    passed_over: list[str] = []
    emulated: BackendChoice | None = None  # a TCG router, taken if the delay line cannot run
    for proof, ceiling in _kernel_routers():
        if not proof.runs:
            passed_over.append(proof.reason)
        elif max_rate_mbit > ceiling:
            passed_over.append(
                f"{max_rate_mbit:g} Mbit/s is above what the {proof.backend} router forwards ({ceiling:g})"
            )
        elif proof.accelerator == "tcg" and all(DelayLineBackend.runs_queue(q) for q in queues):
            passed_over.append(f"{proof.reason}, but {TCG_TIMING}")
            emulated = BackendChoice(proof.backend, f"no sch_netem in this kernel; {proof.reason}")
        else:
            return BackendChoice(proof.backend, f"no sch_netem in this kernel; {proof.reason}")
    why = "no sch_netem in this kernel; " + "; ".join(passed_over)
    delayline = prove_delayline()
    if not delayline.runs:
        if emulated:
            return emulated
        raise HostProblem(f"no link backend runs on this host: {why}; {delayline.reason}")
    return BackendChoice("delayline", why)


def _trace_replayer() -> BackendChoice:
    why = "the link follows a trace, which only the delay line replays exactly (tc has no trace replay)"
    delayline = prove_delayline()
    if not delayline.runs:
        raise HostProblem(f"{why}, and it cannot run here: {delayline.reason}")
    return BackendChoice("delayline", f"{why}; {delayline.reason}")


def _kernel_routers() -> Iterator[tuple[Proof, float]]:
    """The routers with a kernel of their own, in auto's order, each with its rate ceiling
    (proven one at a time: a UML router that runs spares the QEMU boot). UML first where it
    boots: under TCG the QEMU router bunches packets when its vCPU waits for the CPU, and
    dsl's 10-packet queue dropped 3 of 20000 paced datagrams in two CI runs (never on UML);
    on Xeons with AVX-512/AMX, where UML panics, the QEMU router is the real kernel."""
    yield prove_uml(), UML_MAX_RATE_MBIT
    vm = prove_vm()
    yield vm, VM_MAX_RATE_MBIT.get(vm.accelerator, 0.0)


def announce(choice: BackendChoice) -> None:
    """Say which backend a path uses and why, once per process and choice."""
    if choice not in _announced:
        _announced.add(choice)
        print(choice.line(), file=sys.stderr, flush=True)


def proofs() -> dict[str, Proof]:
    """Every backend's proof on this host (UML's from the cache when it has one)."""
    return {name: prove(name) for name in BACKENDS}


def backend_checks() -> list[Check]:
    """`quicbed doctor` boots what a run would use: each backend proves that it runs here (the
    QEMU and UML routers afresh), and the choice `auto` makes for a profile at a low rate and
    at 1000 Mbit/s and with an AQM queue is named with its reason. No backend that can run: doctor fails."""
    out = []
    for name in BACKENDS:
        proof = prove(name, fresh=True)
        out.append(
            Check(
                f"link backend {name}",
                proof.runs,
                ("runs: " if proof.runs else "cannot run here: ") + proof.reason,
                optional=True,
            )
        )
    out.append(queue_check())
    aqm = Aqm("fq_codel")
    for label, rate, queues in (
        ("link backend auto", 0.0, ()),
        ("link backend auto at 1000 Mbit/s", 1000.0, ()),
        ("link backend auto for fq_codel", 0.0, (aqm,)),
    ):
        try:
            choice = choose_backend("auto", rate, queues=queues)
        except QuicbedError as exc:
            out.append(Check(label, False, str(exc)))
            continue
        if queues and not BACKENDS[choice.name].runs_queue(aqm):
            out.append(Check(label, False, queue_refusal(aqm, choice), optional=True))
        else:
            out.append(Check(label, True, f"{choice.name} ({choice.reason})", optional=bool(queues)))
    return out


def check_links(down: LinkSpec, up: LinkSpec, choice: BackendChoice, where: str = "") -> None:
    """Refuse, before anything is brought up, what the chosen backend cannot run: a queue its
    kernel lacks (check_queues), a trace it cannot replay."""
    check_queues(down, up, choice, where)
    for direction, spec in (("down", down), ("up", up)):
        if spec.trace and not BACKENDS[choice.name].replays_traces:
            replayers = ", ".join(name for name, b in BACKENDS.items() if b.replays_traces)
            raise InputError(
                f"a trace-driven link needs a backend that replays traces ({replayers}); "
                f"{choice.name} has no exact trace replay (tc has none); leave --backend on auto",
                field=f"{where}{direction}.trace",
            )


def check_queues(down: LinkSpec, up: LinkSpec, choice: BackendChoice, where: str = "") -> None:
    """Refuse, before anything is brought up, a bottleneck queue (`aqm`) that the chosen
    backend's kernel cannot run: one line naming the field, the backend chosen and which
    backends run it. `where` prefixes the field (a file, an experiment's condition)."""
    kinds = {"down": down.aqm, "up": up.aqm}
    for direction, aqm in kinds.items():
        if BACKENDS[choice.name].runs_queue(aqm):
            continue
        both = kinds["down"].kind == kinds["up"].kind
        field = f"{where}{'' if both else direction + '.'}aqm"
        raise InputError(queue_refusal(aqm, choice), field=field)


def queue_refusal(aqm: Aqm, choice: BackendChoice) -> str:
    """Why the chosen backend cannot run this queue, and which backends could."""
    chosen = BACKENDS[choice.name]
    how = (
        f"--backend {choice.name}"
        if choice.reason.startswith("--backend")
        else f"auto chose {choice.name} here"
    )
    kernel = "this host's kernel" if chosen.queue_kinds is None else f"{choice.name}'s kernel"
    able, runnable = [], []
    for name, backend in BACKENDS.items():
        if name == choice.name or not backend.runs_queue(aqm):
            continue
        proof = prove(name)
        able.append(name if proof.runs else f"{name} (not on this host: {proof.reason})")
        if proof.runs:
            runnable.append(name)
    message = f"{aqm.kind} needs a backend whose kernel has {aqm.module}; {how}, and {kernel} has none"
    if chosen.queue_kinds is None:
        hosted = [name for name, backend in BACKENDS.items() if backend.queue_kinds is None]
        message += f" ({', '.join(hosted)} queue in it)"
    message += f"; backends that run it: {', '.join(able)}" if able else "; no backend runs it on this host"
    return message + (f"; run with --backend {runnable[0]}" if runnable else "")


def queue_check() -> Check:
    """Which bottleneck queues (`aqm`) this host's kernel runs, each proven in a scratch
    namespace: netem, uml and delayline queue in it."""
    aqms = [kind for kind in AQM_KINDS if kind != "droptail"]
    have = [kind for kind in aqms if host_has_qdisc(kind)]
    lacks = [f"sch_{kind}" for kind in aqms if kind not in have]
    detail = f"droptail{''.join(', ' + kind for kind in have)}"
    if lacks:
        detail += f" (this kernel has no {', '.join(lacks)})"
    return Check("bottleneck queues (aqm) in this kernel", True, detail, optional=True)


def make_backend(name: str, router: NsHost, state_dir: Path) -> Backend:
    return BACKENDS[name](router, state_dir)
