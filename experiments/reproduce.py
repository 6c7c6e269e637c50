"""`quicbed reproduce`: every experiment of a directory in turn, then one report over their runs.

A run that ends with failed trials (exit 1, rows with an `error`) is resumed once with
`--retry-failed` before the next experiment, and its code is the retry's: a trial that fails
twice is a result the report shows, and the command's exit code says so. The command ends with
one line: what the report holds (the paper's findings decided, holding or not, not decided; the
trials that failed twice) and where it is.

One Ctrl-C, SIGTERM (a CI cancel, `timeout`) or SIGHUP stops the whole command: the running
experiment unwinds and tears its path down, no later experiment starts, no report is attempted,
and every experiment is listed with the command that finishes it. Exit codes: the report's (2:
it could not be written), else the worst run's (0 every trial measured; 1 a trial failed twice
or a condition could not be set up; 2 a bad experiment file; 3 a path failed calibration); 1
when no run produced rows; 130 interrupted; 4 at once when a run stopped on a problem of this
host (a link backend that cannot run, Docker down, an image missing), which no later experiment
would get past either.

The network is behind `run_one` (the CLI runs `quicbed run`; tests a synthetic executor).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from quicbed.errors import HostProblem, InputError

from .parallel import auto_parallel, parse_parallel, planned_wall
from .plan import caps, estimate_seconds, floors, hms, path_stretch
from .runner import signals_interrupt
from .schema import Experiment, load_experiment
from .store import MANIFEST, load_rows

if TYPE_CHECKING:  # the report's module loads pandas: only the CLI's report step needs it
    from quicbed.analysis.report import Written

INTERRUPTED = 130
FAILED = 1  # RunSummary.exit_code: a trial failed (or a condition could not be set up)
HOST_PROBLEM = HostProblem.exit_code  # the same for every experiment: stop at the first


class HostStopped(Exception):
    """A run stopped on a problem of this host: no later experiment could run either."""


class RunOne(Protocol):
    """Runs one experiment and returns its exit code, calling on_run_dir(run_dir) once it
    knows where the run goes. With `retry` (a run directory) it resumes that run and runs its
    failed trials again: `quicbed run FILE --resume RUN --retry-failed`."""

    def __call__(self, file: Path, on_run_dir: Callable[[Path], None], retry: Path | None = None) -> int: ...


# The report over the run ids: what it wrote, or None when it could not (it said why).
Report = Callable[[list[str]], "Written | None"]


@dataclass
class Started:
    """An experiment reproduce got to, and how far."""

    file: Path
    run_dir: Path | None = None
    code: int | None = None  # None: it was running when the command was interrupted
    retried: bool = False  # its failed trials were run a second time
    failed: int = 0  # trials whose last attempt failed, once it ended

    @property
    def resumable(self) -> bool:
        # A run directory without a manifest was stopped before its first trial could start.
        return self.run_dir is not None and (self.run_dir / MANIFEST).is_file()


def experiment_files(directory: Path) -> list[Path]:
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise InputError(f"no experiment files (*.yaml) in {directory}")
    return files


def reproduce(
    files: Sequence[Path],
    run_one: RunOne,
    report: Report,
    *,
    quick: bool = True,
    say: Callable[[str], None] = print,
) -> int:
    """Run `files` in order, then `report` over the runs that have rows."""
    started: list[Started] = []
    with signals_interrupt():  # for the whole command, between and around the runs too
        try:
            finished = _run_all(files, run_one, started, quick, say)
        except KeyboardInterrupt:
            finished = False
        except HostStopped:
            return HOST_PROBLEM
        if not finished:
            print_resume_hints(files, started, quick)
            return INTERRUPTED
        try:
            return _report(started, report, say)
        except KeyboardInterrupt:
            ids = " ".join(s.run_dir.name for s in started if s.run_dir)
            print(
                f"interrupted while writing the report (every run had ended); write it with: "
                f"quicbed report {ids}"
            )
            return INTERRUPTED


def _run_all(
    files: Sequence[Path], run_one: RunOne, started: list[Started], quick: bool, say: Callable[[str], None]
) -> bool:
    """False as soon as a run says it was interrupted: nothing after it may start."""
    for file in files:
        entry = Started(file)
        started.append(entry)
        say(f"reproduce: {_shown(file)} ({'quick' if quick else 'full'})")

        def remember(run_dir: Path, entry: Started = entry) -> None:
            entry.run_dir = run_dir

        entry.code = run_one(file, remember)
        entry.failed = failed_trials(entry.run_dir)
        if entry.code == FAILED and entry.failed and entry.run_dir is not None:
            say(
                f"reproduce: {_shown(file)}: {entry.failed} trial(s) failed; running them once "
                f"more (--resume {entry.run_dir.name} --retry-failed)"
            )
            entry.code, entry.retried = None, True  # running again: an interrupt resumes the retry
            entry.code = run_one(file, remember, retry=entry.run_dir)
            entry.failed = failed_trials(entry.run_dir)
        if entry.code == INTERRUPTED:
            return False
        if entry.code == HOST_PROBLEM:
            say(
                "reproduce: stopped: this host cannot run it (the line above says why and the "
                "fix); no later experiment was started"
            )
            raise HostStopped
    return True


def _report(started: list[Started], report: Report, say: Callable[[str], None]) -> int:
    worst = max((s.code or 0 for s in started), default=0)
    run_ids = []
    for entry in started:
        if entry.run_dir is None:
            continue
        if load_rows(entry.run_dir)[0]:
            run_ids.append(entry.run_dir.name)
        else:  # every condition skipped (calibration failed): a report would only fail on it
            say(f"reproduce: {entry.run_dir.name} has no rows; left out of the report")
    if not run_ids:
        print("quicbed reproduce: no run produced results", file=sys.stderr)
        return 1
    say(f"reproduce: report over {', '.join(run_ids)}")
    written = report(run_ids)
    if written is None:
        return 2  # the report said why it could not be written
    say(f"reproduce: {what_it_holds(written, started)}")
    return worst


def failed_trials(run_dir: Path | None) -> int:
    """Trials of the run whose last attempt failed (a row with an `error`)."""
    if run_dir is None:
        return 0
    return sum(row.get("error") is not None for row in load_rows(run_dir)[0])


def what_it_holds(written: Written, started: Sequence[Started]) -> str:
    """The command's last line: the report's verdicts, the trials that failed, and where it is."""
    twice = sum(s.failed for s in started if s.retried)
    once = sum(s.failed for s in started if not s.retried)  # a run that ended otherwise than 1
    failed = [
        f"{n} trial{'s' if n != 1 else ''} failed{how}" for n, how in ((twice, " twice"), (once, "")) if n
    ]
    return "; ".join([written.tally.sentence(), *(failed or ["no trial failed"]), f"report: {written.html}"])


def planned(exp: Experiment) -> tuple[float, float, int]:
    """An experiment's wall time on this host if every decide line decides at its floor, at
    its cap (the same for fixed repetitions), and the paths it runs at once."""
    k = parse_parallel(exp.parallel) or auto_parallel(exp)
    # K paths share the host: each unit takes PARALLEL_WALL_K2 x 2 as long as alone.
    scale = planned_wall(exp, k) / planned_wall(exp, 1) * path_stretch(k)
    cap = estimate_seconds(exp, caps(exp) if exp.auto else None) * scale
    least = estimate_seconds(exp, floors(exp)) * scale if exp.auto else cap
    return least, cap, k


def plan(files: Sequence[Path], quick: bool) -> str:
    """`quicbed reproduce --dry-run`: each experiment's planned wall time on this host, at the
    paths it runs at once, and their sum (what the command's run takes, set-up aside)."""
    lines, low, high = [], 0.0, 0.0
    for file in files:
        exp = load_experiment(file, quick=quick)
        least, cap, k = planned(exp)
        low, high = low + least, high + cap
        at = f"{k} paths at once" if k > 1 else "1 path"
        if exp.auto:
            shown = f"{hms(least)} if every line decides at its floor, {hms(cap)} at the cap"
            lines.append(f"{_shown(file)}: {shown}; {at}")
        else:
            lines.append(f"{_shown(file)}: {hms(cap)}; {at}")
    lines.append(f"total: {hms(low)} if every decide line decides at its floor, {hms(high)} at the caps")
    lines.append("(each file's plan: quicbed run FILE --dry-run" + (" --quick)" if quick else ")"))
    return "\n".join(lines)


def print_resume_hints(files: Sequence[Path], started: list[Started], quick: bool) -> None:
    """What each experiment needs to be finished, and the report over all of them."""
    print(
        "quicbed reproduce: interrupted; the path was torn down and nothing else was started", file=sys.stderr
    )
    by_file = {s.file: s for s in started}
    fresh = " --quick" if quick else ""
    for file in files:
        entry = by_file.get(file)
        if entry is not None and entry.resumable:
            assert entry.run_dir is not None
            if entry.code in (None, INTERRUPTED):
                # A resume after --retry-failed must retry the rest too (commands.cmd_run).
                again = " --retry-failed" if entry.retried else ""
                print(f"resume with: quicbed run {_shown(file)} --resume {entry.run_dir.name}{again}")
            else:
                print(f"done: {_shown(file)} as {entry.run_dir.name} (exit {entry.code})")
        else:
            print(f"not started: quicbed run {_shown(file)}{fresh}")
    print("then: quicbed report RUN_ID... (the run ids above, and those of the new runs)")


def _shown(path: Path) -> str:
    """Relative to the working directory when under it: shorter, and still a valid argument."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
