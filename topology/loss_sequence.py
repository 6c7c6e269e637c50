"""A link's loss rate judged while its probe runs, at a confidence that holds however often
the probe's counts are looked at (issue 65).

The probe reports its counts every few tens of milliseconds, and the calibration stops as soon
as they decide. A fixed-n binomial interval recomputed at every look would refuse a correct link
far more often than it says (optional stopping), so the interval here is a confidence sequence:
the beta-binomial mixture of likelihood ratios (Robbins 1970; Howard et al., "Time-uniform,
nonparametric, nonasymptotic confidence sequences", 2021). With probability at least
LOSS_CONFIDENCE it covers the link's true loss rate at every look at once.

The decision is against a band, not a point: the link is right when its loss lies within
`loss_band` of what the profile asks.
- inside: the whole sequence lies within the band: decided, passed;
- outside: the sequence misses the band altogether: decided, refused;
- neither by the probe's cap: passed, "not decided within N datagrams" (no evidence against
  the link). A right link, even at the band's edge, is refused at most 1 - LOSS_CONFIDENCE of
  the time, at whatever look the probe stops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.special import betaln

# The loss checks of a sweep: two a path, eight paths in the paper's video sweep. At 99.9 %
# each, a 16-check sweep refuses a right set of paths 1.6 % of the time.
LOSS_CONFIDENCE = 0.999
# Jeffreys' Beta(1/2, 1/2) as the mixture: no loss rate favoured, and tighter than the uniform
# prior near 0 (4,750 lossless datagrams bound a link under 0.25 %, where Beta(1, 1) needs 6,500).
PRIOR = (0.5, 0.5)
# The band a right link's loss lies in: 20 % of the asked rate, and at least a quarter of a
# point. Why 20 %: TCP's rate under random loss goes as 1/sqrt(p) (Mathis et al.), so a
# loss rate 20 % off moves a loss-bound transfer by about 10 %, and a sweep compares the
# protocols on the same path, so both see the same error. Why a quarter point: a "lossless"
# link is proven lossless to 0.25 % in under 5,000 datagrams (1 s of probe here). A tighter
# band costs probe time: the 20,000 datagrams every path used to send decided 1 % to about
# ±0.23 points, with a fixed-n interval that a probe stopping early may not use.
LOSS_BAND_SHARE = 0.20
LOSS_BAND_MIN_PCT = 0.25


def loss_band(expected_pct: float) -> tuple[float, float]:
    """The loss rates (%) a right link may have when `expected_pct` is asked."""
    spread = max(LOSS_BAND_MIN_PCT, LOSS_BAND_SHARE * expected_pct)
    return max(0.0, expected_pct - spread), min(100.0, expected_pct + spread)


def _log_wealth(lost: int, sent: int, p: float) -> float:
    """log of the mixture martingale at loss rate p: its Beta-binomial evidence against p."""
    a, b = PRIOR
    if p <= 0.0:
        return math.inf if lost else betaln(a, b + sent) - betaln(a, b)
    if p >= 1.0:
        return math.inf if lost < sent else betaln(a + sent, b) - betaln(a, b)
    return (
        betaln(a + lost, b + sent - lost) - betaln(a, b) - lost * math.log(p) - (sent - lost) * math.log1p(-p)
    )


def confidence_sequence(lost: int, sent: int, confidence: float = LOSS_CONFIDENCE) -> tuple[float, float]:
    """The loss rates (as fractions) not yet refuted after `lost` of `sent`, valid at every
    look at once. The evidence is convex in p with its least at lost/sent, so the set is an
    interval; its ends are found by bisection."""
    if sent <= 0:
        return 0.0, 1.0
    threshold = math.log(1 / (1 - confidence))
    centre = lost / sent

    def edge(inside: float, outside: float) -> float:
        for _ in range(50):
            middle = (inside + outside) / 2
            if _log_wealth(lost, sent, middle) < threshold:
                inside = middle
            else:
                outside = middle
        return inside

    low = 0.0 if _log_wealth(lost, sent, 0.0) < threshold else edge(centre, 0.0)
    high = 1.0 if _log_wealth(lost, sent, 1.0) < threshold else edge(centre, 1.0)
    return low, high


@dataclass(frozen=True)
class LossVerdict:
    lost: int
    sent: int
    decided: bool
    passed: bool
    band: tuple[float, float]  # in %

    def describe(self) -> str:
        low, high = (100 * x for x in confidence_sequence(self.lost, self.sent))
        state = (
            "inside" if self.decided and self.passed else "outside" if self.decided else "not decided against"
        )
        return (
            f"{LOSS_CONFIDENCE:.1%} CS [{low:.3f}, {high:.3f}] {state} "
            f"the band [{self.band[0]:.2f}, {self.band[1]:.2f}]"
        )


def judge_loss(lost: int, sent: int, expected_pct: float) -> LossVerdict:
    """Where the counts so far put the link against its band (see the module's doc). The
    evidence is convex in p with its least at lost/sent, so the sequence lies inside the band
    when the band holds lost/sent and both its edges are refuted, and misses the band when
    the edge nearest lost/sent is refuted from outside: two evaluations a look, no search."""
    band = loss_band(expected_pct)
    low, high = band[0] / 100, band[1] / 100
    threshold = math.log(1 / (1 - LOSS_CONFIDENCE))
    centre = lost / sent if sent else math.nan

    def refuted(p: float) -> bool:
        return sent > 0 and _log_wealth(lost, sent, p) >= threshold

    inside = low <= centre <= high and (low <= 0.0 or refuted(low)) and (high >= 1.0 or refuted(high))
    outside = (centre > high and refuted(high)) or (centre < low and refuted(low))
    return LossVerdict(lost, sent, inside or outside, not outside, band)
