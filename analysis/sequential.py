"""Verdicts that may stop early: a sequential sign test by betting, valid under optional stopping.

A comparison of protocols A and B runs in rounds, one trial of each per round (interleaved),
and asks after every round whether the evidence decides. A fixed-n test (Mann-Whitney, a
t-test) applied after every round is not valid there: each look is another chance of a false
positive, and the error rate grows with the looks. This module's test is a test martingale:

- Each round gives a sign: does A's trial exceed B's (ties, which say nothing of the direction,
  are dropped)? Under "A does not exceed B more often than not" (P(A > B) <= 1/2), a bettor
  who stakes a fraction of their wealth on "A > B" before seeing each sign, at even odds, has
  a wealth whose expectation never grows: a nonnegative supermartingale.
- Ville's inequality then bounds the chance that the wealth EVER reaches 1/alpha by alpha,
  however the rounds are looked at and whenever the run stops (Ville 1939; the betting view of
  confidence sequences: Waudby-Smith and Ramdas, "Estimating means of bounded random
  variables by betting", JRSS B 86(1), 2024; Shafer and Vovk, "Game-Theoretic Foundations
  for Probability and Finance", 2019).
- The stake is Kelly's for the signs seen so far (4 p - 2, p the Krichevsky-Trofimov estimate
  of P(A > B) from earlier rounds only), capped below the whole wealth: strong evidence grows
  the wealth by up to 1.9x a round, and a null keeps betting little.

Two one-sided tests at alpha/2 each decide a direction ("A < B" or "A > B"). A claim of
similarity is an equivalence claim: with a margin m (a ratio, e.g. 1.10), two one-sided tests
at alpha each (TOST's intersection-union) show that A/B's median lies within [1/m, m]: the
signs of log(A/B) - log(m) are mostly negative, and those of log(A/B) + log(m) mostly
positive.

The test is nonparametric (signs of paired rounds) and exact: no normality, no asymptotics.
Its price is a floor on the trials: even when every round agrees, the wealth reaches 1/alpha
only after about 11 rounds at alpha = 0.01 (2^7 = 128 is the bound for any sign test).
Decisions are a pure function of the ordered rounds, so a resumed run that replays its stored
rounds reaches the same decision as one never interrupted. confseq (Howard et al.) implements
such betting confidence sequences too, as a compiled extension; for Bernoulli signs the
martingale is these few lines, kept here without a build dependency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_STAKE = 1.8  # of the 2 that would stake everything on one sign (wealth x (1 +- stake/2))


@dataclass
class SignBettor:
    """The test martingale of H0: P(sign) <= 1/2, betting on sign = True."""

    wealth: float = 1.0
    wins: int = 0
    rounds: int = 0

    def stake(self) -> float:
        """Kelly's stake for the signs seen so far, never against (a one-sided test)."""
        p = (self.wins + 0.5) / (self.rounds + 1.0)  # Krichevsky-Trofimov: no sign seen, 1/2
        return min(MAX_STAKE, max(0.0, 4.0 * p - 2.0))

    def update(self, sign: bool) -> None:
        self.wealth *= 1.0 + self.stake() * ((1.0 if sign else 0.0) - 0.5)
        self.wins += sign
        self.rounds += 1


@dataclass
class Verdict:
    decision: str  # "A < B", "A > B", "similar", "different", or "undecided"
    rounds: int  # pairs seen (ties included)
    evidence: dict[str, float] = field(default_factory=dict)  # each test's wealth

    @property
    def decided(self) -> bool:
        return self.decision != "undecided"


def _signs(pairs: Iterable[tuple[float, float]], shift: float) -> Iterable[bool | None]:
    """Per round: log(a/b) - shift > 0, < 0, or None for a tie (or a row without a value).
    Compared as a against b e^shift, so a zero is a value (a session that never stalled
    stalled less than one that did), and only two zeros tie."""
    scale = math.exp(shift)
    for a, b in pairs:
        if not (a >= 0 and b >= 0 and math.isfinite(a) and math.isfinite(b)):
            yield None
            continue
        d = a - b * scale
        yield None if d == 0 else d > 0


def direction(pairs: list[tuple[float, float]], alpha: float) -> Verdict:
    """Which of A and B is larger, by the median of A/B, at family error alpha (two one-sided
    tests at alpha/2); "undecided" until one test's wealth reaches 2/alpha."""
    above, below = SignBettor(), SignBettor()
    rounds = 0
    for rounds, sign in enumerate(_signs(pairs, 0.0), 1):
        if sign is None:
            continue
        above.update(sign)
        below.update(not sign)
        for bettor, decision in ((above, "A > B"), (below, "A < B")):
            if bettor.wealth >= 2.0 / alpha:
                return Verdict(decision, rounds, {"A > B": above.wealth, "A < B": below.wealth})
    return Verdict("undecided", rounds, {"A > B": above.wealth, "A < B": below.wealth})


def equivalence(pairs: list[tuple[float, float]], margin: float, alpha: float) -> Verdict:
    """Whether the median of A/B lies within [1/margin, margin] (TOST, each test at alpha):
    "similar" once both are rejected; "different" once the direction test (at alpha) shows
    the median outside the margin on one side."""
    if margin <= 1.0:
        raise ValueError(f"an equivalence margin is a ratio above 1, not {margin}")
    shift = math.log(margin)
    not_above, not_below = SignBettor(), SignBettor()  # H0: median >= margin; <= 1/margin
    beyond_up, beyond_down = SignBettor(), SignBettor()  # H0: median <= margin; >= 1/margin
    rounds = 0
    evidence: dict[str, float] = {}
    for rounds, (up, down) in enumerate(zip(_signs(pairs, shift), _signs(pairs, -shift), strict=True), 1):
        if up is not None:
            not_above.update(not up)
            beyond_up.update(up)
        if down is not None:
            not_below.update(down)
            beyond_down.update(not down)
        beyond = max(beyond_up.wealth, beyond_down.wealth)
        evidence = {
            "below margin": not_above.wealth,
            "above 1/margin": not_below.wealth,
            "beyond margin": beyond,
        }
        if min(not_above.wealth, not_below.wealth) >= 1.0 / alpha:
            return Verdict("similar", rounds, evidence)
        if beyond >= 2.0 / alpha:
            return Verdict("different", rounds, evidence)
    return Verdict("undecided", rounds, evidence)


def rounds_needed(p: float, alpha: float, cap: int = 10_000) -> int | None:
    """Rounds a direction test needs, on average, when a round favours one side with
    probability p (ties aside): the Kelly growth rate's estimate, for "not decided at the cap:
    about N rounds would decide at this effect". None when p is 1/2 (no effect to find)."""
    q = abs(p - 0.5) + 0.5
    stake = min(MAX_STAKE, 4.0 * q - 2.0)
    growth = q * math.log(1 + stake / 2) + (1 - q) * math.log(1 - stake / 2)
    if growth <= 0:
        return None
    return min(cap, math.ceil(math.log(2.0 / alpha) / growth))
