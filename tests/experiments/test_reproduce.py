"""`quicbed reproduce` without a network: experiments in turn through the synthetic executor;
one signal stops everything (no later experiment, no report) and says how to resume.

The same on the real path (SIGINT and SIGTERM, while calibrating and while measuring) is at
the end, marked `path`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from quicbed import cli
from quicbed.analysis.report import Tally, Written
from quicbed.experiments.commands import cmd_run
from quicbed.experiments.options import RunOptions
from quicbed.experiments.reproduce import experiment_files, reproduce
from quicbed.experiments.runner import TrialError
from quicbed.experiments.store import load_history, load_rows
from quicbed.experiments.synthetic import SyntheticExecutor

EXPERIMENT = """\
name: {name}
profiles:
  - {{name: lab, rtt_ms: 80, rate_mbit: 20}}
sweep: {{loss_pct: [0, 1]}}
servers: [caddy]
clients: [quic_perf]
workload: {{kind: web, objects: [index.html]}}
repetitions: 4
quick: {{repetitions: 3}}
"""
TRIALS = 2 * 3  # quick: 2 conditions x 3 repetitions
NAMES = ("alpha", "bravo", "charlie")
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@pytest.fixture
def experiments(tmp_path: Path) -> list[Path]:
    directory = tmp_path / "experiments"
    directory.mkdir()
    for name in NAMES:
        (directory / f"{name}.yaml").write_text(EXPERIMENT.format(name=name))
    return experiment_files(directory)


class Interrupting(SyntheticExecutor):
    """Sends itself `sig` while calibrating ("condition") or in its second trial ("trials")."""

    def __init__(self, sig: int, phase: str):
        super().__init__()
        self.sig, self.phase, self.trials = sig, phase, 0

    @contextlib.contextmanager
    def condition(self, cond):
        if self.phase == "condition":
            os.kill(os.getpid(), self.sig)
            time.sleep(1)  # the handler raises before this ends
        with super().condition(cond) as calib:
            yield calib

    def run_trial(self, trial):
        self.trials += 1
        if self.phase == "trials" and self.trials == 2:
            os.kill(os.getpid(), self.sig)
        return super().run_trial(trial)


class Flaky(SyntheticExecutor):
    """Fails the `nth` trial it is asked for (1-based, over every run that shares `attempts`)
    on its first attempt, or on every attempt when `always`."""

    def __init__(self, attempts: dict[str, int], nth: int = 2, always: bool = False):
        super().__init__()
        self.attempts, self.nth, self.always = attempts, nth, always

    def run_trial(self, trial):
        self.attempts[trial.trial_id] = self.attempts.get(trial.trial_id, 0) + 1
        flaky = list(self.attempts)[self.nth - 1] if len(self.attempts) >= self.nth else None
        if trial.trial_id == flaky and (self.always or self.attempts[flaky] == 1):
            raise TrialError("synthetic failure: the player's request went nowhere")
        return super().run_trial(trial)


TALLY = Tally(findings=14, holds=10, fails=2, not_decided=2)


class Harness:
    """run_one and report for reproduce(), recording what was started."""

    def __init__(self, results: Path, executor_for: Callable[[str], SyntheticExecutor]):
        self.results, self.executor_for = results, executor_for
        self.started: list[str] = []
        self.retried: list[str] = []
        self.reported: list[list[str]] | None = None

    def run_one(self, file: Path, on_run_dir: Callable[[Path], None], retry: Path | None = None) -> int:
        (self.retried if retry else self.started).append(file.stem)
        opts = RunOptions(
            quick=True,
            results=self.results,
            progress=False,
            resume=str(retry) if retry else None,
            retry_failed=retry is not None,
        )
        return cmd_run(file, lambda exp, run_dir: self.executor_for(file.stem), opts, on_run_dir)

    def report(self, run_ids: list[str]) -> Written:
        self.reported = run_ids
        return Written(self.results / "report" / "report.html", [], TALLY)

    def run_dirs(self) -> dict[str, Path]:
        return {p.name.split("-")[0]: p for p in self.results.iterdir()}


def _handlers() -> dict[int, object]:
    return {s: signal.getsignal(s) for s in SIGNALS}


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("phase", ["condition", "trials"])
def test_one_signal_stops_every_experiment_and_the_report(tmp_path, experiments, capsys, sig, phase):
    before = _handlers()
    h = Harness(
        tmp_path / "results",
        lambda name: Interrupting(sig, phase) if name == "bravo" else SyntheticExecutor(),
    )
    assert reproduce(experiments, h.run_one, h.report, say=lambda m: None) == 130
    assert h.started == ["alpha", "bravo"] and h.reported is None
    runs = h.run_dirs()
    assert set(runs) == {"alpha", "bravo"}  # charlie never made a run directory
    assert len(load_rows(runs["alpha"])[0]) == TRIALS
    assert len(load_rows(runs["bravo"])[0]) == (0 if phase == "condition" else 1)
    out = capsys.readouterr().out
    alpha, bravo, charlie = (str(f) for f in experiments)
    assert f"done: {alpha} as {runs['alpha'].name} (exit 0)" in out
    assert f"resume with: quicbed run {bravo} --resume {runs['bravo'].name}" in out
    assert f"not started: quicbed run {charlie} --quick" in out
    assert _handlers() == before


SCRIPT = """\
import sys
from pathlib import Path
from quicbed.experiments.commands import cmd_run
from quicbed.experiments.options import RunOptions
from quicbed.experiments.reproduce import experiment_files, reproduce
from quicbed.experiments.synthetic import SyntheticExecutor

directory, results = Path(sys.argv[1]), Path(sys.argv[2])

def run_one(file, on_run_dir):
    opts = RunOptions(quick=True, results=results, progress=False)
    return cmd_run(file, lambda e, d: SyntheticExecutor(delay_s=0.1), opts, on_run_dir)

sys.exit(reproduce(experiment_files(directory), run_one, lambda ids: print("REPORT") or 0))
"""


@pytest.mark.parametrize("sig", SIGNALS)
def test_a_signal_from_outside_stops_the_process_with_130(tmp_path, experiments, sig):
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(experiments[0].parent), str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not list(results.glob("bravo-*/manifest.json")) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    runs = {p.name.split("-")[0]: p.name for p in results.iterdir()}
    assert set(runs) == {"alpha", "bravo"} and "REPORT" not in out and "Traceback" not in out
    assert f"resume with: quicbed run {experiments[1]} --resume {runs['bravo']}" in out


def test_a_signal_between_experiments_stops_before_the_next(tmp_path, experiments, capsys):
    h = Harness(tmp_path / "results", lambda name: SyntheticExecutor())

    def run_one(file: Path, on_run_dir: Callable[[Path], None]) -> int:
        code = h.run_one(file, on_run_dir)
        if file.stem == "alpha":  # after its run ended: no runner handler is in place
            os.kill(os.getpid(), signal.SIGTERM)
        return code

    assert reproduce(experiments, run_one, h.report, say=lambda m: None) == 130
    assert h.started == ["alpha"] and h.reported is None
    out = capsys.readouterr().out
    assert f"not started: quicbed run {experiments[1]} --quick" in out


def test_interrupted_before_the_run_directory_has_a_manifest(tmp_path, experiments, capsys):
    def run_one(file: Path, on_run_dir: Callable[[Path], None]) -> int:
        on_run_dir(tmp_path / "results" / f"{file.stem}-x")  # told, but never created
        raise KeyboardInterrupt  # e.g. while the executor was being built

    assert reproduce(experiments, run_one, lambda ids: 0, say=lambda m: None) == 130
    out = capsys.readouterr().out
    assert "resume with" not in out
    assert all(f"not started: quicbed run {f} --quick" in out for f in experiments)


def test_every_experiment_then_one_report_without_empty_runs(tmp_path, experiments, capsys):
    class NoPath(SyntheticExecutor):
        @contextlib.contextmanager
        def condition(self, cond):
            raise RuntimeError("calibration failed")
            yield  # pragma: no cover

    h = Harness(tmp_path / "results", lambda name: NoPath() if name == "charlie" else SyntheticExecutor())
    said: list[str] = []
    # The report is written; charlie's failed run (exit 1) is the command's exit code.
    assert reproduce(experiments, h.run_one, h.report, say=said.append) == 1
    runs = h.run_dirs()
    assert h.started == list(NAMES) and h.reported == [runs["alpha"].name, runs["bravo"].name]
    assert f"reproduce: {runs['charlie'].name} has no rows; left out of the report" in said


def test_a_failed_trial_is_run_once_more_and_its_retry_decides(tmp_path, experiments):
    """bravo's second trial fails once: reproduce resumes bravo with --retry-failed before
    charlie starts, says so, and takes the retry's exit code; the last line says what the
    report holds and where it is."""
    attempts: dict[str, int] = {}
    h = Harness(
        tmp_path / "results", lambda name: Flaky(attempts) if name == "bravo" else SyntheticExecutor()
    )
    said: list[str] = []
    assert reproduce(experiments, h.run_one, h.report, say=said.append) == 0
    bravo = h.run_dirs()["bravo"]
    assert h.started == list(NAMES) and h.retried == ["bravo"]
    retry_line = next(i for i, line in enumerate(said) if "running them once more" in line)
    assert said[retry_line] == (
        f"reproduce: {experiments[1]}: 1 trial(s) failed; running them once more "
        f"(--resume {bravo.name} --retry-failed)"
    )
    assert said.index(f"reproduce: {experiments[2]} (quick)") > retry_line  # before charlie
    rows, history = load_rows(bravo)[0], load_history(bravo)[0]
    assert len(rows) == TRIALS and all(r.get("error") is None for r in rows)
    assert len(history) == TRIALS + 1  # the failed attempt stays, superseded
    assert said[-1] == (
        "reproduce: 12 of 14 findings decided (10 hold, 2 do not hold), 2 not decided; "
        f"no trial failed; report: {tmp_path / 'results' / 'report' / 'report.html'}"
    )


def test_a_trial_that_fails_twice_is_exit_1_and_said_last(tmp_path, experiments):
    attempts: dict[str, int] = {}
    h = Harness(
        tmp_path / "results",
        lambda name: Flaky(attempts, always=True) if name == "alpha" else SyntheticExecutor(),
    )
    said: list[str] = []
    assert reproduce(experiments, h.run_one, h.report, say=said.append) == 1
    assert h.retried == ["alpha"] and sorted(attempts.values()) == [1] * (TRIALS - 1) + [2]  # once more
    assert h.reported is not None and len(h.reported) == len(NAMES)  # the report is written
    assert "; 1 trial failed twice; report: " in said[-1]


def test_an_interrupted_retry_is_resumed_with_retry_failed(tmp_path, experiments, capsys):
    attempts: dict[str, int] = {}
    h = Harness(
        tmp_path / "results", lambda name: Flaky(attempts) if name == "alpha" else SyntheticExecutor()
    )

    def run_one(file: Path, on_run_dir: Callable[[Path], None], retry: Path | None = None) -> int:
        if retry is not None:
            raise KeyboardInterrupt  # Ctrl-C while the failed trials run again
        return h.run_one(file, on_run_dir)

    assert reproduce(experiments, run_one, h.report, say=lambda m: None) == 130
    out = capsys.readouterr().out
    alpha = h.run_dirs()["alpha"].name
    assert f"resume with: quicbed run {experiments[0]} --resume {alpha} --retry-failed" in out
    assert f"not started: quicbed run {experiments[1]} --quick" in out and h.reported is None


def test_a_report_that_cannot_be_written_is_exit_2(tmp_path, experiments):
    h = Harness(tmp_path / "results", lambda name: SyntheticExecutor())
    said: list[str] = []
    assert reproduce(experiments, h.run_one, lambda ids: None, say=said.append) == 2
    assert not any("report: " in line for line in said)


def test_no_rows_anywhere_is_exit_1_without_a_report(tmp_path, experiments):
    def run_one(file: Path, on_run_dir: Callable[[Path], None]) -> int:
        return 2  # a bad file: no run directory at all

    assert reproduce(experiments, run_one, lambda ids: pytest.fail("no report"), say=lambda m: None) == 1


def test_cli_reproduce_runs_the_experiments_directory(tmp_path, experiments, monkeypatch):
    """--experiments DIR reaches reproduce; each run gets reproduce's RunOptions: quick, its
    backend, and every other field at `quicbed run`'s own default."""
    results = tmp_path / "results"
    seen: list[tuple[Path, RunOptions]] = []

    def fake_run_file(file: Path, opts: RunOptions, on_run_dir=None) -> int:
        seen.append((Path(file), opts))
        mine = dataclasses.replace(opts, results=results)
        return cmd_run(file, lambda e, d: SyntheticExecutor(), mine, on_run_dir)

    monkeypatch.setattr(cli, "run_file", fake_run_file)
    reported: list[list[str]] = []
    written = Written(tmp_path / "report.html", [], TALLY)
    monkeypatch.setattr(
        "quicbed.analysis.report.report_runs", lambda ids, out: reported.append(ids) or written
    )
    args = cli.build_parser().parse_args(
        ["reproduce", "--experiments", str(experiments[0].parent), "--no-progress", "--backend", "uml"]
    )
    assert cli.cmd_reproduce(args) == 0
    assert [file for file, _ in seen] == experiments
    assert len(reported) == 1 and len(reported[0]) == len(NAMES)
    run_defaults = RunOptions.from_args(cli.build_parser().parse_args(["run", "x.yaml", "--backend", "uml"]))
    for _, opts in seen:
        assert opts == dataclasses.replace(run_defaults, quick=True, progress=False)


def test_cli_reproduce_retries_as_resume_with_retry_failed(tmp_path, experiments, monkeypatch):
    """The CLI's retry is `quicbed run FILE --resume RUN --retry-failed` with reproduce's
    other options; the command's exit code is the retry's."""
    results, attempts = tmp_path / "results", {}
    seen: list[RunOptions] = []

    def fake_run_file(file: Path, opts: RunOptions, on_run_dir=None) -> int:
        seen.append(opts)
        executor = Flaky(attempts) if Path(file).stem == "alpha" else SyntheticExecutor()
        return cmd_run(file, lambda e, d: executor, dataclasses.replace(opts, results=results), on_run_dir)

    monkeypatch.setattr(cli, "run_file", fake_run_file)
    written = Written(tmp_path / "report.html", [], TALLY)
    monkeypatch.setattr("quicbed.analysis.report.report_runs", lambda ids, out: written)
    args = cli.build_parser().parse_args(
        ["reproduce", "--experiments", str(experiments[0].parent), "--no-progress"]
    )
    assert cli.cmd_reproduce(args) == 0
    (alpha,) = [p for p in results.iterdir() if p.name.startswith("alpha-")]
    first, retry = seen[0], seen[1]
    assert (first.resume, first.retry_failed) == (None, False)
    assert retry == dataclasses.replace(first, resume=str(alpha), retry_failed=True)
    assert len(seen) == len(NAMES) + 1


def test_cli_reproduce_with_an_empty_directory_is_bad_input(tmp_path):
    args = cli.build_parser().parse_args(["reproduce", "--experiments", str(tmp_path)])
    with pytest.raises(cli.InputError, match="no experiment files"):
        cli.cmd_reproduce(args)


def test_reproduce_dry_run_plans_each_experiment_and_their_sum(capsys, monkeypatch):
    """The paper's quick experiments, each at the paths it runs at once (video's file says
    parallel: auto, which 2 cores fit twice), and one total: the sum of their floors and of
    their caps. It needs no root and runs nothing."""
    from quicbed.experiments import parallel, plan
    from quicbed.experiments.reproduce import planned
    from quicbed.experiments.schema import load_experiment
    from quicbed.paths import REPO

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["reproduce", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    files = experiment_files(REPO / "experiments" / "paper")
    exps = [load_experiment(f, quick=True) for f in files]
    assert [line.split(":")[0] for line in out[: len(files)]] == [str(f.relative_to(REPO)) for f in files]
    video = next(e for e in exps if e.name == "paper-video")
    scale = parallel.planned_wall(video, 2) / parallel.planned_wall(video, 1) * plan.path_stretch(2)
    assert planned(video)[1:] == (pytest.approx(plan.estimate_seconds(video) * scale), 2)
    assert out[files.index(REPO / "experiments" / "paper" / "video.yaml")].endswith("; 2 paths at once")
    low, high = sum(planned(e)[0] for e in exps), sum(planned(e)[1] for e in exps)
    assert out[len(files)] == (
        f"total: {plan.hms(low)} if every decide line decides at its floor, {plan.hms(high)} at the caps"
    )
    assert low < high


# --- on the real path (root, Docker; unrun by the unit suite) -------------------------------

REAL_EXPERIMENT = """\
# A small real experiment for interruption tests: one condition, long enough to signal.
name: {name}
profiles: [india]
servers: [caddy]
clients: [{{tool: tls_perf, tls: ["1.3"], http: "2"}}, quic_perf]
workload: {{kind: web, objects: [index.html]}}
repetitions: 20
"""


def _start_reproduce(directory: Path, results: Path, terminal: bool = False) -> Started:
    """`quicbed reproduce` as a child (signalled by the test), or as a terminal runs it: the
    session leader on a pty whose ^C the kernel sends as SIGINT to the whole foreground
    process group (docker exec, iperf3 and every helper), not to the parent alone."""
    env = {
        **os.environ,
        "QUICBED_RESULTS": str(results),
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
        "LINES": "50",
        "TERM": "dumb",
    }
    argv = [
        sys.executable,
        "-m",
        "quicbed.cli",
        "reproduce",
        "--experiments",
        str(directory),
        "--full",
        "--no-progress",
        "--out",
        str(results / "report"),
    ]
    if not terminal:
        return Started(
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    master, slave = pty.openpty()
    proc = subprocess.Popen(["setsid", "-c", *argv], env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    return Started(proc, master)


class Started:
    """The process and its merged output, read by a thread so waiting never blocks on it."""

    def __init__(self, proc: subprocess.Popen, master: int | None = None):
        self.proc, self.master, self.chunks = proc, master, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        if self.master is None:
            assert self.proc.stdout
            self.chunks.extend(self.proc.stdout)
            return
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the session ended
                return
            if not chunk:
                return
            self.chunks.append(chunk.decode(errors="replace"))

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def interrupt(self, sig: int) -> None:
        if self.master is not None and sig == signal.SIGINT:
            os.write(self.master, b"\x03")  # Ctrl-C at the terminal
        else:
            self.proc.send_signal(sig)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if self.master is not None:  # the session leader's group: every child too
                    os.killpg(self.proc.pid, signal.SIGKILL)
                else:
                    self.proc.kill()
            self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        if self.master is not None:
            os.close(self.master)
            self.master = None


def _wait_for(run: Started, phase: str, results: Path, timeout: float = 300) -> None:
    """Until the run is calibrating, or has written 3 rows."""
    proc = run.proc
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if phase == "calibrating" and "calibrating" in run.text:
            return
        rows = list(results.glob("*/rows.jsonl"))
        if phase == "trials" and rows and rows[0].read_text().count("\n") >= 3:
            return
        time.sleep(0.1)
    run.close()
    pytest.fail(f"reproduce never reached {phase}: {run.text[-3000:]}")


@pytest.mark.path
@pytest.mark.usefixtures("clean_slate")
@pytest.mark.parametrize(
    ("how", "phase"), [("ctrl-c", "calibrating"), ("ctrl-c", "trials"), ("sigterm", "trials")]
)
def test_real_reproduce_stops_on_one_signal(tmp_path, how, phase):
    """Ctrl-C typed at reproduce's terminal (the whole process group gets SIGINT), or a
    SIGTERM to the process (a CI cancel, `timeout`): one stops everything, nothing is left."""
    from quicbed.topology.clean import leftovers
    from quicbed.topology.marker import marked_processes

    directory, results = tmp_path / "experiments", tmp_path / "results"
    directory.mkdir()
    for name in ("first", "second"):
        (directory / f"{name}.yaml").write_text(REAL_EXPERIMENT.format(name=name))
    run = _start_reproduce(directory, results, terminal=how == "ctrl-c")
    try:
        _wait_for(run, phase, results)
        run.interrupt(signal.SIGINT if how == "ctrl-c" else signal.SIGTERM)
        start = time.monotonic()
        run.proc.wait(timeout=90)
        stopped_in = time.monotonic() - start
    finally:
        run.close()
    out = run.text.replace("\r\n", "\n")
    assert run.proc.returncode == 130, out[-3000:]
    assert stopped_in < 60, f"took {stopped_in:.0f} s to stop"
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]  # the second never started
    assert run_dir.name.startswith("first-")
    assert f"resume with: quicbed run {directory / 'first.yaml'} --resume {run_dir.name}" in out
    assert f"not started: quicbed run {directory / 'second.yaml'}" in out
    assert "report over" not in out and "has no rows" not in out
    assert not (results / "report").exists()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    time.sleep(0.5)
    assert leftovers() == [] and marked_processes() == []
