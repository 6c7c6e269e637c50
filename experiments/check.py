"""`quicbed check`: evaluate an experiment's `expect:` lines against a run's rows.

Exit codes: 0 every expectation passes in every condition, 1 any fails, 2 unusable input.
Under GitHub Actions, failures are also printed as ::error annotations on the experiment file.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from .expectations import Ref, evaluate, statistic
from .matrix import Condition, conditions
from .registry import METRICS
from .schema import Experiment
from .store import load_rows


def check(exp: Experiment, run_dir: Path | str, console: Console | None = None) -> int:
    console = console or Console(highlight=False, soft_wrap=True)
    rows, _ = load_rows(run_dir)
    problem = _unusable(exp, Path(run_dir), rows)
    if problem:
        console.print(f"error: {problem}", markup=False)
        return 2
    failed = 0
    for cond in conditions(exp):
        mine = [r for r in rows if r.get("condition") == cond.id]
        rtt, rate = condition_rtt(cond, mine), cond.link.down.rate_mbit
        for e in exp.expect:
            outcome = evaluate(e, lambda ref, mine=mine: measure(mine, ref), rtt, rate)
            verdict = ("PASS", "green") if outcome.passed else ("FAIL", "red")
            line = f" {cond.id} {cond.label}: {e.text}  [{outcome.detail}]"
            console.print(Text.assemble(verdict, line))
            if not outcome.passed:
                failed += 1
                _annotate(exp, e.line, f"{e.text} failed in {cond.label}: {outcome.detail}")
    total = len(exp.expect) * len(conditions(exp))
    console.print(f"{total - failed}/{total} expectations passed")
    return 1 if failed else 0


def _unusable(exp: Experiment, run_dir: Path, rows: list[dict[str, Any]]) -> str | None:
    if not exp.expect:
        return f"{exp.file} has no expect: section"
    if not run_dir.is_dir():
        return f"no run directory {run_dir}"
    if not rows:
        return f"{run_dir} has no result rows"
    return None


def measure(rows: list[dict[str, Any]], ref: Ref) -> float:
    """`ref`'s statistic over the successful rows of its group (protocol or client label)."""
    column = METRICS[ref.metric]
    values = [
        r.get(column)
        for r in rows
        if r.get("error") is None
        and ref.group in (r.get("protocol"), r.get("client"))
        and (ref.server is None or r.get("server") == ref.server)
    ]
    return statistic([v for v in values if isinstance(v, int | float)], ref.statistic)


def condition_rtt(cond: Condition, rows: list[dict[str, Any]]) -> float:
    """The calibrated RTT if the rows carry one, else the configured one."""
    calibrated = statistic(
        [r.get("calib_rtt_ms") for r in rows if isinstance(r.get("calib_rtt_ms"), int | float)],
        "median",
    )
    return cond.link.rtt_ms if math.isnan(calibrated) else calibrated


def _annotate(exp: Experiment, line: int, message: str) -> None:
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(f"::error file={exp.file},line={line}::{message}", flush=True)
