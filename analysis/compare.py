"""`quicbed compare BASE NEW`: did a change make the protocol behaviour worse?

For every condition × server × client × metric that both runs measured: the change of the
median (NEW − BASE) with a bootstrap CI, a Mann–Whitney p-value, Holm's correction over all
comparisons, the smallest change the repetitions could have detected at the observed noise,
and a verdict against the user's threshold for that metric:

- regressed: significant after correction, and worse than the threshold;
- improved: significant, and better by more than the threshold;
- no change: neither, and the repetitions could have seen a change of the threshold's size;
- inconclusive: neither, but they could not (the minimum detectable effect is larger).

Runs that are not comparable (another profile, calibration, link backend, kernel or number of
repetitions) are refused with the reasons, never compared.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from quicbed import rowschema, runmanifest
from quicbed.errors import InputError

from .junit import Case, write_junit
from .load import AnalysisError, load_runs
from .manifest import calibration_entries
from .stats import Estimate, clean, median_ci, median_diff_ci, mwu_p
from .tables import fmt

DEFAULT_MAX_REGRESS_PCT = 5.0
ALPHA = 0.01  # family-wise, after Holm's correction (the report's significance level)
POWER = 0.8  # for the minimum detectable effect
MWU_EFFICIENCY = 3 / math.pi  # Mann–Whitney against the t-test for normal data (0.955)
RTT_AGREEMENT = 0.02  # calibrated RTTs of the two runs within 2 % (or 1 ms) of each other
# Metrics where a larger value is better; every other metric is a time (larger is worse).
HIGHER_IS_BETTER = {"throughput"}
CELL_KEYS = ["condition_label", "server", "client", "object"]

REGRESSED, IMPROVED, NO_CHANGE, INCONCLUSIVE = "regressed", "improved", "no change", "inconclusive"


class NotComparable(InputError):
    """The two runs measured different things; comparing them would mislead."""


@dataclass(frozen=True)
class Cell:
    condition: str
    server: str
    client: str
    object: str
    metric: str
    unit: str
    base: Estimate
    new: Estimate
    diff: Estimate  # median(new) - median(base)
    change_pct: float  # diff / median(base), in %
    worse_pct: float  # change_pct signed so that positive is worse
    p: float  # Mann–Whitney, two-sided
    threshold_pct: float
    mde_pct: float  # minimum detectable effect, % of the base median
    p_adjusted: float = math.nan
    verdict: str = ""

    @property
    def name(self) -> str:
        return f"{self.condition} · {self.server} · {self.client} · {self.object} · {self.metric}"


@dataclass
class Comparison:
    base: str
    new: str
    alpha: float
    cells: list[Cell] = field(default_factory=list)

    @property
    def regressed(self) -> list[Cell]:
        return [c for c in self.cells if c.verdict == REGRESSED]


def parse_thresholds(items: Iterable[str]) -> dict[str, float]:
    """`connection_time=5%` (or `=5`) -> {"connection_time": 5.0}; metrics of the schema."""
    out: dict[str, float] = {}
    for item in items:
        metric, sep, value = item.partition("=")
        metric = metric.strip()
        if not sep or metric not in rowschema.METRICS:
            raise InputError(
                f"--max-regress {item!r}: expected METRIC=PCT%, metric one of "
                f"{', '.join(rowschema.METRICS)}"
            )
        try:
            pct = float(value.strip().removesuffix("%"))
        except ValueError:
            raise InputError(f"--max-regress {item!r}: {value!r} is not a percentage") from None
        if not 0 <= pct < 1000:
            raise InputError(f"--max-regress {item!r}: the percentage must be 0 to 1000")
        out[metric] = pct
    return out


def comparability(base: tuple[pd.DataFrame, dict], new: tuple[pd.DataFrame, dict]) -> list[str]:
    """Why the two runs cannot be compared (empty: they can)."""
    (bdf, bman), (ndf, nman) = base, new
    problems = []
    if (bman.get("experiment"), bman.get("matrix_hash")) != (nman.get("experiment"), nman.get("matrix_hash")):
        problems.append(
            f"different experiments ({bman.get('experiment')} "
            f"{bman.get('matrix_hash')} against {nman.get('experiment')} "
            f"{nman.get('matrix_hash')}: profiles, sweep, servers, clients, "
            "workload or repetitions differ)"
        )
    bkernel, nkernel = (m.get("host", {}).get("kernel") for m in (bman, nman))
    if bkernel != nkernel:
        problems.append(f"kernel {bkernel} against {nkernel}")
    bcal = {e["label"]: e for e in calibration_entries([bman])}
    ncal = {e["label"]: e for e in calibration_entries([nman])}
    bconds, nconds = bman.get("conditions", {}), nman.get("conditions", {})
    blinks = {c.get("label"): c.get("link") for c in bconds.values()}
    nlinks = {c.get("label"): c.get("link") for c in nconds.values()}
    for label in sorted(set(blinks) & set(nlinks), key=str):
        if blinks[label] != nlinks[label]:
            problems.append(f"condition {label}: the profiles differ")
    for label in sorted(set(bcal) & set(ncal), key=str):
        problems += _calibration_differences(label, bcal[label], ncal[label], bconds, nconds)
    if not set(blinks) & set(nlinks):
        problems.append("no condition in common")
    bcount = bdf.groupby(CELL_KEYS, dropna=False).size()
    ncount = ndf.groupby(CELL_KEYS, dropna=False).size()
    common = bcount.index.intersection(ncount.index)
    differ = [k for k in common if bcount[k] != ncount[k]]
    if differ:
        k = differ[0]
        problems.append(
            f"repetitions differ ({' · '.join(map(str, k))}: {bcount[k]} trials "
            f"against {ncount[k]}, and {len(differ) - 1} more cells)"
        )
    return problems


def _calibration_differences(label: str, b: dict, n: dict, bconds: dict, nconds: dict) -> list[str]:
    out = []
    if not (b.get("calibrated") and n.get("calibrated")):
        return [f"condition {label}: not calibrated in both runs"]
    if not (b.get("passed") and n.get("passed")):
        out.append(
            f"condition {label}: calibration failed in "
            + ("the base run" if not b.get("passed") else "the new run")
        )
    brtt, nrtt = (e.get("rtt_median_ms") or e.get("rtt_min_ms") for e in (b, n))
    if isinstance(brtt, int | float) and isinstance(nrtt, int | float):
        if abs(brtt - nrtt) > max(1.0, RTT_AGREEMENT * brtt):
            out.append(f"condition {label}: calibrated RTT {brtt:.2f} ms against {nrtt:.2f} ms")
    backends = [_backend(conds, label) for conds in (bconds, nconds)]
    if backends[0] != backends[1]:
        out.append(f"condition {label}: link backend {backends[0]} against {backends[1]}")
    return out


def _backend(conditions: dict, label: str) -> str | None:
    for entry in conditions.values():
        if entry.get("label") == label:
            return runmanifest.calibration_record(entry.get("calibration")).get("backend")
    return None


def min_mwu_p(n1: int, n2: int) -> float:
    """The smallest two-sided p-value Mann–Whitney can give for these sample sizes."""
    return min(1.0, 2 / math.comb(n1 + n2, n1)) if n1 and n2 else 1.0


def mde_pct(base: np.ndarray, new: np.ndarray, alpha: float) -> float:
    """The smallest change of the median (% of the base median) that the samples could have
    detected at level `alpha` with POWER, at their observed spread (a robust σ from the
    interquartile ranges); infinite when no result could be significant at that level."""
    n1, n2 = len(base), len(new)
    if min(n1, n2) < 2 or min_mwu_p(n1, n2) >= alpha:
        return math.inf
    iqr = [np.subtract(*np.percentile(x, [75, 25])) for x in (base, new)]
    sigma = math.sqrt((iqr[0] ** 2 * (n1 - 1) + iqr[1] ** 2 * (n2 - 1)) / (n1 + n2 - 2)) / 1.349
    z = sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(POWER)
    effect = z * sigma * math.sqrt(1 / n1 + 1 / n2) / math.sqrt(MWU_EFFICIENCY)
    median = float(np.median(base))
    return 100 * effect / abs(median) if median else math.inf


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN)."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if np.isfinite(p))
    adjusted = [math.nan] * len(pvalues)
    running, m = 0.0, len(order)
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def compare_runs(
    base: str, new: str, thresholds: dict[str, float] | None = None, alpha: float = ALPHA
) -> Comparison:
    """Load both runs, refuse them if they are not comparable, compare every common cell."""
    runs = [load_runs([run]) for run in (base, new)]
    (bdf, (bman,)), (ndf, (nman,)) = runs
    problems = comparability((bdf, bman), (ndf, nman))
    if problems:
        raise NotComparable(
            f"runs {bman.get('run_id')} and {nman.get('run_id')} are not "
            "comparable: " + "; ".join(problems)
        )
    result = Comparison(str(bman.get("run_id")), str(nman.get("run_id")), alpha)
    measured = _cells(_labelled(bdf), _labelled(ndf), thresholds or {})
    m = sum(np.isfinite(cell.p) for cell, _, _ in measured)
    adjusted = holm([cell.p for cell, _, _ in measured])
    for (cell, b, n), p_adj in zip(measured, adjusted, strict=True):
        # The MDE at the level the comparison needs after correction (Bonferroni's, Holm's
        # strictest step: a cell that clears it is detected whatever the other cells show).
        result.cells.append(_judged(cell, p_adj, mde_pct(b, n, alpha / max(m, 1)), alpha))
    return result


def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    """The successful rows, each with its condition's label (the ids c0.. are per run)."""
    ok = df[~df["failed"]]
    return ok.assign(condition_label=ok["condition_label"].fillna(ok["condition"]).astype(str))


def _cells(
    bok: pd.DataFrame, nok: pd.DataFrame, thresholds: dict[str, float]
) -> list[tuple[Cell, np.ndarray, np.ndarray]]:
    """Every cell both runs measured, with its two samples (base, new)."""
    out = []
    ngroups = dict(list(nok.groupby(CELL_KEYS, sort=False)))
    for key, bgroup in bok.groupby(CELL_KEYS, sort=False):
        if key not in ngroups:
            continue
        for metric, column in rowschema.METRICS.items():
            b = clean(pd.to_numeric(bgroup[column], errors="coerce"))
            n = clean(pd.to_numeric(ngroups[key][column], errors="coerce"))
            if len(b) == 0 or len(n) == 0:
                continue
            base, new = median_ci(b), median_ci(n)
            change = 100 * (new.value - base.value) / base.value if base.value else math.nan
            sign = -1 if metric in HIGHER_IS_BETTER else 1
            condition, server, client, obj = map(str, key)
            cell = Cell(
                condition,
                server,
                client,
                obj,
                metric,
                rowschema.unit(column),
                base,
                new,
                median_diff_ci(n, b),
                change,
                sign * change,
                mwu_p(b, n),
                thresholds.get(metric, DEFAULT_MAX_REGRESS_PCT),
                math.nan,
            )
            out.append((cell, b, n))
    return out


def _judged(cell: Cell, p_adj: float, mde: float, alpha: float) -> Cell:
    significant = np.isfinite(p_adj) and p_adj < alpha
    if significant and cell.worse_pct > cell.threshold_pct:
        verdict = REGRESSED
    elif significant and cell.worse_pct < -cell.threshold_pct:
        verdict = IMPROVED
    elif mde > cell.threshold_pct:
        verdict = INCONCLUSIVE
    else:
        verdict = NO_CHANGE
    return dataclasses.replace(cell, p_adjusted=p_adj, mde_pct=mde, verdict=verdict)


def fmt_pct(value: float) -> str:
    if not np.isfinite(value):
        return "∞" if value == math.inf else "–"
    return f"{value:+.1f}%"


def markdown(result: Comparison) -> str:
    """A table ready for a pull-request comment, regressions first."""
    order = {REGRESSED: 0, INCONCLUSIVE: 1, IMPROVED: 2, NO_CHANGE: 3}
    lines = [
        f"### quicbed compare: {result.base} → {result.new}",
        "",
        f"{len(result.cells)} comparisons; Mann–Whitney U, Holm-corrected, family-wise "
        f"α = {result.alpha:g}; MDE: the smallest change of the median the repetitions "
        f"could detect at that level with {POWER:.0%} power.",
        "",
        "| verdict | condition | server | client | object | metric | base median [95% CI] "
        "| new median [95% CI] | change | threshold | p (Holm) | MDE |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(result.cells, key=lambda c: order[c.verdict]):
        mark = {REGRESSED: "❌ regressed", IMPROVED: "✅ improved"}.get(c.verdict, c.verdict)
        unit = f" {c.unit}" if c.unit else ""
        lines.append(
            f"| {mark} | {c.condition} | {c.server} | {c.client} | {c.object} | "
            f"{c.metric} | "
            f"{_est(c.base)}{unit} | {_est(c.new)}{unit} | {fmt_pct(c.change_pct)} | "
            f"{c.threshold_pct:g}% | {_p(c.p_adjusted)} | "
            f"{fmt_pct(c.mde_pct).lstrip('+')} |"
        )
    counts = {v: sum(c.verdict == v for c in result.cells) for v in order}
    lines += ["", ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "nothing to compare"]
    return "\n".join(lines) + "\n"


def _est(e: Estimate) -> str:
    ci = f" [{fmt(e.lo)}, {fmt(e.hi)}]" if np.isfinite(e.lo) else ""
    return f"{fmt(e.value)}{ci} (n={e.n})"


def _p(p: float) -> str:
    return "–" if not np.isfinite(p) else "<0.0001" if p < 1e-4 else f"{p:.4f}"


def to_json(result: Comparison) -> dict[str, Any]:
    def clean_value(v: Any) -> Any:
        return None if isinstance(v, float) and not np.isfinite(v) else v

    cells = []
    for c in result.cells:
        d = asdict(c)
        cells.append(
            {
                k: ({kk: clean_value(vv) for kk, vv in v.items()} if isinstance(v, dict) else clean_value(v))
                for k, v in d.items()
            }
        )
    return {
        "base": result.base,
        "new": result.new,
        "alpha": result.alpha,
        "regressed": len(result.regressed),
        "cells": cells,
    }


def write_json(result: Comparison, path: Path) -> None:
    path.write_text(json.dumps(to_json(result), indent=1) + "\n")


def junit_cases(result: Comparison) -> list[Case]:
    cases = []
    for c in result.cells:
        numbers = (
            f"median {fmt(c.base.value)} -> {fmt(c.new.value)} {c.unit} "
            f"({fmt_pct(c.change_pct)}; threshold {c.threshold_pct:g}%, Holm p "
            f"{_p(c.p_adjusted)}, n {c.base.n}/{c.new.n}, MDE "
            f"{fmt_pct(c.mde_pct).lstrip('+')})"
        )
        failure = f"{c.verdict}: {numbers}" if c.verdict == REGRESSED else ""
        skipped = f"inconclusive: {numbers}" if c.verdict == INCONCLUSIVE else ""
        cases.append(
            Case(
                f"{c.condition}.{c.server}.{c.client}.{c.object}",
                c.metric,
                failure,
                skipped,
                f"{c.verdict}: {numbers}",
            )
        )
    return cases


def main_compare(
    base: str,
    new: str,
    max_regress: list[str],
    *,
    alpha: float = ALPHA,
    json_path: str | None = None,
    junit_path: str | None = None,
) -> int:
    """CLI: the Markdown table on stdout; 0 no regression, 1 a regression, 2 bad input or runs
    that are not comparable."""
    try:
        if not 0 < alpha < 1:
            raise InputError(f"--alpha {alpha:g}: must be between 0 and 1")
        result = compare_runs(base, new, parse_thresholds(max_regress), alpha)
        if json_path:
            write_json(result, Path(json_path))
        if junit_path:
            write_junit(junit_path, f"quicbed compare {result.base} {result.new}", junit_cases(result))
    except (InputError, AnalysisError) as exc:
        print(f"quicbed compare: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"quicbed compare: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    print(markdown(result), end="")
    return 1 if result.regressed else 0
