"""Fail fast on what will not fix itself: a problem of this host (a link backend that cannot
run, Docker down, an image not built) stops `quicbed run` at its first condition and
`quicbed reproduce` at its first experiment, with one line; a problem of one condition (a
refused calibration) still skips only that condition. Synthetic executor, no network; the
same with a panicking UML kernel on the real path is tests/topology/test_backend_choice.py."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from quicbed.errors import HostProblem, PathMismatch
from quicbed.experiments.commands import cmd_run
from quicbed.experiments.options import RunOptions
from quicbed.experiments.reproduce import experiment_files, reproduce
from quicbed.experiments.synthetic import SyntheticExecutor

EXPERIMENT = """\
name: {name}
profiles:
  - {{name: lab, rtt_ms: 80, rate_mbit: 20}}
sweep: {{loss_pct: [0, 1, 2]}}
servers: [caddy]
clients: [quic_perf]
workload: {{kind: web, objects: [index.html]}}
repetitions: 2
"""
REASON = "--backend uml: uml cannot run on this CPU: ptrace set fp regs failed, errno = 14"


class Failing(SyntheticExecutor):
    """Raises `error` when a condition's path comes up, and counts the attempts."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error, self.attempts = error, 0

    @contextlib.contextmanager
    def condition(self, cond):  # the Executor protocol's
        self.attempts += 1
        raise self.error
        yield {}


def _experiments(tmp_path: Path, names: tuple[str, ...] = ("alpha",)) -> list[Path]:
    directory = tmp_path / "experiments"
    directory.mkdir(exist_ok=True)
    for name in names:
        (directory / f"{name}.yaml").write_text(EXPERIMENT.format(name=name))
    return experiment_files(directory)


def _run(
    file: Path, executor: SyntheticExecutor, results: Path, on_run_dir: Callable[[Path], None] | None = None
) -> int:
    return cmd_run(
        file,
        lambda exp, run_dir: executor,
        RunOptions(results=results, progress=False),
        on_run_dir=on_run_dir,
    )


def test_a_host_problem_stops_the_run_at_its_first_condition(tmp_path: Path, capsys) -> None:
    executor = Failing(HostProblem(REASON))
    code = _run(_experiments(tmp_path)[0], executor, tmp_path / "results")
    out = capsys.readouterr().out
    assert code == HostProblem.exit_code == 4
    assert executor.attempts == 1  # not once per condition
    assert out.count("ptrace set fp regs failed") == 1, out
    assert f"error: {REASON}" in out and "resume with quicbed run" in out
    (run_dir,) = (tmp_path / "results").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and manifest["stopped"] == REASON


def test_a_refused_calibration_still_skips_only_its_condition(tmp_path: Path, capsys) -> None:
    executor = Failing(PathMismatch("calibration failed (rtt_median_ms/both)"))
    code = _run(_experiments(tmp_path)[0], executor, tmp_path / "results")
    assert code == PathMismatch.exit_code == 3 and executor.attempts == 3  # each was tried
    assert capsys.readouterr().out.count("skipped: PathMismatch") == 3


def test_reproduce_stops_at_the_first_experiment_a_host_problem_stops(tmp_path: Path, capsys) -> None:
    files = _experiments(tmp_path, ("alpha", "bravo", "charlie"))
    started: list[str] = []

    def run_one(file: Path, on_run_dir: Callable[[Path], None]) -> int:
        started.append(file.stem)
        return _run(file, Failing(HostProblem(REASON)), tmp_path / "results", on_run_dir)

    code = reproduce(files, run_one, lambda ids: pytest.fail("no report after a host problem"), say=print)
    out = capsys.readouterr().out
    assert code == 4 and started == ["alpha"]
    assert out.count("ptrace set fp regs failed") == 1, out
    assert "no later experiment was started" in out
