"""A verdict never rests on CPU-bound loads (issue 63, decision 3).

A browser's loads of one kind on one path (its rows of an analysis kind, such as page loads,
playbacks or downloads, on one condition) of which more than CPU_BOUND_SHARE_MAX were
CPU-bound (the rows' `cpu_bound`: a CPU, not the path, limited the load; clients/browser/
README.md, "CPU-bound") measure the host as much as the network. The paper's findings
(claims.evaluate) are judged without them, on the other browser and the perf tools, and say
so: which browser on which path, and its share. Their figures stay in the report, flagged:
beside the verdict ("CPU-bound, not judged"), in their sections' tables and under Flagged
trials. Before a run, the dry run warns where the repo has measured such a share
(experiments/cpu_known.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from quicbed.workloads.video import STREAMING
from quicbed.workloads.web import PAGELOAD

from .loss_response import BROWSER_TOOLS
from .model import truthy

# Up to one load in ten may have waited for a CPU: with k of n loads slowed by any amount, the
# median can rise at most to the (1/2 + k/n) quantile of the undisturbed loads, so at 10 % a
# median stays within the 60th percentile of the path's own figures (and a sign test's pairs
# mostly compare the path). Beyond it, the slow loads become the figure. Issue 63 set 10 % as
# each browser's goal on each path; the same line sends a `--parallel` unit to be measured
# again alone (experiments/parallel.CPU_BOUND_RERUN) and flags the page-load tables
# (analysis/tables.py imports this line).
CPU_BOUND_SHARE_MAX = 0.10
LEFT_OUT = " left out: "  # a verdict line that names a browser left out (report.lacks_rows)

NOT_JUDGED = "CPU-bound, not judged: "  # before each of the left-out loads' own figures
WHAT_IS_LOADED = {PAGELOAD: "page loads", STREAMING: "playbacks", "cloud": "downloads"}


@dataclass(frozen=True)
class LeftOut:
    """A browser's loads of one kind on one path, too often CPU-bound for a verdict."""

    browser: str  # the client tool: chromium, firefox
    path: str  # the condition's label
    kind: str  # the analysis kind of its rows
    bound: int
    loads: int

    @property
    def share(self) -> float:
        return self.bound / self.loads

    def line(self) -> str:
        """'Chromium on india left out: 15 % of its page loads CPU-bound (3 of 20)'."""
        loads = WHAT_IS_LOADED.get(self.kind, f"{self.kind} loads")
        return (
            f"{self.browser.capitalize()} on {self.path}{LEFT_OUT}{100 * self.share:.0f} % of its "
            f"{loads} CPU-bound ({self.bound} of {self.loads})"
        )


def _paths(rows: pd.DataFrame) -> pd.Series:
    """Each row's path: its condition's label (the runner's ids c0, c1... are opaque)."""
    path = pd.Series(None, index=rows.index, dtype=object)
    for column in ("condition_label", "condition", "facet"):
        if column in rows:
            path = path.fillna(rows[column])
    return path.fillna("").astype(str)


def _keys(rows: pd.DataFrame) -> pd.Series:
    """Each row's (tool, path, kind): the unit a share is counted over."""
    keys = zip(rows["tool"].astype(str), _paths(rows), rows["workload"].astype(str), strict=True)
    return pd.Series(list(keys), index=rows.index, dtype=object)


def left_out(ok: pd.DataFrame, kinds: Iterable[str] | None = None) -> list[LeftOut]:
    """The browsers' loads of `ok` (successful rows; of the analysis `kinds` only, None: every
    kind) per path and kind, of which more than CPU_BOUND_SHARE_MAX were CPU-bound."""
    if ok.empty or "tool" not in ok:
        return []
    loads = ok[ok["tool"].isin(BROWSER_TOOLS)]
    if kinds is not None:
        loads = loads[loads["workload"].isin(tuple(kinds))]
    out = []
    for (tool, path, kind), group in loads.groupby(_keys(loads), sort=True):
        bound = int(truthy(group["cpu_bound"]).sum())
        if bound > CPU_BOUND_SHARE_MAX * len(group):
            out.append(LeftOut(tool, path, kind, bound, len(group)))
    return out


def rows_of(df: pd.DataFrame, groups: list[LeftOut]) -> pd.Series:
    """Which rows of `df` (failed ones too) are the left-out browsers' loads."""
    if not groups or df.empty or "tool" not in df:
        return pd.Series(False, index=df.index)
    wanted = {(g.browser, g.path, g.kind) for g in groups}
    return _keys(df).map(lambda key: key in wanted).astype(bool)


def rests_on(kept: pd.DataFrame, kinds: Iterable[str] | None) -> str:
    """What a verdict without the left-out loads rests on: the other clients' rows."""
    rows = kept if kinds is None else kept[kept["workload"].isin(tuple(kinds))]
    tools = sorted({str(t) for t in rows["tool"].dropna()}) if "tool" in rows else []
    if not tools:
        return "no other client's rows: no verdict without them"
    return f"the verdict rests on the other clients' rows ({', '.join(tools)})"


def set_apart(ok: pd.DataFrame, kinds: Iterable[str] | None) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(the rows a finding reading `kinds` judges, the left-out browsers' loads, the lines
    that say which were left out and what the verdict rests on instead)."""
    kinds = None if kinds is None else tuple(kinds)
    groups = left_out(ok, kinds)
    if not groups:
        return ok, ok.iloc[0:0], []
    apart = rows_of(ok, groups)
    kept = ok[~apart]
    return kept, ok[apart], [*(g.line() for g in groups), rests_on(kept, kinds)]


def flagged(found: Iterable[str]) -> tuple[str, ...]:
    """The left-out loads' own figures, shown beside the verdict, marked as not judged."""
    return tuple(NOT_JUDGED + line for line in found)
