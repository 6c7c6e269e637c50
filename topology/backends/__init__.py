"""Where the emulated link's netem stage (delay, jitter, loss) runs.

- `netem` (netem.py): the router namespace forwards, and the host kernel's netem shapes its
  egress.
- `uml` (uml.py): the host kernel has no sch_netem (this machine, CI, WSL2). A User-Mode Linux
  kernel, whose modules include sch_netem, is the router: its two vector interfaces sit on veths
  in the router namespace, and the same tc commands run inside it.
- `delayline` (delayline.py): no sch_netem either, at rates one UML vCPU cannot forward
  (> 100 Mbit/s here). The router namespace routes; between its interfaces and the LAN bridges,
  a C delay line (topology/delayline) applies netem's algorithms to the router's egress in user
  space.

All present the same interface (base.py): `forward(...)` makes the router route between the
client LAN and the server LAN, `impair(...)` sets the netem stage of both directions,
`counters()` reads the egress devices. The rate stage (htb) is the host kernel's in every
backend (net.py). This module chooses one and makes it; the names other modules use are
re-exported here, so they import from `quicbed.topology.backends` alone.
"""

from __future__ import annotations

from pathlib import Path

from quicbed.errors import EnvironmentProblem, InputError
from quicbed.topology.backends.base import (
    Backend,
    Impairment,
    Lan,
    TcBackend,
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
from quicbed.topology.backends.uml import (
    UML_BINARY,
    UML_MARK,
    UML_MAX_RATE_MBIT,
    UmlBackend,
)
from quicbed.topology.hosts import NsHost

__all__ = [
    "BACKENDS", "DELAYLINE_BINARY", "DELAYLINE_DIR", "DELAYLINE_MARK", "UML_BINARY", "UML_MARK",
    "UML_MAX_RATE_MBIT", "Backend", "DelayLineBackend", "Impairment", "Lan", "NetemBackend",
    "TcBackend", "UmlBackend", "build_delayline", "choose_backend", "delayline_config",
    "host_has_netem", "jitter_table", "make_backend", "router_state_dir", "tc_script",
]

BACKENDS: dict[str, type[Backend]] = {"netem": NetemBackend, "uml": UmlBackend,
                                      "delayline": DelayLineBackend}


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
