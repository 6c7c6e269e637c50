"""`quicbed run --parallel K` without the network (experiments/parallel.py): which units run
together, the default K, and the dispatcher's bookkeeping through forked jobs with the
synthetic executor (rows of every unit, a killed job resumed, CPU-bound units measured again
alone). The real paths side by side: test_parallel_path.py."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from quicbed.errors import HostProblem, InputError
from quicbed.experiments.commands import cmd_run
from quicbed.experiments.matrix import Trial
from quicbed.experiments.options import RunOptions
from quicbed.experiments.parallel import (
    CPU_BOUND_RERUN,
    auto_parallel,
    jobs,
    parse_parallel,
    planned_wall,
)
from quicbed.experiments.plan import PATH_CPU_CORES, SETUP_S, estimate_seconds
from quicbed.experiments.schema import ExperimentError, load_experiment, parse_experiment
from quicbed.experiments.shard import unit_seconds, unit_trials, units
from quicbed.experiments.store import load_history, load_rows, read_manifest
from quicbed.experiments.synthetic import SyntheticExecutor
from quicbed.paths import REPO
from quicbed.workloads import WORKLOADS

PAPER = REPO / "experiments" / "paper"
# Three conditions of 24 trials; at 5 % loss on india a large file takes minutes (10 MB: one
# and a half, 100 MB: ten), so that condition splits into units (two with 10MB, more with
# 100MB) and the lossless ones stay one unit each.
TEXT = """
name: par
profiles: [india]
sweep: {loss_pct: [0, 1, 5]}
servers: [caddy, nginx]
clients: [{tool: tls_perf, tls: ["1.3"]}, quic_perf]
workload: {kind: cloud, files: [1KB, FILES]}
repetitions: 3
seed: 1
"""


def _exp(files: str = "10MB"):
    return parse_experiment(TEXT.replace("FILES", files))


def _work(exp) -> list[tuple[Any, list]]:
    return [(u, [(t, 1) for t in unit_trials(exp, u)]) for u in units(exp)]


def _file(tmp: Path, files: str = "10MB") -> Path:
    path = tmp / "par.yaml"
    path.write_text(TEXT.replace("FILES", files))
    return path


def _run(file: Path, results: Path, executor: Any, **kw: Any) -> tuple[int, Path]:
    before = set(results.iterdir()) if results.exists() else set()
    code = cmd_run(file, lambda _exp, _dir: executor, RunOptions(results=results, progress=False, **kw))
    new = set(results.iterdir()) - before if not kw.get("resume") else {results / kw["resume"]}
    (run_dir,) = new
    return code, run_dir


# -- scheduling ---------------------------------------------------------------------------


def test_a_conditions_units_share_one_path_unless_fewer_conditions_than_paths():
    exp = _exp("100MB")
    per_condition = {c: [u.id for u in units(exp) if u.condition.id == c] for c in ("c0", "c1", "c2")}
    assert len(per_condition["c2"]) > 1  # the lossy 100 MB condition splits
    # Three conditions, two paths: each condition on one path, its units together.
    two = jobs(_work(exp), 2, exp)
    assert sorted(sorted(u.id for u, _ in job) for job in two) == sorted(per_condition.values())
    # Longest first: the split condition's job leads.
    assert [u.id for u, _ in two[0]] == per_condition["c2"]
    # More paths than conditions: the biggest condition's units go to paths of their own.
    many = jobs(_work(exp), 5, exp)
    assert len(many) == 2 + len(per_condition["c2"])
    assert all(len(job) == 1 for job in many if job[0][0].condition.id == "c2")
    # Every unit once, whatever K.
    for k in (1, 2, 3, 8):
        ids = [u.id for job in jobs(_work(exp), k, exp) for u, _ in job]
        assert sorted(ids) == sorted(u.id for u in units(exp)), k


def test_the_planned_wall_time_is_the_longest_path_and_k1_is_the_serial_run():
    exp = _exp("100MB")
    one, two = planned_wall(exp, 1), planned_wall(exp, 2)
    # K=1: one set-up per condition and every trial, as the dry run's estimate.
    assert one == pytest.approx(estimate_seconds(exp))
    assert one / 2 <= two < one
    # Never below the longest unit on a path of its own: a unit is not split across paths.
    longest = max(unit_seconds(exp, u) for u in units(exp))
    assert planned_wall(exp, 99) == pytest.approx(longest) and longest > SETUP_S


def test_auto_k_fits_the_workloads_measured_cpu_in_the_cores():
    video = load_experiment(PAPER / "video.yaml", quick=True)
    web = load_experiment(PAPER / "web.yaml")
    per_path = WORKLOADS["video"].trial_cpu_cores("chromium") + PATH_CPU_CORES
    assert per_path < 2 * 0.8 / 2  # two playbacks and their paths fit in 2 cores' budget
    assert auto_parallel(video, cores=2) == 2
    assert auto_parallel(video, cores=1) == 1
    # A browser page load keeps a core and a half busy: web stays at one path on 2 cores.
    assert auto_parallel(web, cores=2) == 1
    # Never more paths than cores, nor than units (video quick has 2).
    assert auto_parallel(video, cores=16) == 2
    cloud = load_experiment(PAPER / "cloud.yaml")
    assert auto_parallel(cloud, cores=4) == 4


def test_parallel_flag_parses_k_or_auto_and_refuses_the_rest_in_one_line(tmp_path, capsys):
    assert parse_parallel("auto") is None and parse_parallel("3") == 3
    for bad in ("0", "x", "-1", "65"):
        with pytest.raises(InputError, match=r"--parallel .*expected"):
            parse_parallel(bad)
    code = cmd_run(_file(tmp_path), lambda e, d: SyntheticExecutor(), RunOptions(parallel="two", dry=True))
    assert code == 2 and "--parallel 'two'" in capsys.readouterr().out
    assert (
        cmd_run(_file(tmp_path), lambda e, d: SyntheticExecutor(), RunOptions(parallel="auto", dry=True)) == 0
    )
    out = capsys.readouterr().out
    assert "parallel: " in out and "planned wall time" in out and "(auto: " in out


def test_a_files_parallel_is_the_default_and_the_flag_overrides_it(tmp_path, capsys):
    """`parallel: auto` in the file plans auto K unless --parallel says otherwise; a value
    that is neither auto nor a count of paths is refused at its line."""
    file = tmp_path / "par.yaml"
    file.write_text(TEXT.replace("FILES", "10MB") + "parallel: auto\n")
    assert cmd_run(file, lambda e, d: SyntheticExecutor(), RunOptions(dry=True)) == 0
    assert "(auto: " in capsys.readouterr().out
    assert cmd_run(file, lambda e, d: SyntheticExecutor(), RunOptions(parallel="1", dry=True)) == 0
    assert "parallel: 1 path(s) at once; planned" in capsys.readouterr().out
    assert parse_experiment(TEXT.replace("FILES", "10MB") + "parallel: 2\n").parallel == "2"
    with pytest.raises(
        ExperimentError,
        match=r"par.yaml:10: parallel: expected auto or a number of paths \(1 to 64\), got 'many'",
    ):
        parse_experiment(TEXT.replace("FILES", "10MB") + "parallel: many\n", "par.yaml")
    # Which trials run is the same at any K: a run started with one K resumes with another.
    assert (
        _exp().matrix_hash()
        == parse_experiment(TEXT.replace("FILES", "10MB") + "parallel: 2\n").matrix_hash()
    )


# -- the dispatcher through forked jobs -----------------------------------------------------


def test_parallel_run_stores_every_units_rows_once_as_the_serial_run(tmp_path):
    file, results = _file(tmp_path, "100MB"), tmp_path / "results"
    code, serial = _run(file, results, SyntheticExecutor())
    assert code == 0
    code, parallel = _run(file, results, SyntheticExecutor(), parallel="3")
    assert code == 0
    rows = load_rows(parallel)[0]
    assert sorted(r["trial_id"] for r in rows) == sorted(r["trial_id"] for r in load_rows(serial)[0])
    assert len(load_history(parallel)[0]) == len(rows)  # no trial twice
    assert {r["parallel"] for r in rows} == {3}
    assert {r["unit"] for r in rows} == {u.id for u in units(_exp("100MB"))}
    manifest = read_manifest(parallel)
    assert manifest["status"] == "complete" and manifest["parallel"] == {"k": 3, "paths": 3}
    assert all(u["calibration"] for u in manifest["units"].values())


class _DiesInJob(SyntheticExecutor):
    """Kills its own forked job (SIGKILL, as the OOM killer would) at one trial."""

    def __init__(self, fatal: str) -> None:
        super().__init__()
        self.fatal, self.parent = fatal, os.getpid()

    def run_trial(self, trial: Trial) -> dict[str, Any]:
        if trial.trial_id == self.fatal and os.getpid() != self.parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().run_trial(trial)


def test_a_killed_job_loses_only_its_unfinished_trials_and_resume_runs_them(tmp_path):
    file, results = _file(tmp_path), tmp_path / "results"
    exp = _exp()
    victim = unit_trials(exp, units(exp)[1])[3]  # c1's fourth trial
    code, run_dir = _run(file, results, _DiesInJob(victim.trial_id), parallel="2")
    assert code == 1
    stored = {r["trial_id"] for r in load_rows(run_dir)[0]}
    c1 = {t.trial_id for t in unit_trials(exp, units(exp)[1])}
    assert {t.trial_id for u in units(exp) if u.condition.id != "c1" for t in unit_trials(exp, u)} <= stored
    assert len(stored & c1) == 3 and victim.trial_id not in stored
    manifest = read_manifest(run_dir)
    assert "parallel process ended" in manifest["units"]["c1u0"]["error"]
    code, _ = _run(file, results, SyntheticExecutor(), parallel="2", resume=run_dir.name)
    assert code == 0
    rows = load_rows(run_dir)[0]
    assert len(rows) == len(load_history(run_dir)[0]) == sum(len(unit_trials(exp, u)) for u in units(exp))


class _BusyInParallel(SyntheticExecutor):
    """Its trials of one condition are CPU-bound when another path runs beside them."""

    def __init__(self, busy_condition: str, share: float) -> None:
        super().__init__()
        self.busy, self.share, self.parent = busy_condition, share, os.getpid()

    def run_trial(self, trial: Trial) -> dict[str, Any]:
        row = super().run_trial(trial)
        beside = os.getpid() != self.parent
        bound = trial.condition.id == self.busy and beside and trial.repetition < self.share * 3
        return row | {"cpu_bound": bound}


def test_a_unit_cpu_bound_beyond_the_threshold_is_measured_again_alone(tmp_path):
    file, results = _file(tmp_path), tmp_path / "results"
    code, run_dir = _run(file, results, _BusyInParallel("c1", share=1 / 3), parallel="2")
    assert code == 0
    latest = load_rows(run_dir)[0]
    c1 = [r for r in latest if r["condition"] == "c1"]
    others = [r for r in latest if r["condition"] != "c1"]
    # c1: a third of its parallel trials CPU-bound (> 10 %): every trial again, alone.
    assert 1 / 3 > CPU_BOUND_RERUN
    assert c1 and all(r["parallel"] == 1 and r["attempt"] == 2 and not r["cpu_bound"] for r in c1)
    assert all(r["parallel"] == 2 and r["attempt"] == 1 for r in others)
    history = load_history(run_dir)[0]
    assert len(history) == len(latest) + len(c1)  # the parallel rows kept, superseded
    units_ = read_manifest(run_dir)["units"]
    assert units_["c1u0"]["parallel"] == {
        "paths": 2,
        "cpu_bound": f"{len(c1) // 3}/{len(c1)}",
        "rerun_alone": True,
    }
    assert units_["c0u0"]["parallel"]["rerun_alone"] is False


def test_a_unit_cpu_bound_within_the_threshold_keeps_its_parallel_rows(tmp_path):
    file, results = _file(tmp_path), tmp_path / "results"
    # No trial of c1 bound: repetition < 0 never holds.
    code, run_dir = _run(file, results, _BusyInParallel("c1", share=0.0), parallel="2")
    assert code == 0
    assert {r["parallel"] for r in load_rows(run_dir)[0]} == {2}
    assert len(load_history(run_dir)[0]) == len(load_rows(run_dir)[0])


class _NoHost(SyntheticExecutor):
    """One condition's path meets a problem of this host (exit 4); the other measures slowly."""

    def condition(self, cond):  # type: ignore[override]
        if cond.id == "c1":
            raise HostProblem("the link backend cannot run here")
        return super().condition(cond)

    def run_trial(self, trial: Trial) -> dict[str, Any]:
        time.sleep(0.05)
        return super().run_trial(trial)


def test_a_host_problem_on_one_path_stops_every_path_with_exit_4(tmp_path, capsys):
    file, results = _file(tmp_path), tmp_path / "results"
    t0 = time.monotonic()
    code, run_dir = _run(file, results, _NoHost(), parallel="2")
    assert code == 4 and "the link backend cannot run here" in capsys.readouterr().out
    assert multiprocessing.active_children() == []  # the other path's job ended, not orphaned
    # The other path stopped too: far fewer than its 24 trials of 0.05 s, and no hang.
    assert time.monotonic() - t0 < 5
    manifest = read_manifest(run_dir)
    assert manifest["status"] == "stopped"
    assert len(load_rows(run_dir)[0]) < 24
