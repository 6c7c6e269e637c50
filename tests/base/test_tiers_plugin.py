"""The tiers and lanes (tests/tiers_plugin.py): where the table places a test, what it refuses,
and the lock: under pytest-xdist a timing test runs alone while behaviour tests share the
cores. The lock cases run pytest in a subprocess on a small suite written here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tiers_plugin
from tiers_plugin import Placement, place

TESTS = Path(__file__).resolve().parents[1]

TABLE = [
    Placement("tests/a.py", "behaviour", "test"),
    Placement("tests/a.py::test_x", "timing", "test"),
    Placement("tests/a.py::test_x[slow]", None, "physics"),
]


def test_the_longest_match_that_sets_a_field_wins() -> None:
    assert place("tests/a.py::test_y", TABLE) == ("behaviour", "test")
    assert place("tests/a.py::test_x[fast]", TABLE) == ("timing", "test")
    assert place("tests/a.py::test_x[slow]", TABLE) == ("timing", "physics")
    assert place("tests/a.pyc::test_y", TABLE) == (None, "test")  # a prefix of a name is no match


def test_the_repository_table_loads() -> None:
    table = tiers_plugin.load_table()
    assert {p.tier for p in table} == {"test", "physics"} and all(p.match.startswith("tests/") for p in table)


LOGGED = """
import os, time

def logged(name):
    start = time.time()
    time.sleep(0.6)
    with open(os.path.join(os.environ["LOGDIR"], name), "w") as out:
        out.write(f"{start} {time.time()}")
"""


def _suite(tmp_path: Path, table: str, files: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  path: p\n  docker: d\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tiers_plugin"]\n')
    (tmp_path / "logged.py").write_text(LOGGED)
    (tmp_path / "tiers.yaml").write_text(table)
    (tmp_path / "log").mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    argv += ["--tiers", str(tmp_path / "tiers.yaml"), *args, str(tmp_path)]
    env = {"PYTHONPATH": f"{TESTS}:{tmp_path}", "PATH": "/usr/bin:/bin", "LOGDIR": str(tmp_path / "log")}
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)


def _test_file(*names: str, path: bool = False) -> str:
    mark = "@pytest.mark.path\n" if path else ""
    body = "".join(f"\n{mark}def test_{n}():\n    logged('{n}')\n" for n in names)
    return "import pytest\nfrom logged import logged\n" + body


def test_a_timing_test_runs_alone_and_behaviour_tests_side_by_side(tmp_path: Path) -> None:
    files = {
        "test_b.py": _test_file("b1", "b2", "b3"),
        "test_c.py": _test_file("c1", "c2", "c3"),
        "test_t.py": _test_file("t1", "t2", path=True),
    }
    table = "- {match: test_t.py, kind: timing}\n"
    res = _suite(tmp_path, table, files, "-n", "2", "--dist", "load")
    assert res.returncode == 0, res.stdout + res.stderr
    spans = {p.name: tuple(map(float, p.read_text().split())) for p in (tmp_path / "log").iterdir()}
    assert len(spans) == 8, spans

    def overlap(a: str, b: str) -> bool:
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    for timed in ("t1", "t2"):
        assert not any(overlap(timed, other) for other in spans if other != timed), spans
    behaviour = [n for n in spans if not n.startswith("t")]
    assert any(overlap(a, b) for a in behaviour for b in behaviour if a < b), spans


def test_a_path_test_the_table_does_not_place_fails_the_collection(tmp_path: Path) -> None:
    res = _suite(
        tmp_path,
        "- {match: test_t.py::test_t1, kind: timing}\n",
        {"test_t.py": _test_file("t1", "t2", path=True)},
    )
    assert res.returncode == pytest.ExitCode.USAGE_ERROR, res.stdout + res.stderr
    assert "1 path/docker test(s) with no kind" in res.stderr and "test_t.py::test_t2" in res.stderr


def test_a_malformed_table_is_a_usage_error(tmp_path: Path) -> None:
    res = _suite(tmp_path, "- {match: test_t.py, kind: fast}\n", {"test_t.py": _test_file("t1")})
    assert res.returncode == pytest.ExitCode.USAGE_ERROR and "kind one of" in res.stderr, res.stderr


# --- a host unfit to judge timing ----------------------------------------------------------


def test_more_than_a_tenth_of_the_timing_checks_not_judged_is_an_unfit_host() -> None:
    assert not tiers_plugin.unfit(10, 1) and tiers_plugin.unfit(10, 2) and tiers_plugin.unfit(2, 1)
    assert not tiers_plugin.unfit(0, 0) and not tiers_plugin.unfit(40, 4) and tiers_plugin.unfit(40, 5)
    assert tiers_plugin.unfit_line(2, 1, 0.123, 3.04) == (
        "host unfit to judge timing: 1 of 2 timing checks not judged; steal 12.3 %, probe 3.0×"
    )
    assert tiers_plugin.unfit_line(2, 1, None, None).endswith("; steal n/a, probe n/a")


# Timing checks on a stand-in meter: the `spell*` ones see a slow spell in both attempts.
STAND_IN = """
import pytest
from contention import remeasured
from quicbed.hostload import Load

SPELL = Load(1.0, 0.08, 0.0, slow_ratio=3.0)


class Spell:
    def __init__(self, own):
        self.load = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.load = SPELL


def check():
    remeasured("a check", lambda: 1, lambda _: None, meter=Spell, wait=lambda say: (False, SPELL))
"""


def _checks(spells: int, calm: int) -> str:
    body = "".join(f"\n@pytest.mark.path\ndef test_spell{i}():\n    check()\n" for i in range(spells))
    body += "".join(f"\n@pytest.mark.path\ndef test_calm{i}():\n    pass\n" for i in range(calm))
    return STAND_IN + body


def test_a_session_with_too_many_checks_not_judged_fails_with_one_line(tmp_path: Path) -> None:
    files = {"test_t.py": _checks(spells=1, calm=1), "test_b.py": _test_file("b1")}
    res = _suite(tmp_path, "- {match: test_t.py, kind: timing}\n", files, "-n", "2")
    out = res.stdout
    assert res.returncode == pytest.ExitCode.TESTS_FAILED, out + res.stderr
    assert "2 passed, 1 skipped in" in out, out  # b1 is no timing check: 1 of 2, not 1 of 3
    assert "timing checks not judged (host contended in both attempts): 1 of 2" in out, out
    listed = [x for x in out.splitlines() if "test_t.py::test_spell0: a check: not judged (waited" in x]
    assert len(listed) == 1 and "1: contended: " in listed[0] and "2: contended: " in listed[0], out
    unfit = [x for x in out.splitlines() if x.startswith("host unfit to judge timing")]
    assert unfit == [
        "host unfit to judge timing: 1 of 2 timing checks not judged; steal 8.0 %, probe 3.0×"
    ], out
    assert "of 2 measured attempts: steal at most 8.0 %, slow-spell probe at worst 3.0× its best" in out, out


def test_a_session_with_a_tenth_not_judged_passes_and_lists_them(tmp_path: Path) -> None:
    files = {"test_t.py": _checks(spells=1, calm=9)}
    res = _suite(tmp_path, "- {match: test_t.py, kind: timing}\n", files)
    out = res.stdout
    assert res.returncode == pytest.ExitCode.OK, out + res.stderr
    assert "timing checks not judged (host contended in both attempts): 1 of 10" in out, out
    assert "test_t.py::test_spell0: a check: not judged" in out and "host unfit" not in out, out
    assert "re-measurements on a contended host: 1" in out, out


def test_the_session_says_what_its_calibrations_cost() -> None:
    """Issue 65's figure in each tier's summary: fresh calibrations and recorded ones."""
    entries = [
        {"profile": "india", "backend": "delayline", "seconds": 8.2, "recorded": False},
        {"profile": "india", "backend": "delayline", "seconds": 1.9, "recorded": True},
        {"profile": "dsl", "backend": "delayline", "seconds": 7.6, "recorded": False},
        {"profile": "torn"},
    ]
    assert tiers_plugin.calibration_line(entries) == (
        "calibrations: 3 took 18 s in all; 2 fresh took 16 s (longest 8 s)"
    )
    assert tiers_plugin.calibration_line([]).startswith("calibrations: 0 took 0 s")
