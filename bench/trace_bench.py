"""Benchmark of trace-driven links (not a test: it prints figures). How close does each backend
come to a trace? The delay line replays it (topology/traces.py, mm-link's algorithm); the
kernel backends have no trace replay, so here their htb class is stepped from user space to
each 100 ms window's rate of the trace (`tc class change` through one `tc -batch`, or the
QEMU guest's command loop for vm), the closest tc allows without a qdisc of our own. The same
measurement as calibration's trace_rate_error: a flood at 1.25 x the trace's peak, the
receiver's arrivals per 100 ms window against the trace, error as a share of its mean rate.

    .venv/bin/python bench/trace_bench.py [--trace traces/step-10-2-10.trace] [--backends delayline uml vm]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from quicbed.paths import REPO
from quicbed.topology.calibrate import TRACE_FLOOD_OVER_PEAK, flood_arrivals, probe_queue
from quicbed.topology.linkspec import FRAME_BYTES, LinkSpec, htb_class
from quicbed.topology.net import HostSpec, Testbed, TestbedConfig
from quicbed.topology.profiles import Profile
from quicbed.topology.traces import (
    OPPORTUNITY_BYTES,
    WINDOW_MS,
    Trace,
    delivered_per_window,
    load_trace,
    windowed_error,
)

SECONDS = 10.0


def replayed(trace: Trace, image: str) -> tuple[float, float, str]:
    """The delay line's replay, measured as calibration's trace_rate_error measures it."""
    down = probe_queue(LinkSpec(rate_mbit=trace.mean_rate_mbit(), delay_ms=40, trace=str(trace.path)))
    profile = Profile("trace", "", "bench", down, LinkSpec(rate_mbit=10, delay_ms=40))
    with Testbed(_config(profile, "delayline", image)) as tb:
        assert tb.backend
        times = flood_arrivals(tb, "down", SECONDS, _flood_pps(trace))
        start_ns = tb.backend.trace_start_ns("down")
    return _judged(trace, times, start_ns)


def _flood_pps(trace: Trace) -> float:
    return TRACE_FLOOD_OVER_PEAK * trace.peak_rate_mbit() * 1e6 / (OPPORTUNITY_BYTES * 8)


def _judged(trace: Trace, times: list[int], start_ns: int) -> tuple[float, float, str]:
    """Calibration's measure: delivered against offered per window, from the trace's time 0."""
    first, delivered = delivered_per_window(times, start_ns)
    offered = trace.offered_mbit(first, len(delivered))
    median, p95 = windowed_error(delivered, offered, trace.mean_rate_mbit())
    return (
        median,
        p95,
        f"delivered {statistics.fmean(delivered):.2f} Mbit/s against {statistics.fmean(offered):.2f}",
    )


def stepped(trace: Trace, backend: str, image: str) -> tuple[float, float, str]:
    """htb at the trace's peak, its class rate changed every window to the trace's rate."""
    down = LinkSpec(rate_mbit=trace.peak_rate_mbit(), delay_ms=40, queue_packets=_queue(trace))
    profile = Profile("trace", "", "bench", down, LinkSpec(rate_mbit=10, delay_ms=40))
    with Testbed(_config(profile, backend, image)) as tb:
        assert tb.backend
        stop = threading.Event()
        started: list[int] = []
        step = _stepper(tb, trace, started, stop)
        worker = threading.Thread(target=step, daemon=True)
        worker.start()
        times = flood_arrivals(tb, "down", SECONDS, _flood_pps(trace))
        stop.set()
        worker.join()
    return _judged(trace, times, started[0])


def _queue(trace: Trace) -> int:
    return math.ceil(2.0 * trace.peak_rate_mbit() * 1e6 / (OPPORTUNITY_BYTES * 8))


def _stepper(tb: Testbed, trace: Trace, started: list[int], stop: threading.Event) -> Callable[[], None]:
    """A loop that sets the bottleneck's htb rate at each window's start (trace time 0 is the
    first change)."""
    assert tb.backend
    port = tb.bottleneck_port("down")
    htb = "2" if tb.backend.owns_bottleneck else "1"
    rates = trace.window_rates_mbit()

    def command(rate_mbit: float) -> list[str]:
        # htb rates are whole kbit; FRAME_BYTES/OPPORTUNITY_BYTES: htb counts Ethernet frames.
        kbit = str(max(8, round(rate_mbit * 1000 * FRAME_BYTES / OPPORTUNITY_BYTES)))
        return htb_class("change", port, htb, kbit, str(4 * FRAME_BYTES))

    def loop() -> None:
        batch = None
        if not tb.backend.owns_bottleneck:  # type: ignore[union-attr]
            batch = subprocess.Popen(
                tb.router.popen_argv(["tc", "-force", "-batch", "-"]), stdin=subprocess.PIPE, text=True
            )
        start = time.monotonic_ns()
        started.append(start)
        k = 0
        while not stop.is_set():
            argv = command(rates[k % len(rates)])
            if batch and batch.stdin:
                batch.stdin.write(" ".join(argv[1:]) + "\n")
                batch.stdin.flush()
            else:
                tb.backend.tc([argv])  # type: ignore[union-attr]
            k += 1
            time.sleep(max(0.0, (start + k * WINDOW_MS * 1_000_000 - time.monotonic_ns()) / 1e9))
        if batch and batch.stdin:
            batch.stdin.close()
            batch.wait(timeout=10)

    return loop


def _config(profile: Profile, backend: str, image: str) -> TestbedConfig:
    return TestbedConfig(profile=profile, backend=backend, client=HostSpec(image), servers=(HostSpec(image),))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=str(REPO / "traces" / "step-10-2-10.trace"))
    parser.add_argument("--backends", nargs="+", default=["delayline", "uml", "vm"])
    parser.add_argument("--image", default="debian:trixie-slim")
    args = parser.parse_args()
    trace_path = Path(args.trace).resolve()
    trace = load_trace(trace_path)
    rows = []
    for backend in args.backends:
        if backend == "delayline":
            rows.append(("delayline", "replayed (mm-link)", *replayed(trace, args.image)))
        rows.append((backend, "htb stepped per 100 ms", *stepped(trace, backend, args.image)))
    print(
        f"\n{trace_path.name}: mean {trace.mean_rate_mbit():.2f} Mbit/s, peak {trace.peak_rate_mbit():.2f}, "
        f"india's 80 ms; error per 100 ms window as a share of the mean rate"
    )
    print(f"{'backend':<11}{'how':<24}{'median':>8}{'p95':>8}  detail")
    for backend, how, median, p95, detail in rows:
        print(f"{backend:<11}{how:<24}{median:>8.2%}{p95:>8.2%}  {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
