"""Medians, percentiles and protocol comparisons with bootstrap confidence intervals.

Percentile bootstrap, seeded so a report is reproducible, vectorised with numpy.
Comparisons follow Kakhki et al. (IMC 2017): Welch's t-test, here together with
Mann-Whitney U because timing distributions are skewed, at p < 0.01 with >= 10 samples.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

N_BOOT = 2000
LEVEL = 0.95
SEED = 20221
ALPHA = 0.01
MIN_N = 10
# Bound on resample matrix size (floats), so a large sample is resampled in chunks.
MAX_CELLS = 4_000_000

Statistic = Callable[[np.ndarray], np.ndarray]  # (B, n) resamples -> (B,) statistics


def finite_number(value: object) -> float | None:
    """A row's value as a finite float, or None: missing, NaN, not a number, or a bool (JSON's
    true is no measurement)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class Estimate:
    n: int
    value: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Comparison:
    """a against b (e.g. QUIC against TLS 1.2); diff = median(a) - median(b)."""

    a: Estimate
    b: Estimate
    diff: Estimate
    welch_p: float
    mwu_p: float

    @property
    def significant(self) -> bool:
        return min(self.a.n, self.b.n) >= MIN_N and self.welch_p < ALPHA and self.mwu_p < ALPHA

    @property
    def relative(self) -> float:
        """diff as a fraction of b's median."""
        return self.diff.value / self.b.value if self.b.value else np.nan


def clean(values: object) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


def quantile_stat(q: float) -> Statistic:
    return lambda samples: np.quantile(samples, q, axis=-1)


def bootstrap_distribution(
    x: np.ndarray, stat: Statistic, n_boot: int, rng: np.random.Generator
) -> np.ndarray:
    chunk = max(1, MAX_CELLS // max(len(x), 1))
    parts = []
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, len(x), size=(min(chunk, n_boot - start), len(x)))
        parts.append(stat(x[idx]))
    return np.concatenate(parts)


def interval(dist: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2
    lo, hi = np.quantile(dist, [tail, 1 - tail])
    return float(lo), float(hi)


def percentile_ci(
    values: object, q: float = 0.5, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = SEED
) -> Estimate:
    """The q-quantile of the sample and its percentile-bootstrap CI."""
    x = clean(values)
    if len(x) == 0:
        return Estimate(0, np.nan, np.nan, np.nan)
    value = float(np.quantile(x, q))
    if len(x) < 2:
        return Estimate(1, value, np.nan, np.nan)
    dist = bootstrap_distribution(x, quantile_stat(q), n_boot, np.random.default_rng(seed))
    return Estimate(len(x), value, *interval(dist, level))


def median_ci(values: object, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = SEED) -> Estimate:
    return percentile_ci(values, 0.5, n_boot, level, seed)


def median_diff_ci(
    a: object, b: object, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = SEED
) -> Estimate:
    """median(a) - median(b), with a CI from resampling a and b independently."""
    xa, xb = clean(a), clean(b)
    if len(xa) == 0 or len(xb) == 0:
        return Estimate(min(len(xa), len(xb)), np.nan, np.nan, np.nan)
    value = float(np.median(xa) - np.median(xb))
    if min(len(xa), len(xb)) < 2:
        return Estimate(min(len(xa), len(xb)), value, np.nan, np.nan)
    rng = np.random.default_rng(seed)
    median = quantile_stat(0.5)
    dist = bootstrap_distribution(xa, median, n_boot, rng) - bootstrap_distribution(xb, median, n_boot, rng)
    return Estimate(min(len(xa), len(xb)), value, *interval(dist, level))


def welch_p(xa: np.ndarray, xb: np.ndarray) -> float:
    if min(len(xa), len(xb)) < 2:
        return np.nan
    if np.var(xa) == 0 and np.var(xb) == 0:
        # t is undefined for two constant samples; they differ for sure or not at all.
        return 1.0 if np.mean(xa) == np.mean(xb) else 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(sps.ttest_ind(xa, xb, equal_var=False).pvalue)


def mwu_p(xa: np.ndarray, xb: np.ndarray) -> float:
    if min(len(xa), len(xb)) < 1:
        return np.nan
    return float(sps.mannwhitneyu(xa, xb, alternative="two-sided").pvalue)


def compare(a: object, b: object, seed: int = SEED) -> Comparison:
    xa, xb = clean(a), clean(b)
    return Comparison(
        a=median_ci(xa, seed=seed),
        b=median_ci(xb, seed=seed),
        diff=median_diff_ci(xa, xb, seed=seed),
        welch_p=welch_p(xa, xb),
        mwu_p=mwu_p(xa, xb),
    )
