"""A skip is an error unless the reviewed list allows it (tests/allowed_skips.yaml).

Every skipped test's reason is collected. At the end a skip whose reason matches no entry of
the list fails the session (exit status 1, the skips listed); the terminal summary counts the
skips it allowed, per entry. An entry of tier `unit` allows its skip only in a session that
runs no `path` and no `docker` test (the unit tier); the full suite, which CI runs, must not
skip it. An expected failure (xfail, or a non-strict xpass) is gated the same way, its reason
read as "xfail: <reason>". Judged on the controller, from the reports, so the same under
pytest-xdist as without it. Loaded by tests/conftest.py (`pytest_plugins`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

DEFAULT_LIST = Path(__file__).resolve().parent / "allowed_skips.yaml"
FULL_SUITE_MARKERS = ("path", "docker")
TIERS = ("any", "unit")


@dataclass(frozen=True)
class Allowed:
    reason: re.Pattern[str]
    tier: str
    why: str


def load_allowed(path: Path) -> list[Allowed]:
    """The list, every entry checked: a reason that compiles, a known tier, a justification."""
    try:
        entries = yaml.safe_load(path.read_text()) or []
    except yaml.YAMLError as exc:
        raise pytest.UsageError(f"{path}: {exc}") from None
    if not isinstance(entries, list):
        raise pytest.UsageError(f"{path}: a list of entries expected")
    allowed = []
    for i, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or set(entry) != {"reason", "tier", "why"}:
            raise pytest.UsageError(f"{path}: entry {i} needs exactly reason, tier and why")
        if entry["tier"] not in TIERS:
            raise pytest.UsageError(f"{path}: entry {i}: tier must be one of {', '.join(TIERS)}")
        if not str(entry["why"]).strip():
            raise pytest.UsageError(f"{path}: entry {i}: an empty why")
        try:
            pattern = re.compile(str(entry["reason"]))
        except re.error as e:
            raise pytest.UsageError(f"{path}: entry {i}: {e}") from None
        allowed.append(Allowed(pattern, entry["tier"], str(entry["why"]).strip()))
    return allowed


def skip_reason(report: pytest.TestReport) -> str:
    """The reason as the test gave it (what `-rs` prints)."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ") if reason != "Skipped" else ""


class SkipGate:
    """Judged on the controller at the end of the session, from the reports alone: under
    pytest-xdist the controller collects no items, and a worker sees only its own share."""

    def __init__(self, allowed: list[Allowed], source: Path):
        self.allowed, self.source = allowed, source
        self.unit_session = True
        self.skips: list[tuple[str, str]] = []  # (test id, reason), skipped or xfailed
        self.allowed_hits: Counter[str] = Counter()
        self.refused: list[tuple[str, str]] = []  # (test id, reason)

    def match(self, reason: str) -> Allowed | None:
        for entry in self.allowed:
            if entry.tier == "unit" and not self.unit_session:
                continue
            if entry.reason.match(reason):
                return entry
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # a test of the full suite run (or skipped) makes this no unit session
        if report.when == "setup" and any(m in report.keywords for m in FULL_SUITE_MARKERS):
            self.unit_session = False
        if hasattr(report, "wasxfail"):  # an expected failure is gated like a skip
            if report.skipped or report.passed:
                self.skips.append((report.nodeid, f"xfail: {report.wasxfail}".rstrip(": ")))
        elif report.skipped:
            self.skips.append((report.nodeid, skip_reason(report)))

    def judge(self) -> None:
        self.allowed_hits.clear()
        self.refused.clear()
        for nodeid, reason in self.skips:
            entry = self.match(reason)
            if entry is None:
                self.refused.append((nodeid, reason))
            else:
                self.allowed_hits[entry.reason.pattern] += 1

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # the controller judges
            return
        self.judge()
        if self.refused and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        tr = terminalreporter
        if self.allowed_hits:
            tr.section("skips allowed by " + self.source.name)
            for pattern, count in self.allowed_hits.most_common():
                tr.line(f"{count:4d}  {pattern}")
        if self.refused:
            tr.section(f"skips not on {self.source.name} (they fail the session)", red=True)
            for nodeid, reason in self.refused:
                tr.line(f"{nodeid}: {reason}", red=True)
            scope = "unit session" if self.unit_session else "full suite (path/docker tests selected)"
            tr.line(
                f"{len(self.refused)} skip(s) refused in this {scope}; fix the cause, or add "
                f"a reviewed entry to {self.source}",
                red=True,
            )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--allowed-skips",
        default=str(DEFAULT_LIST),
        metavar="FILE",
        help="the reviewed list of allowed skip reasons (default: %(default)s)",
    )


def pytest_configure(config: pytest.Config) -> None:
    source = Path(config.getoption("--allowed-skips"))
    config.pluginmanager.register(SkipGate(load_allowed(source), source), "quicbed-skip-gate")
