"""The skip gate (tests/skips_plugin.py): a skip not on the reviewed list fails the session, an
allowed one is counted; `unit` entries hold only in a session without path/docker tests. Each
case runs pytest in a subprocess on a small suite written here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import skips_plugin

TESTS = Path(__file__).resolve().parents[1]

LIST = """
- reason: "cannot run here: "
  tier: any
  why: the link backend cannot boot on this host
- reason: "as non-root: "
  tier: unit
  why: needs root for a mount
- reason: "xfail: known bug"
  tier: any
  why: an expected failure, reviewed
"""

SUITE = """
import pytest

def test_passes():
    assert True

def test_link_backend():
    pytest.skip("cannot run here: no sch_netem in this kernel")

@pytest.mark.skip(reason="cannot run here: no KVM")
def test_marked():
    pass

def test_mount():
    pytest.skip("as non-root: mounting a tmpfs needs root")

@pytest.mark.xfail(reason="known bug", strict=True)
def test_xfail():
    assert False
"""

UNLISTED = """
import pytest

def test_image():
    pytest.skip("quicbed/caddy:dev not built")
"""

PATH_TEST = """
import pytest

@pytest.mark.path
def test_on_the_path():
    assert True
"""


def run_suite(
    tmp_path: Path, files: dict[str, str], *args: str, allowed: str = LIST
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  path: p\n  docker: d\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["skips_plugin"]\n')
    (tmp_path / "allowed.yaml").write_text(allowed)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--allowed-skips",
            str(tmp_path / "allowed.yaml"),
            *args,
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin"},
    )


def test_allowed_skips_pass_and_are_counted_per_entry(tmp_path: Path) -> None:
    res = run_suite(tmp_path, {"test_a.py": SUITE})
    assert res.returncode == 0, res.stdout
    summary = res.stdout.split("skips allowed by allowed.yaml", 1)[1]
    assert "   2  cannot run here: " in summary
    assert "   1  as non-root: " in summary
    assert "   1  xfail: known bug" in summary
    assert "not on allowed.yaml" not in res.stdout
    assert "3 skipped" in res.stdout and "1 xfailed" in res.stdout


def test_a_skip_not_on_the_list_fails_the_session_and_is_named(tmp_path: Path) -> None:
    res = run_suite(tmp_path, {"test_a.py": SUITE, "test_b.py": UNLISTED})
    assert res.returncode == 1, res.stdout
    refused = res.stdout.split("skips not on allowed.yaml", 1)[1]
    assert "test_b.py::test_image: quicbed/caddy:dev not built" in refused
    assert "test_link_backend" not in refused and "1 skip(s) refused" in refused


def test_an_expected_failure_not_on_the_list_fails_the_session(tmp_path: Path) -> None:
    xfail = "import pytest\n\n@pytest.mark.xfail(reason='flaky')\ndef test_x():\n    assert False\n"
    res = run_suite(tmp_path, {"test_x.py": xfail})
    assert res.returncode == 1, res.stdout
    assert "test_x.py::test_x: xfail: flaky" in res.stdout.split("skips not on allowed.yaml", 1)[1]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_unit_entry_does_not_hold_in_the_full_suite(tmp_path: Path, workers: list[str]) -> None:
    """Under pytest-xdist too: the controller collects nothing and decides from the reports."""
    full = run_suite(tmp_path, {"test_a.py": SUITE, "test_p.py": PATH_TEST}, *workers)
    assert full.returncode == 1, full.stdout
    refused = full.stdout.split("skips not on allowed.yaml", 1)[1]
    assert "test_a.py::test_mount: as non-root: mounting a tmpfs needs root" in refused
    assert "cannot run here" not in refused  # tier any: still allowed
    assert "full suite" in refused
    unit = run_suite(tmp_path, {}, "-m", "not path and not docker", *workers)
    assert unit.returncode == 0, unit.stdout


def test_a_failing_session_stays_failed(tmp_path: Path) -> None:
    res = run_suite(tmp_path, {"test_f.py": "def test_f():\n    assert False\n"})
    assert res.returncode == 1 and "1 failed" in res.stdout


@pytest.mark.parametrize(
    "entry",
    [
        '- {reason: "x", tier: any}',  # no why
        '- {reason: "x", tier: ci, why: w}',  # unknown tier
        '- {reason: "(", tier: any, why: w}',  # not a regular expression
        '- {reason: "x", tier: any, why: " "}',  # an empty why
    ],
)
def test_a_malformed_list_is_a_usage_error(tmp_path: Path, entry: str) -> None:
    res = run_suite(tmp_path, {"test_a.py": SUITE}, allowed=entry)
    assert res.returncode == pytest.ExitCode.USAGE_ERROR, res.stdout + res.stderr
    assert "allowed.yaml: entry 1" in res.stderr


def test_the_repository_list_allows_the_link_backend_skip_everywhere() -> None:
    entries = skips_plugin.load_allowed(skips_plugin.DEFAULT_LIST)
    gate = skips_plugin.SkipGate(entries, skips_plugin.DEFAULT_LIST)
    gate.unit_session = False
    entry = gate.match("cannot run here: the UML kernel does not boot (no /dev/shm)")
    assert entry is not None and entry.tier == "any"
    for refused in (
        "quicbed/caddy:dev not built (images/build.sh caddy)",
        "needs root",
        "needs a running Docker engine (make docker)",
        "the cluster extra is not installed (pip install -e .[cluster])",
        "as non-root: mounting a tmpfs needs root",
    ):
        assert gate.match(refused) is None, refused
    gate.unit_session = True
    assert gate.match("the cluster extra is not installed (pip install -e .[cluster])")
    assert gate.match("/var/cache/quicbed/bin/actionlint-v1.7.12 not built (make actionlint)")
    assert gate.match("needs root") is None
