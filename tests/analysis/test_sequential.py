"""analysis/sequential.py on simulated rounds: the error rate under no difference stays at or
below alpha however often it is looked at (1,000 runs, a look after every round), where a
fixed-n test looked at as often does not; the power for a 1-RTT and a 5 % difference; the
equivalence test's margin; and a stopping decision that only depends on the stored rounds."""

from __future__ import annotations

import math
import random

import pytest
from scipy.stats import mannwhitneyu

from quicbed.analysis.sequential import direction, equivalence, rounds_needed

RUNS = 1000
CAP = 60  # rounds: the largest `max` a repetitions: auto run would give


def _noisy(rng: random.Random, median: float, cv: float) -> float:
    return median * math.exp(rng.gauss(0.0, cv))


def _pairs(rng: random.Random, a: float, b: float, cv: float, n: int = CAP) -> list[tuple[float, float]]:
    return [(_noisy(rng, a, cv), _noisy(rng, b, cv)) for _ in range(n)]


@pytest.mark.parametrize("alpha", [0.01, 0.05])
def test_no_difference_is_declared_at_most_alpha_of_the_time_under_optional_stopping(alpha: float) -> None:
    rng = random.Random(1)
    false = sum(direction(_pairs(rng, 100.0, 100.0, 0.2), alpha).decided for _ in range(RUNS))
    print(f"alpha {alpha}: {false} of {RUNS} runs declared a difference, looking after each of {CAP} rounds")
    assert false / RUNS <= alpha


def test_a_fixed_n_test_looked_at_after_every_round_is_not_valid() -> None:
    """Why the sequential test: Mann-Whitney at p < 0.05, asked after each round from the 5th,
    declares a difference where there is none far more often than 5 % of the time."""
    rng = random.Random(2)
    false = 0
    for _ in range(200):
        pairs = _pairs(rng, 100.0, 100.0, 0.2, 40)
        for n in range(5, 41):
            a, b = zip(*pairs[:n], strict=True)
            if mannwhitneyu(a, b).pvalue < 0.05:
                false += 1
                break
    print(f"fixed-n test after every round: {false} of 200 runs declared a difference")
    assert false / 200 > 0.15


def test_one_rtt_is_decided_in_about_eleven_rounds() -> None:
    """QUIC's 1 RTT against TLS 1.3's 2 on india (80 ms), 2 % noise: every run decides
    "A < B", as soon as any sign test at alpha = 0.01 can (2^7 = 128 > 100)."""
    rng = random.Random(3)
    verdicts = [direction(_pairs(rng, 80.0, 160.0, 0.02), 0.01) for _ in range(RUNS)]
    assert {v.decision for v in verdicts} == {"A < B"}
    rounds = sorted(v.rounds for v in verdicts)
    print(f"1 RTT: decided after {rounds[0]}..{rounds[-1]} rounds")
    assert rounds[-1] <= 12


def test_five_percent_throughput_is_decided_within_the_cap_most_of_the_time() -> None:
    """A 5 % throughput difference under 3 % noise per trial: the power within 60 rounds."""
    rng = random.Random(4)
    verdicts = [direction(_pairs(rng, 19.0, 20.0, 0.03), 0.01) for _ in range(RUNS)]
    decided = [v for v in verdicts if v.decided]
    power = len(decided) / RUNS
    median_rounds = sorted(v.rounds for v in decided)[len(decided) // 2]
    print(f"5 %: power {power:.2f} within {CAP} rounds, median {median_rounds} rounds")
    assert power >= 0.9 and all(v.decision == "A < B" for v in decided)
    assert rounds_needed(0.88, 0.01) == pytest.approx(median_rounds, rel=0.6)


def test_similar_within_the_margin_and_different_beyond_it() -> None:
    rng = random.Random(5)
    same = [equivalence(_pairs(rng, 400.0, 400.0, 0.03), 1.10, 0.01) for _ in range(200)]
    assert {v.decision for v in same} == {"similar"}, {v.decision for v in same}
    apart = [equivalence(_pairs(rng, 400.0, 520.0, 0.03), 1.10, 0.01) for _ in range(200)]
    assert {v.decision for v in apart} == {"different"}
    # At the margin's edge (A/B = 1.10 exactly) "similar" is a false claim: at most alpha.
    edge = [equivalence(_pairs(rng, 440.0, 400.0, 0.05), 1.10, 0.05) for _ in range(RUNS)]
    assert sum(v.decision == "similar" for v in edge) / RUNS <= 0.05
    with pytest.raises(ValueError):
        equivalence([], 0.9, 0.01)


def test_the_decision_depends_only_on_the_stored_rounds() -> None:
    """A run killed after round k and resumed replays rounds 1..k from its rows: the test
    stops at the same round, with the same decision, as a run never interrupted."""
    rng = random.Random(6)
    pairs = _pairs(rng, 95.0, 100.0, 0.05)
    whole = direction(pairs, 0.01)
    assert whole.decided
    for k in range(whole.rounds):
        assert not direction(pairs[:k], 0.01).decided  # undecided before its round
    assert direction(pairs[: whole.rounds], 0.01) == whole


def test_rows_without_a_value_and_ties_say_nothing() -> None:
    pairs = [(float("nan"), 1.0), (-1.0, 1.0), (2.0, 2.0), (0.0, 0.0)] * 30
    verdict = direction(pairs, 0.01)
    assert verdict.decision == "undecided" and verdict.evidence == {"A > B": 1.0, "A < B": 1.0}


def test_a_zero_is_a_value() -> None:
    """A session that never stalled (0 ms) stalled less than one that did."""
    assert direction([(0.0, 800.0)] * 20, 0.01).decision == "A < B"
    assert equivalence([(0.0, 800.0)] * 20, 1.2, 0.01).decision == "different"
