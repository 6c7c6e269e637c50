"""`quicbed check`: evaluate an experiment's `expect:` lines against a run's rows, per condition,
with the engine the report uses for its claims (analysis/expectations.judge).

Exit codes: 0 every expectation passes in every condition, 1 any fails, 2 unusable input.
Under GitHub Actions, failures are also printed as ::error annotations on the experiment file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.text import Text

from quicbed.analysis.expectations import judge
from quicbed.analysis.junit import Case, write_junit

from .matrix import conditions
from .schema import Experiment
from .store import load_rows


def check(
    exp: Experiment, run_dir: Path | str, console: Console | None = None, junit: Path | str | None = None
) -> int:
    """Judge every expectation in every condition; with `junit`, also write them as JUnit XML
    (one test case each, the measured numbers in the message)."""
    console = console or Console(highlight=False, soft_wrap=True)
    rows, _ = load_rows(run_dir)
    problem = _unusable(exp, Path(run_dir), rows)
    if problem:
        console.print(f"error: {problem}", markup=False)
        return 2
    failed = 0
    cases: list[Case] = []
    ok = successful(rows)
    for cond in conditions(exp):
        mine = ok[ok["condition"] == cond.id]
        for e in exp.expect:
            outcome = judge(e, mine, cond.link.rtt_ms, cond.link.down.rate_mbit)
            verdict = ("PASS", "green") if outcome.passed else ("FAIL", "red")
            line = f" {cond.id} {cond.label}: {e.text}  [{outcome.detail}]"
            console.print(Text.assemble(verdict, line))
            message = "" if outcome.passed else f"{e.text}: {outcome.detail}"
            cases.append(Case(f"{exp.name}.{cond.id} {cond.label}", e.text, message, detail=outcome.detail))
            if not outcome.passed:
                failed += 1
                _annotate(exp, e.line, f"{e.text} failed in {cond.label}: {outcome.detail}")
    total = len(exp.expect) * len(conditions(exp))
    console.print(f"{total - failed}/{total} expectations passed")
    if junit:
        write_junit(junit, f"quicbed check {exp.name}", cases)
    return 1 if failed else 0


def _unusable(exp: Experiment, run_dir: Path, rows: list[dict[str, Any]]) -> str | None:
    if not exp.expect:
        return f"{exp.file} has no expect: section"
    if not run_dir.is_dir():
        return f"no run directory {run_dir}"
    if not rows:
        return f"{run_dir} has no result rows"
    return None


def successful(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows without an error, as the analysis reads them (missing columns as None)."""
    ok = pd.DataFrame([r for r in rows if r.get("error") is None])
    for column in ("condition", "protocol", "client", "server"):
        if column not in ok:
            ok[column] = None
    return ok


def _annotate(exp: Experiment, line: int, message: str) -> None:
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(f"::error file={exp.file},line={line}::{message}", flush=True)
