"""Where the emulated link's netem stage (delay, jitter, loss) runs.

Which one runs on this host is proven, not assumed (proof.py): a netem qdisc in a scratch
namespace, a run of the delay line, a boot of the UML kernel or of the QEMU guest.

auto tries them in this order (`auto_rank`): netem, delayline, uml, vm.

- `netem` (netem.py): the router namespace forwards, and the host kernel's netem shapes its
  egress.
- `delayline` (delayline.py): the host kernel has no sch_netem (this machine, CI, WSL2). The
  router namespace routes; between its interfaces and the LAN bridges, a C delay line
  (topology/delayline) applies netem's algorithms to the router's egress in user space. auto's
  choice there: it carries every LinkSpec feature (traces too), runs on every CPU, reaches
  1 Gbit/s, and a pause of its process (a hypervisor's steal) makes a packet late, never
  early: under steal, the UML router's calibrated india RTT came out short (77.85 and 79.2 ms
  against 80.08 ± 0.8).
- `uml` (uml.py): no sch_netem either. A User-Mode Linux kernel, whose modules include
  sch_netem, is the router: its two vector interfaces sit on veths in the router namespace,
  and the same tc commands run inside it. Taken when asked for (`--backend uml`); proven and
  calibrated in `make test-physics` where it boots.
- `vm` (vm.py): no sch_netem either. Debian's kernel in a QEMU guest (KVM where it boots, else
  TCG) is the router: its two virtio NICs sit on taps in the router namespace, and the same tc
  commands run inside it. auto takes it where a path's `aqm` needs its kernel (this host's
  lacks the qdisc), or where nothing before it runs.

All present the same interface (base.py): `forward(...)` makes the router route between the
client LAN and the server LAN, `impair(...)` sets the netem stage of both directions,
`counters()` reads the egress devices. The rate stage (htb) is the host kernel's in every
backend but vm (net.py). This module chooses one and makes it; the names other modules use
are re-exported here, so they import from `quicbed.topology.backends` alone.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from quicbed.doctor import Check
from quicbed.errors import HostProblem, InputError, QuicbedError
from quicbed.topology.backends.base import (
    REGISTRY,
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
    "AUTO_ORDER_WHY",
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
    "check_name",
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
    "prove_uml",
    "prove_vm",
    "in_auto_order",
    "router_state_dir",
    "tc_script",
    "uml_binary",
]

# Every module of this package is imported, so each Backend subclass in it registers itself
# (base.REGISTRY): a new backend is a new module here, and nothing else names it.
for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):  # __main__ is the command line, not a backend
        importlib.import_module(f"{__name__}.{_module.name}")
BACKENDS: dict[str, type[Backend]] = REGISTRY
_announced: set[BackendChoice] = set()
# Why auto's order is what it is (auto_rank): doctor and the README say it.
AUTO_ORDER_WHY = (
    "the delay line before the UML and QEMU routers, as it carries every link feature, runs on "
    "every CPU, reaches 1 Gbit/s, and a pause of its process (a hypervisor's steal) makes a "
    "packet late, never early (under steal, the UML router's calibrated india RTT came out "
    "short: 77.85 and 79.2 ms against 80.08 ± 0.8); uml when asked for (--backend uml), vm "
    "where an aqm needs its kernel"
)


def in_auto_order() -> list[type[Backend]]:
    """Every backend, in the order auto tries them (and doctor lists them)."""
    return sorted(BACKENDS.values(), key=lambda backend: backend.auto_rank)


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
    on auto, the first in auto's order (in_auto_order: the host's netem, the delay line, a UML
    router, a QEMU router with Debian's kernel) that runs here and forwards the profile's rate.
    One whose bottleneck cannot run the path's `queues` (an `aqm` this host's kernel lacks) is
    passed over for a later one that can (the QEMU router, whose kernel has them all); if none
    that can runs here, the first that runs is taken and check_queues refuses the queue in one
    line. A trace-driven link (`trace`) goes to a backend that replays traces exactly (the
    delay line). Where auto takes a backend with a timing caveat (a QEMU router under TCG,
    last in the order, so only for a queue that needs its kernel), its reason says it."""
    if requested and requested != "auto":
        return _requested(requested)
    if trace:
        return _trace_replayer()
    order = in_auto_order()
    passed_over: list[str] = []
    fallback: BackendChoice | None = None  # runs, but not the queues: taken if nothing later runs them
    for i, backend in enumerate(order):
        proof = backend.prove()
        if not proof.runs:
            passed_over.append(backend.passed_over(proof))
            continue
        ceiling = backend.ceiling_mbit(proof)
        if max_rate_mbit > ceiling:
            passed_over.append(
                f"{max_rate_mbit:g} Mbit/s is above what the {backend.name} router forwards ({ceiling:g})"
            )
            continue
        caveat = backend.timing_caveat(proof)
        reason = f"{proof.reason}, though {caveat}" if caveat else proof.reason
        choice = BackendChoice(backend.name, "; ".join([*passed_over, reason]))
        lacking = _lacking(backend, queues)
        if lacking and any(not _lacking(later, queues) for later in order[i + 1 :]):
            passed_over.append(f"{proof.reason}, but {lacking}")
            fallback = fallback or choice
            continue
        return choice
    if fallback:
        return fallback
    raise HostProblem(f"no link backend runs on this host: {'; '.join(passed_over)}")


def check_name(name: str) -> None:
    """A --backend value names auto or a registered backend; said without root, before anything
    is brought up (the command line calls it first, the choice again)."""
    if name != "auto" and name not in BACKENDS:
        names = ", ".join(backend.name for backend in in_auto_order())
        raise InputError(f"unknown link backend {name!r} (choose from auto, {names})", field="--backend")


def _requested(name: str) -> BackendChoice:
    """The backend the user named (--backend), once it has proven that it runs here."""
    check_name(name)
    proof = BACKENDS[name].prove()
    if not proof.runs:
        raise HostProblem(
            f"--backend {name}: {proof.reason}; leave --backend on auto "
            "(`quicbed doctor` shows which backends run here)"
        )
    return BackendChoice(name, f"--backend {name}; {proof.reason}")


def _lacking(backend: type[Backend], queues: Sequence[Aqm]) -> str:
    """What the backend's bottleneck lacks of the path's queues ('' when it runs them all)."""
    modules = sorted({aqm.module for aqm in queues if not backend.runs_queue(aqm)})
    if not modules:
        return ""
    kernel = "this host's kernel" if backend.queue_kinds is None else f"{backend.name}'s kernel"
    return f"its bottleneck queues in {kernel}, which has no {', '.join(modules)}"


def _trace_replayer() -> BackendChoice:
    """The first backend in auto's order that replays traces exactly and runs here."""
    replayers = [b for b in in_auto_order() if b.replays_traces]
    names = ", ".join(b.name for b in replayers)
    why = f"the link follows a trace, which only {names} replays exactly (tc has no trace replay)"
    reasons = []
    for backend in replayers:
        proof = backend.prove()
        if proof.runs:
            return BackendChoice(backend.name, f"{why}; {proof.reason}")
        reasons.append(proof.reason)
    raise HostProblem(f"{why}, and it cannot run here: {'; '.join(reasons)}")


def announce(choice: BackendChoice) -> None:
    """Say which backend a path uses and why, once per process and choice."""
    if choice not in _announced:
        _announced.add(choice)
        print(choice.line(), file=sys.stderr, flush=True)


def proofs() -> dict[str, Proof]:
    """Every backend's proof on this host (UML's from the cache when it has one)."""
    return {backend.name: backend.prove() for backend in in_auto_order()}


def backend_checks() -> list[Check]:
    """`quicbed doctor` boots what a run would use: each backend proves that it runs here (the
    QEMU and UML routers afresh), and the choice `auto` makes for a profile at a low rate and
    at 1000 Mbit/s and with an AQM queue is named with its reason, after auto's order and why.
    No backend that can run: doctor fails."""
    out = []
    for backend in in_auto_order():
        proof = backend.prove(fresh=True)
        out.append(
            Check(
                f"link backend {backend.name}",
                proof.runs,
                ("runs: " if proof.runs else "cannot run here: ") + proof.reason,
                optional=True,
            )
        )
    out.append(queue_check())
    order = ", ".join(backend.name for backend in in_auto_order())
    out.append(Check("link backend order", True, f"auto tries {order}: {AUTO_ORDER_WHY}", optional=True))
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
            replayers = ", ".join(b.name for b in in_auto_order() if b.replays_traces)
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
    for backend in in_auto_order():
        name = backend.name
        if name == choice.name or not backend.runs_queue(aqm):
            continue
        proof = backend.prove()
        able.append(name if proof.runs else f"{name} (not on this host: {proof.reason})")
        if proof.runs:
            runnable.append(name)
    message = f"{aqm.kind} needs a backend whose kernel has {aqm.module}; {how}, and {kernel} has none"
    if chosen.queue_kinds is None:
        hosted = [backend.name for backend in in_auto_order() if backend.queue_kinds is None]
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
