"""A path proven on a calm host: a calibration that a contended host could have spoiled is
measured once more, on a fresh bring-up, after the host is calm.

A cloud VM is paused by its hypervisor (steal) and has slow spells in which fresh processes
cost several times their usual CPU. A calibration measured then says as much about the host as
about the path, and a bring-up whose forwarding probe fell into a pause compensates for it for
the path's life (net.py takes the probes' minimum, so that can no longer make a path short;
a backend whose own clock runs ahead under steal still can). So a calibration that refuses the
path is measured again, once, when either:
- the host was contended while it measured (quicbed.hostload: steal of non-idle time, the
  slow-spell probe, CPU pressure, other work), or
- its RTT came out short: a delay element only ever waits, so a short path is the testbed's
  doing, never the profile's (calibrate.short_path).
The second attempt waits for a calm host (hostload.wait_for_calm), brings the path up afresh
(a new forwarding compensation) and is judged whatever it finds: a refusal then stands, and a
calibration that refuses on a calm host refuses. Both attempts' loads are kept with the
calibration (`host_load`), so the manifest and the report say when a path was proven on a
noisy host. Runs (the executor), `quicbed calibrate` and the test suite's calibrations share
this rule.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TypeVar

from quicbed import hostload
from quicbed.topology.calibrate import Calibration, short_path

T = TypeVar("T")
Say = Callable[[str], None]


def retry_reason(cal: Calibration, load: hostload.Load) -> str:
    """Why a refused calibration is measured again ('' when it is not: it passed, or it
    refused on a calm host with a path that is not short)."""
    if cal.passed:
        return ""
    if short_path(cal):
        return "short path: the compensation was measured during a pause"
    if load.contended:
        return f"the host was contended while it measured ({load.describe()})"
    return ""


@contextlib.contextmanager
def proven(
    bring_up: Callable[[], AbstractContextManager[T]],
    calibrate: Callable[[T], Calibration],
    say: Say = lambda _m: None,
    meter: Callable[[], hostload.LoadMeter] = hostload.LoadMeter,
    wait_for_calm: Callable[..., tuple[bool, hostload.Load]] = hostload.wait_for_calm,
) -> Iterator[tuple[T, Calibration]]:
    """Bring the path up and calibrate it; yield (what bring_up gave, its calibration), with
    the path up. A refusal that retry_reason explains is measured once more on a fresh
    bring-up after the host is calm; the yielded calibration is the last one measured."""
    loads: list[dict[str, object]] = []
    for attempt in (1, 2):
        with contextlib.ExitStack() as stack:
            up = stack.enter_context(bring_up())
            with meter() as metered:
                cal = calibrate(up)
            assert metered.load is not None
            loads.append({"attempt": attempt, **metered.load.to_dict()})
            cal.host_load = list(loads)
            reason = retry_reason(cal, metered.load) if attempt == 1 else ""
            if not reason:
                yield up, cal
                return
            say(f"calibration refused ({reason}); bringing the path up again on a calm host")
        calm, window = wait_for_calm(say=say)
        loads.append({"attempt": "wait", "calm": calm, **window.to_dict()})
    raise AssertionError("unreachable")
