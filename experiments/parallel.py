"""`quicbed run FILE --parallel K`: K paths at once on this machine.

Each job (a condition's units, or one unit when there are fewer conditions than K) runs in a
process of its own, forked from the run: its own path, namespaces and containers (every
Testbed names its own; labs run side by side the same way), its own calibration, taken while
the other paths run their trials (no lock around it: calibration proves the path under the
load it is measured under). Rows, calibrations and skips come home through a pipe per job and land
through `runner.Session` (append + fsync), as a Ray worker's do.

A unit whose parallel trials were CPU-bound (`cpu_bound`) in more than CPU_BOUND_RERUN of them
is measured again alone (K = 1) after the parallel phase: its new rows supersede the parallel
ones (attempt + 1; `rows.jsonl` keeps both), carry `parallel: 1`, and the manifest's unit says
why (`units.<id>.parallel`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing import connection
from typing import Any

from quicbed.errors import HostProblem, InputError

from .plan import SETUP_S, cpu_per_path, hms, paths_fit
from .runner import (
    ConditionSkipped,
    Executor,
    Session,
    Work,
    host_facts,
    measure_units,
    ran_on,
)
from .schema import Experiment
from .shard import Unit, unit_seconds, units
from .stopping import Stopper, skipper

CPU_BOUND_RERUN = 0.10  # a unit with more of its parallel trials CPU-bound is measured alone

POLL_S = 0.2
JOIN_S = 30.0  # a job that closed its pipe has torn its path down: it exits at once
TEARDOWN_WAIT_S = 180.0  # an interrupted job's teardown (path, containers) gets this long

Job = list[tuple[Unit, list[Any]]]  # Work of one path


def parse_parallel(text: str) -> int | None:
    """`--parallel K` or `auto` (None: decided from the workload and the cores)."""
    if text == "auto":
        return None
    try:
        k = int(text)
    except ValueError:
        k = 0
    if not 1 <= k <= 64:
        raise InputError(f"--parallel {text!r}: expected a number of paths (1 to 64) or auto")
    return k


def auto_parallel(exp: Experiment, cores: int | None = None) -> int:
    """K from the workload's measured CPU per trial and the host's cores: as many paths as
    fit in CPU_BUDGET of the cores, at most one per unit and at most one per core (two paths'
    calibrations on one core would slow each other's probes)."""
    return min(paths_fit(exp, cores or os.cpu_count() or 1), len(units(exp)))


def own_log_scope(executor: Executor, job: Job, condition_units: int) -> None:
    """A condition split over paths that run at once (here, or on one Ray worker): each path's
    servers log apart, in logs/<its first unit>/ (the executor's set_log_name); the path's
    namespaces and containers are its own already (every Testbed names its own)."""
    name_logs = getattr(executor, "set_log_name", None)
    if name_logs and len(job) < condition_units:
        name_logs(job[0][0].id)


def jobs(work: Work, k: int, exp: Experiment) -> list[Job]:
    """Which units run together on one path: a condition's units share one (one set-up), unless
    there are fewer conditions than K, then the largest condition's units are split off to
    paths of their own until K paths have work. Longest first (as shard.assign)."""
    groups: list[Job] = []
    for unit, todo in work:
        if groups and groups[-1][0][0].condition.id == unit.condition.id:
            groups[-1].append((unit, todo))
        else:
            groups.append([(unit, todo)])
    while len(groups) < k:
        splittable = [g for g in groups if len(g) > 1]
        if not splittable:
            break
        biggest = max(splittable, key=lambda g: job_seconds(exp, g))
        groups.remove(biggest)
        groups += [[part] for part in biggest]
    return sorted(groups, key=lambda g: -job_seconds(exp, g))


def job_seconds(exp: Experiment, job: Job) -> float:
    return SETUP_S + sum(unit_seconds(exp, unit) - SETUP_S for unit, _ in job)


def planned_wall(exp: Experiment, k: int) -> float:
    """The dry run's wall time with K paths: the jobs of a fresh run, longest first, each to
    the path that frees first."""
    every: Work = [(u, []) for u in units(exp)]
    slots = [0.0] * k
    for job in jobs(every, k, exp):
        i = min(range(k), key=lambda s: (slots[s], s))
        slots[i] += job_seconds(exp, job)
    return max(slots)


@dataclass
class _Running:
    process: Any  # multiprocessing.Process
    reader: Any  # its pipe's end here: every message, then EOF when it ends
    job: Job
    left: dict[str, int] = field(default_factory=dict)  # unit id -> trials still to arrive


@dataclass
class ParallelLocal:
    """runner.Dispatcher: K forked processes on this machine, one path each."""

    executor: Executor
    exp: Experiment
    k: int
    rerun_threshold: float = CPU_BOUND_RERUN

    def manifest_info(self) -> dict[str, Any]:
        info = self.executor.manifest_info()
        info["parallel"] = {"k": self.k, "cpu_bound_rerun_above": self.rerun_threshold}
        return info

    def run_conditions(self, work: Work, session: Session) -> None:
        prepare = getattr(self.executor, "prepare", None)
        if prepare:  # once, before the fork: shared files (keys, content) are not raced for
            prepare()
        planned = jobs(work, self.k, self.exp)
        width = min(self.k, len(planned))
        session.manifest.setdefault("parallel", {}).update(k=self.k, paths=width)
        session.bar.console.print(f"parallel: {len(planned)} path(s) of work, {width} at once", markup=False)
        self._run_jobs(planned, width, session)
        self._rerun_cpu_bound(work, width, session)

    # -- the parallel phase --------------------------------------------------------------
    def _run_jobs(self, planned: list[Job], width: int, session: Session) -> None:
        ctx = multiprocessing.get_context("fork")
        waiting, running = list(planned), list[_Running]()
        units_by_id = {u.id: u for job in planned for u, _ in job}
        try:
            while waiting or running:
                while waiting and len(running) < width:
                    job = waiting.pop(0)
                    reader, writer = ctx.Pipe(duplex=False)
                    proc = ctx.Process(target=_job_main, args=(self.executor, job, session, writer, width))
                    proc.start()
                    writer.close()  # the job's alone: its end is EOF here, and no later job holds it
                    running.append(_Running(proc, reader, job, {u.id: len(todo) for u, todo in job}))
                    names = " + ".join(r.job[0][0].id for r in running)
                    session.bar.update(session.task, description=names)
                self._receive(running, session, units_by_id)
        except (KeyboardInterrupt, HostProblem):  # a host problem stops every path, as Ctrl-C
            self._stop(running, session, units_by_id)
            raise

    def _receive(
        self, running: list[_Running], session: Session, units_by_id: dict[str, Unit], stopping: bool = False
    ) -> None:
        """Whatever the jobs sent within POLL_S; a job whose pipe ended has ended (its trials
        left are skipped, unless the run is stopping: then they are the resume's)."""
        ready = connection.wait([r.reader for r in running], timeout=POLL_S)
        for run in [r for r in running if r.reader in ready]:
            try:
                kind, payload = run.reader.recv()
            except EOFError:
                _join_or_kill(run.process)
                run.reader.close()
                running.remove(run)
                if not stopping:
                    self._ended(run, session)
                continue
            _handle(kind, payload, run, session, units_by_id)

    @staticmethod
    def _ended(run: _Running, session: Session) -> None:
        """A job whose process died without saying why (killed): its units' trials left are
        skipped for this session; --resume runs them."""
        code = run.process.exitcode
        for unit, _ in run.job:
            left = run.left.get(unit.id, 0)
            if left and unit.id not in session.summary.skipped:
                session.skipped(unit, left, f"its parallel process ended (exit {code}); {left} trial(s) left")

    def _stop(self, running: list[_Running], session: Session, units_by_id: dict[str, Unit]) -> None:
        """Ctrl-C: every job unwinds (its path torn down) and the rows so far are kept. A
        terminal's Ctrl-C reaches the jobs too; a SIGTERM to the run alone is passed on."""
        for run in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(run.process.pid, signal.SIGINT)
        deadline = time.monotonic() + TEARDOWN_WAIT_S
        while running and time.monotonic() < deadline:
            with contextlib.suppress(KeyboardInterrupt, HostProblem):  # already stopping
                self._receive(running, session, units_by_id, stopping=True)
        for run in running:  # past the deadline: its helpers are marked, quicbed clean finds them
            run.process.kill()
            run.process.join(timeout=JOIN_S)

    # -- after it: CPU-bound units alone ---------------------------------------------------
    def _rerun_cpu_bound(self, work: Work, width: int, session: Session) -> None:
        if width < 2:
            return
        from .store import load_rows

        latest = {r["trial_id"]: r for r in load_rows(session.store.dir)[0]}
        rerun: Work = []
        for unit, todo in work:
            rows = [latest[t.trial_id] for t, _ in todo if t.trial_id in latest]
            parallel = [r for r in rows if (r.get("parallel") or 1) > 1]
            bound = sum(bool(r.get("cpu_bound")) for r in parallel)
            if not parallel:
                continue
            share = bound / len(parallel)
            verdict = share > self.rerun_threshold
            session.manifest["units"][unit.id]["parallel"] = {
                "paths": width,
                "cpu_bound": f"{bound}/{len(parallel)}",
                "rerun_alone": verdict,
            }
            if verdict:  # a trial the unit lost (no row) keeps the attempt it had
                again = [
                    (t, int((latest.get(t.trial_id) or {}).get("attempt") or a - 1) + 1) for t, a in todo
                ]
                rerun.append((unit, again))
        session.store.write_manifest(session.manifest)
        if not rerun:
            return
        session.bar.console.print(
            f"parallel: {len(rerun)} unit(s) CPU-bound in over {self.rerun_threshold:.0%} of their "
            f"trials, measured again alone: {', '.join(u.id for u, _ in rerun)}",
            markup=False,
        )
        _run_alone(self.executor, rerun, session, latest.values())


def _join_or_kill(process: multiprocessing.process.BaseProcess) -> None:
    """A job whose pipe ended is exiting; one still there JOIN_S later is hung, and killed
    (what it left is marked: quicbed clean finds it)."""
    process.join(timeout=JOIN_S)
    if process.is_alive():
        process.kill()
        process.join(timeout=JOIN_S)


def _handle(kind: str, payload: Any, run: _Running, session: Session, units_by_id: dict[str, Unit]) -> None:
    if kind == "row":
        if session.record(payload) and payload["unit"] in run.left:
            run.left[payload["unit"]] -= 1
    elif kind == "not_needed":
        unit_id, trial_id = payload
        session.decided_without(trial_id)
        if unit_id in run.left:
            run.left[unit_id] -= 1
    elif kind == "calibrated":
        unit_id, calib, where = payload
        session.calibrated(unit_id, calib, where)
    elif kind == "skipped":
        unit_id, reason = payload
        session.skipped(units_by_id[unit_id], run.left.pop(unit_id, 0), reason)
    elif kind == "done":
        session.finished(units_by_id[payload])
    elif kind == "host_problem":
        raise HostProblem(payload)


def _run_alone(executor: Executor, rerun: Work, session: Session, stored: Iterable[dict[str, Any]]) -> None:
    """K = 1 in this process: each unit's path, its trials again (superseding rows).
    `stored`: the run's rows so far, the latest of each trial."""
    run_id, host, info = session.manifest["run_id"], host_facts(), executor.manifest_info()

    again_ids = {t.trial_id for _, todo in rerun for t, _ in todo}
    superseded = again_ids & session.stored
    # Auto repetitions: the units' cells decided afresh by their rows measured alone (and the
    # rows of earlier sessions). A decision takes the first round its test crosses at, so a
    # parallel row in a round after it, left standing, does not change it.
    fresh = None
    if session.stopper is not None:
        fresh = Stopper(session.stopper.exp, [r for r in stored if r["trial_id"] not in again_ids])

    def record(row: dict[str, Any]) -> None:
        trial_id = row["trial_id"]
        again = trial_id in superseded
        session.stored.discard(trial_id)  # this attempt supersedes the parallel one
        if fresh:
            fresh.add(row)
        if trial_id in session.not_run:  # not needed on its parallel path, needed alone
            session.not_run.discard(trial_id)
            session.summary.not_needed -= 1
        if session.record(row | {"parallel": 1}) and again:
            session.summary.ran -= 1  # the trial was counted when it first ran this session

    session.bar.update(session.task, total=session.summary.total + len(superseded))

    for unit, todo in rerun:
        session.started(unit)
        try:
            measure_units(
                [(unit, todo)],
                executor,
                run_id,
                lambda u, calib: session.calibrated(u.id, calib, ran_on(host, info, calib)),
                record,
                session.finished,
                skipper(fresh, lambda trial: None),  # counted when first not needed
            )
        except ConditionSkipped as exc:
            session.skipped(unit, 0, f"rerun alone: {exc}")


def _job_main(executor: Executor, job: Job, session: Session, home: Any, width: int) -> None:
    """In the forked process: one path, its units' trials, every message home through `home`
    (a pipe: each send is written before the next trial, so a killed job loses no row).
    A Ctrl-C unwinds measure_units (the path is torn down) and ends the process with 130."""
    from quicbed.topology.marker import kill_own_helpers

    # A progress bar in a terminal sends the run's stdout and stderr through its own console,
    # whose lock its refresh thread (not forked) may have held: the job writes to the files.
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__

    def put(kind: str, payload: Any) -> None:
        home.send((kind, payload))

    run_id, host, info = session.manifest["run_id"], host_facts(), executor.manifest_info()
    own_log_scope(executor, job, len(_condition_units(session, job[0][0])))
    # Auto repetitions: the fork's copy of the run's Stopper (seeded with the stored rows)
    # decides this job's cells, which are whole (shard.cells_of) and no other job's.
    stopper = session.stopper

    def measured(row: dict[str, Any]) -> None:
        if stopper:
            stopper.add(row)
        put("row", row | {"parallel": width})

    def tell_not_needed(trial: Any) -> None:
        put("not_needed", (next(u.id for u, _ in job if u.holds(trial)), trial.trial_id))

    code = 0
    try:
        measure_units(
            job,
            executor,
            run_id,
            lambda u, calib: put("calibrated", (u.id, calib, ran_on(host, info, calib))),
            measured,
            lambda u: put("done", u.id),
            skipper(stopper, tell_not_needed),
        )
    except ConditionSkipped as exc:
        for unit, _ in job:
            put("skipped", (unit.id, str(exc)))
    except HostProblem as exc:
        put("host_problem", str(exc))
        code = HostProblem.exit_code
    except KeyboardInterrupt:
        code = 130
    finally:
        kill_own_helpers()  # a helper its teardown missed must not outlive the job
        home.close()
    os._exit(code)


def _condition_units(session: Session, unit: Unit) -> list[str]:
    cond = unit.condition.id
    return [uid for uid, entry in session.manifest["units"].items() if entry["condition"] == cond]


def parallel_plan(exp: Experiment, k: int, auto: bool) -> str:
    """The dry run's line for --parallel: K (and why, for auto) and the planned wall time."""
    why = (
        f" (auto: {cpu_per_path(exp):.2f} cores a path, {os.cpu_count()} cores here, "
        f"{len(units(exp))} unit(s))"
        if auto
        else ""
    )
    one, wall = planned_wall(exp, 1), planned_wall(exp, k)
    return f"parallel: {k} path(s) at once{why}; planned wall time {hms(wall)} (one path: {hms(one)})"
