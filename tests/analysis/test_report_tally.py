"""What the report hands back and names (issue 64): the tally of "Against the paper" that a
quick report opens with and `make reproduce` ends with, and each finding's own test in the
method text."""

from __future__ import annotations

from pathlib import Path

from analysis_synthetic import Model, write_run

from quicbed.analysis.claims import DIRECTIONS, FAILS, HOLDS, NOT_DECIDED, Verdict, gain_shrinks
from quicbed.analysis.report import NEEDS_FULL, Tally, build_report


def test_the_tally_counts_each_status_and_says_them_in_one_sentence() -> None:
    statuses = [HOLDS] * 10 + [FAILS] * 2 + [NOT_DECIDED] * 2
    counted = Tally.of([Verdict(s, ()) for s in statuses])
    assert counted == Tally(findings=14, holds=10, fails=2, not_decided=2) and counted.decided == 12
    assert counted.sentence() == "12 of 14 findings decided (10 hold, 2 do not hold), 2 not decided"
    quick = Tally.of([Verdict(s, ()) for s in [HOLDS, NEEDS_FULL, "not enough data"]])
    assert quick.sentence() == (
        "1 of 3 findings decided (1 hold, 0 do not hold), 1 need FULL=1 (the quick slice lacks "
        "their rows), 1 without the data to judge"
    )
    assert Tally().sentence() == "no finding of the paper judged (no rows they rest on)"


def test_every_finding_names_its_own_test_and_only_one_uses_welch(tmp_path: Path) -> None:
    """The method lists each finding with its test; Welch's t and Mann–Whitney are named for
    the finding that uses them (the shrinking gain) and for no other."""
    assert all(d.test for d in DIRECTIONS)
    written = build_report([str(write_run(tmp_path, "full", Model(repetitions=3)))])
    section = written.html.with_suffix(".md").read_text().split("## Against the paper", 1)[1]
    section = section.split("\n## ", 1)[0]
    method = section[section.index("How: ") :]
    bullets = [line for line in method.splitlines() if line.startswith("- ")]
    assert bullets == [f"- {d.claim}: {d.test}" for d in DIRECTIONS]
    welch = [line for line in method.splitlines() if "Welch" in line or "Mann–Whitney" in line]
    (gain,) = [d for d in DIRECTIONS if d.check is gain_shrinks]
    assert welch == [f"- {gain.claim}: {gain.test}"]
    assert written.tally.findings == len(DIRECTIONS)
