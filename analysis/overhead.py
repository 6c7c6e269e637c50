"""Where a run's wall time went: transfers against everything the testbed itself spent.

One home for the arithmetic, used by the runner's end-of-run summary, the report's run
section and bench/overhead_bench.py. Per condition, from the rows (`wall_s` per trial from the
runner, `tool_wall_s` around the tool's process, `transfer_s` on the tool's own clock) and the
manifest (`timing` of the condition: bring-up, calibration, server start):

    total = bring-up + calibration + server start + Σ wall_s
    Σ wall_s = Σ transfer_s + tool start/exit (tool_wall_s − transfer_s) + runner (wall_s − tool_wall_s)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .stats import finite_number

PARTS = ("bringup_s", "calibration_s", "server_start_s")


@dataclass
class Overhead:
    condition: str
    trials: int = 0
    transfer_s: float = 0.0  # Σ the tools' own connection-start → last-byte times
    trial_wall_s: float = 0.0  # Σ the runner's wall time per trial
    tool_s: float = 0.0  # Σ tool process start/exit around its transfer (docker exec included)
    setup: dict[str, float] = field(default_factory=dict)  # bring-up, calibration, server start
    per_trial: list[float] = field(default_factory=list)  # wall_s − transfer_s, each trial

    @property
    def runner_s(self) -> float:
        return self.trial_wall_s - self.transfer_s - self.tool_s

    @property
    def total_s(self) -> float:
        return self.trial_wall_s + sum(self.setup.values())

    @property
    def ratio(self) -> float | None:
        """Wall time ÷ transfer time (None without a measured transfer)."""
        return self.total_s / self.transfer_s if self.transfer_s > 0 else None

    @property
    def median_trial_overhead_s(self) -> float | None:
        return statistics.median(self.per_trial) if self.per_trial else None


def account(rows: Iterable[Mapping[str, Any]], manifest: Mapping[str, Any]) -> list[Overhead]:
    """Per condition, in the order conditions first appear in the rows."""
    by_cond: dict[str, Overhead] = {}
    for row in rows:
        cond = str(row.get("condition", "?"))
        acc = by_cond.setdefault(cond, Overhead(cond))
        wall, transfer = finite_number(row.get("wall_s")), finite_number(row.get("transfer_s"))
        tool_wall = finite_number(row.get("tool_wall_s"))
        acc.trials += 1
        acc.trial_wall_s += wall or 0.0
        if transfer is not None and wall is not None:
            acc.transfer_s += transfer
            acc.per_trial.append(wall - transfer)
            if tool_wall is not None:
                acc.tool_s += tool_wall - transfer
    conditions = manifest.get("conditions", {}) or {}
    for cond, acc in by_cond.items():
        timing = ((conditions.get(cond) or {}).get("calibration") or {}).get("timing") or {}
        acc.setup = {k: float(timing[k]) for k in PARTS if finite_number(timing.get(k)) is not None}
    return list(by_cond.values())


def summary_lines(accounts: list[Overhead]) -> list[str]:
    """One line per condition, for the end of a run and the report's run section."""
    lines = []
    for acc in accounts:
        if acc.ratio is None:
            continue
        parts = ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.1f} s" for k, v in acc.setup.items())
        lines.append(
            f"{acc.condition}: wall {acc.total_s:.1f} s = {acc.ratio:.2f}× its transfers "
            f"({acc.transfer_s:.1f} s over {acc.trials} trials); {parts}; tool start/exit "
            f"{acc.tool_s:.1f} s, runner {acc.runner_s:.1f} s; median per-trial overhead "
            f"{acc.median_trial_overhead_s:.3f} s"
        )
    return lines
