"""Configured against measured, as a table a person reads at a glance."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from quicbed.topology.calibrate import Calibration


def print_calibration(cal: Calibration, console: Console | None = None) -> None:
    console = console or Console(stderr=False)
    table = Table(title=f"calibration: {cal.profile} via {cal.backend} ({cal.duration_s:.0f} s)")
    for column in ("metric", "dir", "configured", "measured", "tolerance", "result", "detail"):
        table.add_column(column)
    for c in cal.checks:
        verdict = "[green]pass[/green]" if c.passed else "[red]FAIL[/red]"
        table.add_row(c.metric, c.direction, f"{c.configured:g}", f"{c.measured:g}",
                      c.tolerance, verdict, c.detail)
    console.print(table)
    summary = "[green]path matches the profile[/green]" if cal.passed else \
        "[red]path does NOT match the profile: refusing to measure through it[/red]"
    console.print(summary)
