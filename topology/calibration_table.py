"""The calibration table (configured against measured, as a person reads it at a glance), and
the calibration run that prints it: `quicbed calibrate` and the netem guest share it."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from quicbed.topology import net
from quicbed.topology.calibrate import Calibration, calibrate
from quicbed.topology.calibration_reuse import remember
from quicbed.topology.proven import proven

Say = Callable[[str], None]

# Wider than any calibration table: lets rich measure the table's natural (unwrapped) width.
_MEASURE_WIDTH = 10_000


def calibration_table(cal: Calibration) -> Table:
    table = Table(title=f"calibration: {cal.profile} via {cal.backend} ({cal.duration_s:.0f} s)")
    for column in ("metric", "dir", "configured", "measured", "tolerance", "result", "detail"):
        table.add_column(column)
    for c in cal.checks:
        verdict = "[green]pass[/green]" if c.passed else "[red]FAIL[/red]"
        table.add_row(
            c.metric, c.direction, f"{c.configured:g}", f"{c.measured:g}", c.tolerance, verdict, c.detail
        )
    return table


def print_calibration(cal: Calibration, console: Console | None = None) -> None:
    console = console or Console(stderr=False)
    table = calibration_table(cal)
    if not console.is_terminal:
        # A log or CI has no width to fit, and rich's default of 80 columns would wrap each
        # detail over several lines: print it as wide as the table is, one line per check.
        options = console.options.update_width(_MEASURE_WIDTH)
        width = max(console.width, Measurement.get(console, options, table).maximum)
        console = Console(file=console.file, width=width, color_system=None)
    console.print(table)
    summary = (
        "[green]path matches the profile[/green]"
        if cal.passed
        else "[red]path does NOT match the profile: refusing to measure through it[/red]"
    )
    if cal.reused_from:
        summary += (
            f" (route and RTT proven now; goodput and loss as calibrated at "
            f"{cal.reused_from} on this path)"
        )
    console.print(summary)


def progress_printer() -> Say:
    """Progress lines on stderr, each with the seconds since the printer was made."""
    start = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    return say


def calibrate_path(
    cfg: net.TestbedConfig, *, rtt_samples: int, udp_packets: int, goodput_seconds: float, say: Say
) -> Calibration:
    """Bring the path up, calibrate it with progress, tear it down, print the table:
    `quicbed calibrate` and the netem guest (topology/guest.py) alike. A refusal on a
    contended host, or a short path, is measured again once on a calm host (proven.py)."""

    def calibrated(tb: net.Testbed) -> Calibration:
        return calibrate_up(
            tb, rtt_samples=rtt_samples, udp_packets=udp_packets, goodput_seconds=goodput_seconds, say=say
        )

    with proven(lambda: brought_up(cfg, say), calibrated, say=say) as (_tb, cal):
        return cal


@contextlib.contextmanager
def brought_up(cfg: net.TestbedConfig, say: Say) -> Iterator[net.Testbed]:
    say(f"bringing up {cfg.profile.name} ({cfg.profile.description})")
    with net.Testbed(cfg) as tb:
        probe = tb.forwarding_probe
        spread = f", median {probe['excess_median_ms']:.3f}" if probe else ""
        say(
            f"link backend: {tb.backend.name if tb.backend else '?'}; router forwarding RTT "
            f"{tb.forwarding_rtt_ms:.3f} ms (the least of the probe's pings{spread}; subtracted "
            "from the netem delay)"
        )
        yield tb


def calibrate_up(
    tb: net.Testbed, *, rtt_samples: int, udp_packets: int, goodput_seconds: float, say: Say
) -> Calibration:
    """Calibrate a path that is up (its profile's link applied), with progress; print the table."""
    cal = calibrate(
        tb,
        rtt_samples=rtt_samples,
        udp_packets=udp_packets,
        goodput_seconds=goodput_seconds,
        progress=lambda m: say(f"measuring {m}"),
    )
    remember(tb, cal)
    print_calibration(cal)
    return cal
