"""held_stop_signals(): a stop signal during a teardown waits for the teardown's end, then
takes its usual course. Real signals sent to this process."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from quicbed.topology.signals import STOP_SIGNALS, held_stop_signals


class Stopped(Exception):
    pass


@pytest.fixture
def raising_handlers() -> Iterator[list[int]]:
    """Each stop signal raises Stopped, as a run's or a lab's handler does."""
    seen: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        seen.append(signum)
        raise Stopped(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    yield seen
    for sig, old in previous.items():
        signal.signal(sig, old)


def test_a_signal_during_the_block_is_raised_after_the_whole_block(raising_handlers) -> None:
    steps = []
    with pytest.raises(Stopped, match="SIGTERM"), held_stop_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        steps.append("after the signal")
        os.kill(os.getpid(), signal.SIGINT)  # a second one: noted, not delivered again
        steps.append("the rest of the teardown")
    assert steps == ["after the signal", "the rest of the teardown"]
    assert raising_handlers == [signal.SIGTERM]
    # the caller's handlers are back
    assert all(
        signal.getsignal(sig) is not None and signal.getsignal(sig).__name__ == "handler"
        for sig in STOP_SIGNALS
    )


def test_no_signal_no_exception_and_handlers_restored(raising_handlers) -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    with held_stop_signals():
        pass
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before
    assert raising_handlers == []


def test_a_signal_the_caller_ignores_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with held_stop_signals():
            os.kill(os.getpid(), signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_an_exception_in_the_block_still_restores_and_delivers(raising_handlers) -> None:
    # The signal's exception replaces the block's own, as a Ctrl-C during any cleanup does;
    # the teardown itself had run to where it failed.
    with pytest.raises(Stopped), held_stop_signals():
        os.kill(os.getpid(), signal.SIGINT)
        raise RuntimeError("one host would not go")
    assert raising_handlers == [signal.SIGINT]
