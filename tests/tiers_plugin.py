"""Two tiers, two lanes: what each path test judges, and who may run beside it.

`tests/tiers.yaml` says of every `path` and `docker` test what it judges and which tier holds
it (one place, so the tiers can be balanced against their budgets without touching the tests):
- kind `timing`: a time or a rate. It runs alone: no other test of the session runs while it
  does (an exclusive lock), since a neighbour's CPU is part of what it would measure;
- kind `behaviour`: exit codes, files, rows, clean-up, refusal, resume. Under pytest-xdist
  (`-n 2`) two such tests, or one and a unit test, run at once (a shared lock);
- tier `test` (`make test`) or `physics` (`make test-physics`: the distribution physics, the
  other backends, the guests, the long playbacks, compare and the labs' measure steps).
The markers `timing`, `behaviour` and `physics` are set from it; `-m physics` / `-m "not
physics"` pick a tier. A path or docker test the table does not name fails the collection, and
so does an entry that names no test (a renamed test must be placed again, not dropped).

The lock is a readers-writer lock over two files (flock): a test first passes a turnstile,
then takes the session lock shared (behaviour) or exclusive (timing). A timing test waiting at
the lock holds the turnstile, so the next test of the other worker waits behind it rather than
overtaking it forever. Set-up and teardown are inside the lock: a module's bring-up is part of
its first test, its clean-up part of its last.

A host too busy to judge timing fails the session (`TimingLedger`, on the controller). A timing
check measured on a contended host twice is not judged (tests/contention.py: skipped as "not
judged: ..."). At the end the session lists its re-measurements, its checks not judged with
their figures, and the host's steal (of the non-idle CPU time: over the whole session from
/proc/stat, and the worst attempt's) and worst slow-spell probe. Of M timing tests that ran
(set-up passed), N not judged: N over 10 % of M fails the session with one line, "host unfit to
judge timing: N of M timing checks not judged; steal x %, probe y×" (x, y: the worst
attempt's). Under pytest-xdist the workers append to the session's files in the lock
directory; the controller counts from the reports.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from contention import LOADS_ENV, NOT_JUDGED_ENV, REMEASURE_ENV

from quicbed import hostload
from quicbed.topology.calibrate import CALIBRATION_LOG_ENV

TABLE = Path(__file__).resolve().parent / "tiers.yaml"
KINDS = ("timing", "behaviour")
TIERS = ("test", "physics")
LOCK_ENV = "QUICBED_TEST_LOCKS"  # the session's lock directory, shared by its xdist workers
NOT_JUDGED_LIMIT = 0.10  # of the session's timing checks; beyond it the host is unfit to judge
NOT_JUDGED = "not judged: "  # the skip reason's prefix (tests/contention.py)
_LOCKS = pytest.StashKey[str]()


@dataclass(frozen=True)
class Placement:
    match: str  # a node id, or a prefix of one ("tests/x.py", "tests/x.py::test_y")
    kind: str | None
    tier: str


def load_table(path: Path = TABLE) -> list[Placement]:
    try:
        entries = yaml.safe_load(path.read_text()) or []
    except yaml.YAMLError as exc:
        raise pytest.UsageError(f"{path}: {exc}") from None
    placements = []
    for i, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or not set(entry) <= {"match", "kind", "tier"} or "match" not in entry:
            raise pytest.UsageError(f"{path}: entry {i}: match, and kind and/or tier, expected")
        kind, tier = entry.get("kind"), entry.get("tier", "test")
        if kind is not None and kind not in KINDS or tier not in TIERS:
            raise pytest.UsageError(f"{path}: entry {i}: kind one of {KINDS}, tier one of {TIERS}")
        placements.append(Placement(str(entry["match"]), kind, tier))
    return placements


def _matches(placement: Placement, nodeid: str) -> bool:
    m = placement.match
    return nodeid == m or nodeid.startswith(m + "::") or nodeid.startswith(m + "[")


def place(nodeid: str, table: list[Placement]) -> tuple[str | None, str]:
    """(kind, tier) for a node id: the longest matching entry that sets each wins."""
    found = sorted((p for p in table if _matches(p, nodeid)), key=lambda p: len(p.match))
    kind = next((p.kind for p in reversed(found) if p.kind), None)
    tier = found[-1].tier if found else "test"
    return kind, tier


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tiers",
        default=str(TABLE),
        metavar="FILE",
        help="what each path/docker test judges (default: %(default)s)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timing: judges a time or a rate; runs alone (tests/tiers.yaml)")
    config.addinivalue_line("markers", "behaviour: judges behaviour only; may run beside another test")
    config.addinivalue_line("markers", "physics: in make test-physics, not make test (tests/tiers.yaml)")
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist
        # Set, not defaulted: a pytest that a test starts is a session of its own, with its
        # own locks (it must never wait on the lock its parent test holds).
        locks = tempfile.mkdtemp(prefix="quicbed-pytest-locks-")
        os.environ[LOCK_ENV] = locks
        os.environ[REMEASURE_ENV] = os.path.join(locks, "remeasures.txt")
        os.environ[NOT_JUDGED_ENV] = os.path.join(locks, "not-judged.txt")
        os.environ[LOADS_ENV] = os.path.join(locks, "loads.jsonl")
        os.environ[CALIBRATION_LOG_ENV] = os.path.join(locks, "calibrations.jsonl")
        config.stash[_LOCKS] = locks
        config.pluginmanager.register(TimingLedger(), "quicbed-timing-ledger")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _LOCKS in config.stash:
        shutil.rmtree(config.stash[_LOCKS], ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers set here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    source = Path(config.getoption("--tiers"))
    table = load_table(source)
    env_items = [i for i in items if i.get_closest_marker("path") or i.get_closest_marker("docker")]
    unplaced = []
    for item in env_items:
        kind, tier = place(item.nodeid, table)
        if kind is None:
            unplaced.append(item.nodeid)
        item.add_marker(kind or "timing")
        if tier == "physics":
            item.add_marker("physics")
    for item in items:  # a unit test: behaviour, in make test's tier, whatever its file says
        if item.get_closest_marker("timing") is None:
            item.add_marker("behaviour")
    if unplaced:
        raise pytest.UsageError(
            f"{source.name}: {len(unplaced)} path/docker test(s) with no kind (timing or behaviour): "
            + ", ".join(unplaced[:10])
        )
    if not config.getoption("deselect") and not config.getoption("keyword") and _whole_suite(config):
        stale = [p.match for p in table if not any(_matches(p, i.nodeid) for i in env_items)]
        if stale:
            raise pytest.UsageError(
                f"{TABLE.name}: entries that name no path/docker test: {', '.join(stale)}"
            )


def _whole_suite(config: pytest.Config) -> bool:
    """Collected from tests/ as a whole (not one file): only then can an entry be stale."""
    args = [a for a in config.args if not a.startswith("-")]
    root = Path(config.rootpath, "tests").resolve()
    return not args or all(Path(a).resolve() == root for a in args)


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def held(exclusive: bool) -> Iterator[None]:
    """The session's readers-writer lock: exclusive for a timing test, shared otherwise."""
    locks = os.environ.get(LOCK_ENV)
    if not locks:
        yield
        return
    directory = Path(locks)
    with contextlib.ExitStack() as stack:
        with _flock(directory / "turnstile", fcntl.LOCK_EX):
            stack.enter_context(_flock(directory / "session", fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with held(exclusive=item.get_closest_marker("timing") is not None):
        return (yield)


def unfit(timing: int, not_judged: int) -> bool:
    """Too many of the session's timing checks not judged for the session to stand."""
    return not_judged > NOT_JUDGED_LIMIT * timing


def unfit_line(timing: int, not_judged: int, steal: float | None, probe: float | None) -> str:
    figures = f"steal {_pct(steal)}, probe " + ("n/a" if probe is None else f"{probe:.1f}×")
    return f"host unfit to judge timing: {not_judged} of {timing} timing checks not judged; {figures}"


def _lines(env: str) -> list[str]:
    log = Path(os.environ.get(env, "/nonexistent"))
    return log.read_text().splitlines() if log.is_file() else []


def _entries(env: str) -> list[dict]:
    """The JSON objects a session's log holds, one a line (a torn line is skipped)."""
    entries = []
    for line in _lines(env):
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


def _attempt_loads() -> list[dict]:
    """Every attempt's figures that the session's meters logged."""
    return _entries(LOADS_ENV)


def calibration_line(entries: list[dict]) -> str:
    """What the session's calibrations (topology/calibrate.py's log) cost, fresh and recorded
    (route and RTT again, the rest from a record: calibration_reuse.py): issue 65's figure."""
    timed = [e for e in entries if isinstance(e.get("seconds"), int | float)]
    seconds = [e["seconds"] for e in timed]
    fresh = [e["seconds"] for e in timed if not e.get("recorded")]
    return (
        f"calibrations: {len(seconds)} took {sum(seconds):.0f} s in all; {len(fresh)} fresh took "
        f"{sum(fresh):.0f} s (longest {max(fresh, default=0.0):.0f} s)"
    )


def _worst(loads: list[dict], field: str) -> float | None:
    seen = [x[field] for x in loads if isinstance(x.get(field), int | float)]
    return max(seen) if seen else None


class TimingLedger:
    """The controller's count of timing checks run and not judged, from the reports (under
    xdist the controller runs no test), and the session's figures of the host."""

    def __init__(self) -> None:
        self.timing: set[str] = set()  # timing tests whose set-up passed
        self.not_judged: dict[str, str] = {}  # test id: the skip's reason
        self.jiffies = hostload.cpu_jiffies()
        self.verdict: bool = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup" and report.passed and "timing" in report.keywords:
            self.timing.add(report.nodeid)
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            if reason.startswith(NOT_JUDGED):
                self.not_judged.setdefault(report.nodeid, reason)

    def counts(self) -> tuple[int, int]:
        """(M, N): the timing checks that ran (a check skipped as not judged in its set-up
        included), and those not judged."""
        return len(self.timing | set(self.not_judged)), len(self.not_judged)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.verdict = unfit(*self.counts())
        if self.verdict and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        tr = terminalreporter
        tr.line(calibration_line(_entries(CALIBRATION_LOG_ENV)))
        remeasures = _lines(REMEASURE_ENV)
        tr.section(f"re-measurements on a contended host: {len(remeasures)}")
        for line in remeasures:
            tr.line(line)
        timing, not_judged = self.counts()
        if not timing:
            return
        tr.section(f"timing checks not judged (host contended in both attempts): {not_judged} of {timing}")
        for line in _lines(NOT_JUDGED_ENV) or [f"{k}: {v}" for k, v in self.not_judged.items()]:
            tr.line(line)
        loads = _attempt_loads()
        steal, probe = _worst(loads, "steal"), _worst(loads, "slow_ratio")
        mean = hostload.steal_share(self.jiffies, hostload.cpu_jiffies())
        tr.line(_host_line(mean, len(loads), steal, probe))
        if self.verdict:
            tr.line(unfit_line(timing, not_judged, steal if steal is not None else mean, probe), red=True)


def _host_line(mean: float | None, attempts: int, steal: float | None, probe: float | None) -> str:
    """The host over the session: its steal, and the worst of the measured attempts."""
    line = "host over the session: steal " + _pct(mean) + " of busy CPU"
    if attempts:
        line += f"; of {attempts} measured attempts: steal at most {_pct(steal)}"
        line += ", slow-spell probe at worst " + ("n/a" if probe is None else f"{probe:.1f}× its best")
    return line


def _pct(share: float | None) -> str:
    return "n/a" if share is None else f"{share * 100:.1f} %"
