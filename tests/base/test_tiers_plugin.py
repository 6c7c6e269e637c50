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
