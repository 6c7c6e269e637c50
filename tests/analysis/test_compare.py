"""`quicbed compare` and the JUnit XML, on runs of the synthetic executor (pure logic: the real
path's version of these is tests/experiments/test_compare_path.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import xmlschema
from scipy.stats import norm

from quicbed.analysis.compare import (
    INCONCLUSIVE,
    NO_CHANGE,
    NotComparable,
    compare_runs,
    holm,
    main_compare,
    mde_pct,
    min_mwu_p,
    parse_thresholds,
)
from quicbed.errors import InputError
from quicbed.experiments.check import check
from quicbed.experiments.runner import run_experiment
from quicbed.experiments.schema import parse_experiment
from quicbed.experiments.synthetic import SyntheticExecutor

SCHEMA = xmlschema.XMLSchema(Path(__file__).parents[1] / "data" / "junit.xsd")
EXPERIMENT = """
name: cmp
profiles: [india]
servers: [nginx]
clients: [{tool: tls_perf, tls: ["1.3"]}, {tool: quic_perf, backend: ngtcp2}]
workload: {kind: web, objects: [index.html]}
repetitions: REPS
expect:
  - "quic.connection_time.median < tls1.3.connection_time.median"
  - "quic.connection_time.median < 0.5 * rtt"
"""


class Slowed(SyntheticExecutor):
    """The server answers 20 % later: TTFB and download time grow, the handshake does not."""

    def run_trial(self, trial):
        row = super().run_trial(trial)
        extra = 0.2 * (row["ttfb_ms"] - row["connection_time_ms"])
        row.update(ttfb_ms=row["ttfb_ms"] + extra, download_time_ms=row["download_time_ms"] + extra)
        return row


def _run(tmp: Path, name: str, executor: SyntheticExecutor, reps: int = 20, text: str = EXPERIMENT) -> Path:
    exp = parse_experiment(text.replace("REPS", str(reps)))
    run_dir = tmp / name
    run_experiment(exp, executor, run_dir, progress=False)
    return run_dir


def test_same_setup_twice_is_no_change_and_exit_0(tmp_path, capsys):
    base = _run(tmp_path, "base", SyntheticExecutor(seed=1))
    new = _run(tmp_path, "new", SyntheticExecutor(seed=2))
    result = compare_runs(str(base), str(new))
    assert {c.metric for c in result.cells} == {"connection_time", "ttfb", "download_time", "throughput"}
    assert len(result.cells) == 2 * 4 and not result.regressed
    assert {c.verdict for c in result.cells} == {NO_CHANGE}
    assert all(0 < c.mde_pct < 5 for c in result.cells)  # 20 reps at ~1 % noise see 5 %
    assert main_compare(str(base), str(new), [], json_path=str(tmp_path / "c.json")) == 0
    out = capsys.readouterr().out
    assert "### quicbed compare" in out and "| no change | india | nginx |" in out
    assert json.loads((tmp_path / "c.json").read_text())["regressed"] == 0


def test_a_slower_server_is_a_regression_exit_1_with_junit(tmp_path, capsys):
    base = _run(tmp_path, "base", SyntheticExecutor(seed=1))
    new = _run(tmp_path, "new", Slowed(seed=2))
    junit = tmp_path / "compare.xml"
    assert main_compare(str(base), str(new), ["ttfb=5%"], junit_path=str(junit)) == 1
    out = capsys.readouterr().out
    regressed = {
        (line.split("|")[4].strip(), line.split("|")[6].strip())
        for line in out.splitlines()
        if "❌ regressed" in line
    }
    # TTFB grows ~10 % (20 % of its last RTT); the handshake does not move.
    assert ("tls1.3-h2", "ttfb") in regressed and ("quic-h3-ngtcp2", "ttfb") in regressed
    assert not {m for _, m in regressed} & {"connection_time"}
    SCHEMA.validate(str(junit))
    tree = SCHEMA.to_dict(str(junit))
    suite = tree["testsuite"][0]
    assert int(suite["@failures"]) == len(regressed) and int(suite["@tests"]) == 8
    failure = next(c for c in suite["testcase"] if "failure" in c)
    assert "regressed: median" in failure["failure"]["@message"]
    # A threshold above the change: the same runs are not a regression.
    assert main_compare(str(base), str(new), ["ttfb=50%", "download_time=50%"]) == 0


def test_too_few_repetitions_are_inconclusive_not_no_change(tmp_path):
    base = _run(tmp_path, "base", SyntheticExecutor(seed=1), reps=3)
    new = _run(tmp_path, "new", Slowed(seed=2), reps=3)
    result = compare_runs(str(base), str(new))
    # 3 against 3 cannot be significant at 0.01 / 8: nothing is called a regression or a
    # "no change"; the MDE says why.
    assert {c.verdict for c in result.cells} == {INCONCLUSIVE}
    assert all(math.isinf(c.mde_pct) for c in result.cells)


def test_runs_that_are_not_comparable_are_refused(tmp_path, capsys):
    base = _run(tmp_path, "base", SyntheticExecutor(seed=1))
    other_reps = _run(tmp_path, "reps", SyntheticExecutor(seed=2), reps=10)
    with pytest.raises(NotComparable, match="different experiments .*repetitions differ"):
        compare_runs(str(base), str(other_reps))
    other_path = _run(
        tmp_path,
        "rtt",
        SyntheticExecutor(seed=2),
        text=EXPERIMENT.replace(
            "profiles: [india]", "profiles: [{name: india, rtt_ms: 100, " "rate_mbit: 20}]"
        ),
    )
    assert main_compare(str(base), str(other_path), []) == 2
    err = capsys.readouterr().err
    assert "not comparable" in err and "condition india: the profiles differ" in err


class OtherLink(SyntheticExecutor):
    backend = "delayline"


def test_runs_on_another_link_backend_are_not_comparable(tmp_path):
    """The backend is read where the runner records it, one level below the calibration's
    summary (read one level too high, it was None on both sides and never differed)."""
    base = _run(tmp_path, "base", SyntheticExecutor(seed=1))
    other = _run(tmp_path, "other", OtherLink(seed=1))
    with pytest.raises(NotComparable, match="condition india: link backend synthetic against delayline"):
        compare_runs(str(base), str(other))


def test_bad_thresholds_are_one_line_errors():
    assert parse_thresholds(["connection_time=5%", "ttfb=2.5"]) == {"connection_time": 5.0, "ttfb": 2.5}
    for bad in ("latency=5%", "ttfb", "ttfb=fast", "ttfb=-1%"):
        with pytest.raises(InputError, match="--max-regress"):
            parse_thresholds([bad])


def test_statistics_helpers():
    assert holm([0.01, 0.04, 0.03, math.nan]) == pytest.approx([0.03, 0.06, 0.06, math.nan], nan_ok=True)
    assert min_mwu_p(3, 3) == pytest.approx(0.1) and min_mwu_p(10, 10) < 2e-5
    # 20 a side spread like a normal of σ = 5 % of the median; α 0.01, 80 % power:
    # (2.576 + 0.842) · 5 · √(2/20) / √0.955 = 5.5 % (normal theory, Mann–Whitney's efficiency)
    a = 100 + 5 * norm.ppf((np.arange(20) + 0.5) / 20)
    assert 5.0 < mde_pct(a, a.copy(), 0.01) < 6.0
    assert mde_pct(a, a.copy(), 0.01) < mde_pct(a[::2], a[1::2], 0.01)  # fewer: larger


def test_check_writes_junit_per_expectation_and_condition(tmp_path):
    run_dir = _run(tmp_path, "run", SyntheticExecutor(seed=1), reps=5)
    exp = parse_experiment(EXPERIMENT.replace("REPS", "5"))
    junit = tmp_path / "check.xml"
    assert check(exp, run_dir, junit=junit) == 1  # the second line cannot hold at 80 ms
    SCHEMA.validate(str(junit))
    cases = SCHEMA.to_dict(str(junit))["testsuite"][0]["testcase"]
    assert [("failure" in c) for c in cases] == [False, True]
    assert "quic.connection_time.median < 0.5 * rtt" in cases[1]["failure"]["@message"]
