"""Configured against measured, as a table a person reads at a glance."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from quicbed.topology.calibrate import Calibration

# Wider than any calibration table: lets rich measure the table's natural (unwrapped) width.
_MEASURE_WIDTH = 10_000


def calibration_table(cal: Calibration) -> Table:
    table = Table(title=f"calibration: {cal.profile} via {cal.backend} ({cal.duration_s:.0f} s)")
    for column in ("metric", "dir", "configured", "measured", "tolerance", "result", "detail"):
        table.add_column(column)
    for c in cal.checks:
        verdict = "[green]pass[/green]" if c.passed else "[red]FAIL[/red]"
        table.add_row(c.metric, c.direction, f"{c.configured:g}", f"{c.measured:g}",
                      c.tolerance, verdict, c.detail)
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
    summary = "[green]path matches the profile[/green]" if cal.passed else \
        "[red]path does NOT match the profile: refusing to measure through it[/red]"
    console.print(summary)
