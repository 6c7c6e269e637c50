"""Stop signals, and a teardown that they cannot cut short.

A run, a lab or a calibration ends on SIGINT (Ctrl-C), SIGTERM (a CI cancel, `timeout`) or
SIGHUP (a closed terminal); each turns the signal into an exception that unwinds to the
teardown. A signal that arrives *during* the teardown would raise there too and leave the
path half removed. `held_stop_signals()` holds them while the teardown runs and delivers the
first one, to whatever handler was in place, when it is done.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def held_stop_signals() -> Iterator[None]:
    """Within the block, a stop signal is only noted; on leaving it, the first one noted is
    raised again (`signal.raise_signal`), so it takes its usual course: an exception from
    the caller's handler, or the default action, after the teardown is complete.

    Python-level, not `pthread_sigmask`: a kernel mask is per thread, and a signal would
    still reach the interpreter through any other thread (a progress bar's, Ray's)."""
    held: list[int] = []

    def note(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    try:
        previous = {sig: signal.signal(sig, note) for sig in STOP_SIGNALS}
    except ValueError:  # not the main thread: no handlers to swap, nothing to hold
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            # None: a handler not set from Python; the default is the nearest we can restore
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])
