"""Trace-driven links in Mahimahi's format, and the models the shipped traces come from.

A trace is a text file with one integer per line: a millisecond timestamp, non-decreasing,
each line one delivery opportunity for 1500 bytes (Mahimahi's mm-link: an opportunity carries
one MTU-sized packet, or several smaller ones, and is wasted when the queue is empty). The
trace repeats with a period of its last timestamp. `down: {trace: traces/step.trace}` in a
profile or an experiment replaces a fixed `rate_mbit`; the delay line replays it exactly
(topology/delayline), and calibration checks the delivered rate per 100 ms window against it.

`python -m quicbed.topology.traces` regenerates the shipped traces (traces/, at the
repository's root) from the models below; a unit test checks that they still agree.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import os
import random
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from quicbed import limits
from quicbed.errors import InputError
from quicbed.paths import REPO

OPPORTUNITY_BYTES = 1500  # an IP packet of one MTU per line, as Mahimahi counts it
SHIPPED_DIR = REPO / "traces"
MAX_TRACE_LINES = 5_000_000  # ~40 MB of text: beyond it a trace is refused, not loaded
MAX_TRACE_MS = limits.TRACE_MAX_MS  # a trace's period: 24 h, the longest trial (quicbed/limits.py)
WINDOW_MS = 100  # calibration's window for the delivered rate


@dataclass(frozen=True)
class Trace:
    """A loaded trace: its delivery opportunities (ms, sorted) and where it came from."""

    path: Path
    opportunities_ms: tuple[int, ...]
    sha256: str

    @property
    def period_ms(self) -> int:
        return self.opportunities_ms[-1]

    def mean_rate_mbit(self) -> float:
        return len(self.opportunities_ms) * OPPORTUNITY_BYTES * 8 / (self.period_ms * 1e3)

    def offered_mbit(self, first_window: int, windows: int, window_ms: int = WINDOW_MS) -> list[float]:
        """The rate the trace offers in each of `windows` windows from `first_window` on, the
        trace repeating: the opportunity at timestamp T of repetition j is due at j * period + T
        ms after the trace's start, as the delay line sends it."""
        start, end = first_window * window_ms, (first_window + windows) * window_ms
        counts = [0] * windows
        period = self.period_ms
        for j in range(start // period, end // period + 1):
            lo = bisect.bisect_left(self.opportunities_ms, start - j * period)
            hi = bisect.bisect_left(self.opportunities_ms, end - j * period)
            for t in self.opportunities_ms[lo:hi]:
                counts[(j * period + t) // window_ms - first_window] += 1
        return [c * OPPORTUNITY_BYTES * 8 / (window_ms * 1e3) for c in counts]

    def window_rates_mbit(self, window_ms: int = WINDOW_MS) -> list[float]:
        """The rate offered in each window of the first period."""
        return self.offered_mbit(0, max(1, self.period_ms // window_ms), window_ms)

    def peak_rate_mbit(self, window_ms: int = WINDOW_MS) -> float:
        return max(self.window_rates_mbit(window_ms))


def resolve_trace(name: str, relative_to: Iterable[Path]) -> Path:
    """A trace's path: absolute, or relative to the first of `relative_to` that has it (the
    file naming it, then the repository's root, where traces/ holds the shipped ones)."""
    path = Path(name)
    if path.is_absolute():
        return path
    candidates = [Path(os.path.abspath(base / path)) for base in relative_to]
    return next((c for c in candidates if c.is_file()), candidates[0] if candidates else path)


def load_trace(
    path: Path, file: str = "", line: int | None = None, field: str = "trace", shown: str = ""
) -> Trace:
    """Read and validate a trace. An error names the YAML that named the trace (file, line,
    field) and, in its message, the trace's own line, the trace named as the YAML names it
    (`shown`) or by its path; never the trace's bytes (a trace naming /etc/shadow must not
    print it)."""

    def bad(message: str, number: int | None = None) -> InputError:
        return InputError(f"{shown or path}{f':{number}' if number else ''}: {message}", file, line, field)

    if any(ord(c) < 32 or ord(c) == 127 for c in str(path)):
        # The delay line's config is key=value lines: a newline in a path would add keys.
        message = f"{shown or path!r}: a trace's path must not hold control characters"
        raise InputError(message, file, line, field)
    data = _read_trace(path, bad)
    times: list[int] = []
    for number, raw in enumerate(data.splitlines(), 1):
        text = raw.strip()
        if text:
            times.append(_timestamp(text, times[-1] if times else 0, len(times), number, bad))
    if not times:
        raise bad("the trace has no delivery opportunities")
    if times[-1] == 0:
        raise bad("the trace must last more than 0 ms (its last timestamp)")
    return Trace(path.resolve(), tuple(times), hashlib.sha256(data).hexdigest())


def _read_trace(path: Path, bad: Callable[..., InputError]) -> bytes:
    """The trace's bytes: a regular file, not a symbolic link (a trace read as root must not
    be a way to read another file), within TRACE_MAX_BYTES, checked before it is read."""
    try:
        return limits.read_bounded(path, limits.TRACE_MAX_BYTES, follow=False)
    except limits.TooBig as exc:
        raise bad(f"cannot use it as a trace: {exc}") from None
    except OSError as exc:
        raise bad(f"cannot read trace: {exc.strerror or type(exc).__name__}") from None


def _timestamp(text: bytes, previous: int, count: int, number: int, bad: Callable[..., InputError]) -> int:
    """One line's timestamp, checked; the messages quote no content (see load_trace)."""
    if count >= MAX_TRACE_LINES:
        raise bad(f"more than {MAX_TRACE_LINES} opportunities", number)
    if not (text.isascii() and text.isdigit()):
        raise bad("not a whole number of milliseconds", number)
    # Counted in digits first, so int() is never handed a number of a million digits.
    if len(text.lstrip(b"0")) > len(str(MAX_TRACE_MS)) or int(text) > MAX_TRACE_MS:
        raise bad(
            f"a timestamp beyond {MAX_TRACE_MS} ms ({MAX_TRACE_MS // 3_600_000} h): too long a trace", number
        )
    t = int(text)
    if t < previous:
        raise bad("timestamps must not go back (earlier than the line before)", number)
    return t


def delivered_per_window(
    times_ns: Sequence[int], start_ns: int, window_ms: int = WINDOW_MS
) -> tuple[int, list[float]]:
    """MTU-sized datagrams' arrival times (ns) as Mbit/s per window counted from `start_ns`
    (the trace's time 0): the first window and the rates of the whole windows after the first
    arrival's (the queue fills) up to the one before the last arrival's."""
    if not times_ns:
        return 0, []
    window_ns = window_ms * 1_000_000
    first = (times_ns[0] - start_ns) // window_ns + 1
    counts = [0] * max(0, (times_ns[-1] - start_ns) // window_ns - 1 - first)
    for t in times_ns:
        k = (t - start_ns) // window_ns - first
        if 0 <= k < len(counts):
            counts[k] += 1
    return first, [c * OPPORTUNITY_BYTES * 8 / (window_ms * 1e3) for c in counts]


def windowed_error(
    delivered_mbit: Sequence[float], offered_mbit: Sequence[float], mean_mbit: float
) -> tuple[float, float]:
    """Median and p95 of |delivered - offered| per window, as a share of the trace's mean rate
    (a share of each window's own rate is undefined in an outage)."""
    errors = sorted(abs(d - o) / mean_mbit for d, o in zip(delivered_mbit, offered_mbit, strict=True))
    p95 = errors[min(len(errors) - 1, math.ceil(0.95 * len(errors)) - 1)]
    return statistics.median(errors), p95


# -- the models the shipped traces come from ---------------------------------------------------


def opportunities_at(rates_mbit: Sequence[float]) -> list[int]:
    """Opportunities for a rate per millisecond (rates_mbit[m] holds in ms m+1), spread evenly:
    a fractional opportunity carries over to the next millisecond."""
    per_ms = 1e3 / (OPPORTUNITY_BYTES * 8)  # opportunities per ms at 1 Mbit/s
    out: list[int] = []
    carried = 0.0
    for m, rate in enumerate(rates_mbit):
        carried += rate * per_ms
        whole = math.floor(carried + 1e-9)
        out += [m + 1] * whole
        carried -= whole
    if not out or out[-1] != len(rates_mbit):
        out.append(len(rates_mbit))  # the period is the trace's length
    return out


def step_model(steps: Sequence[tuple[float, float]]) -> list[float]:
    """(rate Mbit/s, seconds) pairs, one after the other: seed 001's rate changes."""
    return [rate for rate, seconds in steps for _ in range(round(seconds * 1000))]


def lte_model(seconds: float, seed: int, low: float = 1.0, high: float = 24.0) -> list[float]:
    """LTE-like: the log of the rate walks at random every 200 ms between `low` and `high`
    Mbit/s, with a short outage (no opportunities, 50-300 ms) about every 8 s, as handovers
    and fades give. A model, not a measurement: use public traces for a real network."""
    rng = random.Random(seed)
    rates: list[float] = []
    log_rate = math.log(math.sqrt(low * high))
    while len(rates) < seconds * 1000:
        log_rate = min(math.log(high), max(math.log(low), log_rate + rng.gauss(0, 0.35)))
        if rng.random() < 0.2 / 8:  # one 200 ms step in 40: an outage every 8 s on average
            rates += [0.0] * rng.randrange(50, 301)
        rates += [math.exp(log_rate)] * 200
    return rates[: round(seconds * 1000)]


def starlink_model(seconds: float, seed: int, low: float = 8.0, high: float = 30.0) -> list[float]:
    """Starlink-like: the satellite changes every 15 s (at 12, 27, 42 and 57 s past the
    minute); each change brings a new rate, drawn between `low` and `high` Mbit/s, after a
    100-250 ms gap with no opportunities, and the rate wobbles by 5 % from one millisecond to
    the next. Scaled to rates at which the shipped traces stay small."""
    rng = random.Random(seed)
    total = round(seconds * 1000)
    rates: list[float] = []
    rate, gap_end = rng.uniform(low, high), 0
    for m in range(total):
        if m % 15000 == 12000:
            rate, gap_end = rng.uniform(low, high), m + rng.randrange(100, 251)
        rates.append(0.0 if m < gap_end else max(0.0, rng.gauss(rate, 0.05 * rate)))
    return rates


SHIPPED: dict[str, Callable[[], list[float]]] = {
    "step-10-2-10": lambda: step_model([(10, 5), (2, 5), (10, 5)]),
    "lte-drive": lambda: lte_model(60, seed=1),
    # Within the DASH ladder (150-2500 kbit/s of video): an ABR player has to follow it.
    "lte-lowband": lambda: lte_model(60, seed=1, low=0.4, high=5.0),
    "starlink-handover": lambda: starlink_model(60, seed=1),
}


def trace_text(opportunities: Sequence[int]) -> str:
    return "".join(f"{t}\n" for t in opportunities)


def write_shipped(directory: Path = SHIPPED_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in SHIPPED.items():
        path = directory / f"{name}.trace"
        path.write_text(trace_text(opportunities_at(model())))
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_shipped(Path(sys.argv[1]) if len(sys.argv) > 1 else SHIPPED_DIR):
        trace = load_trace(written_path)
        print(
            f"{written_path}: {len(trace.opportunities_ms)} opportunities over "
            f"{trace.period_ms / 1000:g} s, mean {trace.mean_rate_mbit():.2f} Mbit/s, "
            f"peak {trace.peak_rate_mbit():.2f} (100 ms windows)"
        )
