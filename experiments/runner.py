"""Run an experiment's matrix through an Executor, one durable row per trial, resumable.

The network (path, calibration, containers, client tools) sits behind `Executor`; this module
owns ordering, bookkeeping, progress, interruption and the manifest.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import platform
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from quicbed import hostsettings, paths, rowschema, runmanifest
from quicbed.analysis import decisions, loss_response
from quicbed.analysis.expectations import statistic
from quicbed.analysis.overhead import account, summary_lines
from quicbed.errors import HostProblem, PathMismatch
from quicbed.topology.signals import STOP_SIGNALS

from .matrix import Condition, Trial, conditions
from .schema import Experiment
from .shard import Shard, Unit, shard_units, unit_trials, units
from .stopping import Stopper, paired_lines, skipper
from .store import RunStore, StoreError, load_rows, read_manifest

ROW_DEFAULTS = rowschema.RUNNER_DEFAULTS
SUMMARY_METRICS = {
    "conn": "connection_time_ms",
    "ttfb": "ttfb_ms",
    "dl": "download_time_ms",
    "startup": "startup_delay_ms",
    "stall": "stall_total_ms",
}


class TrialError(Exception):
    """A trial failed (timeout, tool error, bad HTTP status); recorded in the row's `error`."""

    def __init__(self, reason: str, row: dict[str, Any] | None = None):
        super().__init__(reason)
        self.reason = reason
        self.row = row or {}  # whatever the tool did measure, kept alongside the error


class Executor(Protocol):
    """The network side; implemented by the topology (and by experiments.synthetic for tests)."""

    def condition(self, cond: Condition) -> AbstractContextManager[dict[str, Any]]:
        """Bring the path up for `cond`, calibrate, yield the calibration dict
        (rtt_ms, passed, forced, ...); raise if calibration fails and not forced; tear down."""
        ...

    def ensure_server(self, name: str) -> None:
        """Start the server for this condition, or restart it if it died; cheap if running."""
        ...

    def run_trial(self, trial: Trial) -> dict[str, Any]:
        """Run one client fetch; return the tool's row, raise TrialError on failure."""
        ...

    def manifest_info(self) -> dict[str, Any]:
        """Versions, kernel, backend, TCP congestion control, QUIC settings..."""
        ...


class RunAborted(StoreError):
    """The run directory failed mid-run (disk full...); what was written is consistent."""


@dataclass
class RunSummary:
    run_id: str
    run_dir: Path
    total: int = 0
    done_before: int = 0
    ran: int = 0
    failed: int = 0
    skipped: list[str] = field(default_factory=list)  # unit ids whose path could not be set up
    interrupted: bool = False
    stopped: str | None = None  # a HostProblem: no later condition could have run either
    # Conditions whose path failed calibration: refused, or measured anyway with --force.
    mismatched: list[str] = field(default_factory=list)
    not_needed: int = 0  # trials of cells already decided (auto repetitions): not run

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.stopped:
            return HostProblem.exit_code
        if self.mismatched:  # as `quicbed calibrate`: forced or not, the path was not the profile's
            return PathMismatch.exit_code
        return 1 if self.failed or self.skipped else 0


def run_experiment(
    exp: Experiment,
    executor: Executor | Dispatcher,
    run_dir: Path | str,
    resume: bool = False,
    progress: bool = True,
    console: Console | None = None,
    retry_failed: bool = False,
    shard: Shard | None = None,
) -> RunSummary:
    """Run every missing trial of `exp` into `run_dir` through `executor` on this machine, or
    through a Dispatcher that sends conditions to other machines (experiments/cluster.py)
    (with retry_failed, every failed one
    too: its new row supersedes the old, which stays in the file); with `shard`, only the
    trials of that shard's units (experiments/shard.py; a resumed shard keeps its own).
    Raises StoreError before any trial if the directory is unusable or locked, and on
    disk-full mid-run (the file stays consistent)."""
    console = console or Console(highlight=False, soft_wrap=True)
    run_dir = Path(run_dir)
    if not resume and (run_dir / rowschema.MANIFEST_FILE).exists():
        raise StoreError(f"{run_dir} already holds a run; use --resume {run_dir.name}")
    with RunStore(run_dir).open(create=not resume) as store:
        manifest = _start_manifest(exp, executor, run_dir, resume, retry_failed, shard)
        store.write_manifest(manifest)
        done, attempts = _done_trials(run_dir, retry_failed)
        held = [(unit, unit_trials(exp, unit)) for unit in _units(exp, manifest)]
        summary = RunSummary(run_dir.name, run_dir, sum(len(ts) for _, ts in held))
        summary.done_before = len(done & {t.trial_id for _, ts in held for t in ts})
        if store.torn_lines:
            console.print(f"note: dropped {store.torn_lines} torn row (crash); it will be rerun")
        retrying = len(attempts.keys() - done)
        if retrying:
            console.print(
                f"note: retrying {retrying} failed trial(s); their rows stay in "
                f"{store.rows_path.name}, superseded by the new attempt"
            )
        work = [
            (unit, todo)
            for unit, ts in held
            if (todo := [(t, attempts.get(t.trial_id, 0) + 1) for t in ts if t.trial_id not in done])
        ]
        dispatcher = executor if isinstance(executor, Dispatcher) else Local(executor)
        # Auto repetitions: the stored rounds first, so a resumed run stops where one run would.
        stopper = Stopper(exp, load_rows(run_dir)[0]) if exp.auto else None
        try:
            with signals_interrupt(), _progress(console, progress) as bar:
                task = bar.add_task("", total=summary.total, completed=summary.done_before)
                session = Session(store, manifest, summary, bar, task, done, stopper)
                dispatcher.run_conditions(work, session)
        except KeyboardInterrupt:
            summary.interrupted = True
        except HostProblem as exc:  # the same for every condition: stop, do not try each one
            summary.stopped = str(exc)
            manifest["stopped"] = summary.stopped
        except StoreError as exc:  # e.g. disk full: rows so far are intact, the run can resume
            raise RunAborted(str(exc)) from None
        _finish(store, manifest, summary, console, exp)
    return summary


def _done_trials(run_dir: Path, retry_failed: bool) -> tuple[set[str], dict[str, int]]:
    """The trials not to run again, and each recorded trial's latest attempt number."""
    latest = load_rows(run_dir)[0]  # one row per trial: its last attempt
    done = {r["trial_id"] for r in latest if not (retry_failed and r.get("error") is not None)}
    # Rows from before attempts were counted are first attempts.
    return done, {r["trial_id"]: int(r.get("attempt") or 1) for r in latest}


Work = list[tuple[Unit, list[tuple[Trial, int]]]]  # units and their (trial, attempt)s


class ConditionSkipped(Exception):
    """The unit's path could not be set up or calibrated; resume retries it."""


@dataclass
class Session:
    """The head's side of one session: every row, calibration and skip lands here, whichever
    machine measured it."""

    store: RunStore
    manifest: dict[str, Any]
    summary: RunSummary
    bar: Progress
    task: Any
    stored: set[str]  # trial ids with a row that counts: a second one is dropped
    stopper: Stopper | None = None  # auto repetitions: which trials are no longer needed
    not_run: set[str] = field(default_factory=set)  # trial ids not needed, so far

    def started(self, unit: Unit) -> None:
        self.bar.update(self.task, description=f"{unit.id} {unit.label}")

    def calibrated(self, unit_id: str, calib: dict[str, Any], ran_on: dict[str, Any]) -> None:
        """A unit's path calibrated: the unit's own record, and its condition's (the
        analysis reads a condition's calibration: the last of its units to calibrate)."""
        if calib.get("forced"):
            self.summary.mismatched.append(unit_id)
        entry = self.manifest["units"][unit_id]
        entry.pop("error", None)
        entry.update(calibration=calib, ran_on=ran_on)
        cond = self.manifest["conditions"][entry["condition"]]
        cond.pop("error", None)
        cond.update(calibration=calib, ran_on=ran_on)
        self.store.write_manifest(self.manifest)

    def record(self, row: dict[str, Any]) -> bool:
        """Store a trial's row (append + fsync) unless that trial already has one."""
        if row["trial_id"] in self.stored:
            return False
        self.store.append(row)
        self.stored.add(row["trial_id"])
        if self.stopper:
            self.stopper.add(row)
        self.summary.ran += 1
        self.summary.failed += row["error"] is not None
        self.bar.advance(self.task)
        return True

    def decided_without(self, trial_id: str) -> None:
        """A trial not run because its cell was decided (here, or on a parallel path)."""
        self.not_run.add(trial_id)
        self.summary.not_needed += 1
        self.bar.advance(self.task)

    def skipped(self, unit: Unit, left: int, reason: str) -> None:
        if reason.startswith(f"{PathMismatch.__name__}:"):
            self.summary.mismatched.append(unit.id)
        self.manifest["units"][unit.id]["error"] = reason
        self.manifest["conditions"][unit.condition.id]["error"] = f"{unit.id}: {reason}"
        self.summary.skipped.append(unit.id)
        self.bar.console.print(f"{unit.id} {unit.label}: skipped: {reason}", style="red", markup=False)
        self.bar.advance(self.task, left)
        self.store.write_manifest(self.manifest)

    def finished(self, unit: Unit) -> None:
        self.store.write_manifest(self.manifest)
        self.bar.console.print(condition_summary(unit, load_rows(self.store.dir)[0]), markup=False)


@runtime_checkable
class Dispatcher(Protocol):
    """Where units run: this machine (`Local`) or a cluster (experiments/cluster.py)."""

    def run_conditions(self, work: Work, session: Session) -> None: ...

    def manifest_info(self) -> dict[str, Any]: ...


@dataclass
class Local:
    executor: Executor

    def manifest_info(self) -> dict[str, Any]:
        return self.executor.manifest_info()

    def run_conditions(self, work: Work, session: Session) -> None:
        # This machine now: a resumed run may be finished elsewhere.
        run_id, host, info = session.manifest["run_id"], host_facts(), _safe(self.manifest_info)

        def calibrated(unit: Unit, calib: dict[str, Any]) -> None:
            session.calibrated(unit.id, calib, ran_on(host, info, calib))

        # One path per condition here: its units run one after another on it (a cluster gives
        # each unit a path of its own; on one machine that would only add set-ups).
        for group in _by_condition(work):
            session.started(group[0][0])
            try:
                measure_units(
                    group,
                    self.executor,
                    run_id,
                    calibrated,
                    session.record,
                    session.finished,
                    skipper(session.stopper, lambda trial: session.decided_without(trial.trial_id)),
                )
            except ConditionSkipped as exc:
                for unit, todo in group:
                    session.skipped(unit, len(todo), str(exc))


def _by_condition(work: Work) -> list[Work]:
    """Consecutive units of one condition together."""
    groups: list[Work] = []
    for unit, todo in work:
        if groups and groups[-1][0][0].condition.id == unit.condition.id:
            groups[-1].append((unit, todo))
        else:
            groups.append([(unit, todo)])
    return groups


def measure_units(
    work: Work,
    executor: Executor,
    run_id: str,
    on_calibrated: Callable[[Unit, dict[str, Any]], None],
    on_row: Callable[[dict[str, Any]], Any],
    on_done: Callable[[Unit], None] = lambda _unit: None,
    not_needed: Callable[[Trial], bool] = lambda _trial: False,
) -> None:
    """Bring up the path of these units' condition (one condition) and calibrate it
    (ConditionSkipped if that fails), then run each unit's trials, handing every row to
    `on_row` as it is measured, unless `not_needed` says its cell is decided (it is asked
    after the rows before it were handed on). The same on the head of a local run and on a
    cluster's worker."""
    cond = work[0][0].condition
    assert all(unit.condition.id == cond.id for unit, _ in work), "one condition's units"
    with contextlib.ExitStack() as stack:
        try:
            calib = stack.enter_context(executor.condition(cond)) or {}
        except HostProblem:
            raise
        except Exception as exc:  # calibration mismatch, path failure: skip, resume retries it
            raise ConditionSkipped(f"{type(exc).__name__}: {exc}") from exc
        for unit, _ in work:
            on_calibrated(unit, calib)
        for unit, todo in work:
            for trial, attempt in todo:
                if not not_needed(trial):
                    on_row(_run_trial(trial, executor, calib, run_id, attempt, unit.id))
            on_done(unit)


def host_facts() -> dict[str, Any]:
    """This machine, as a run's manifest and each condition's `ran_on` record it."""
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
    }


def ran_on(host: dict[str, Any], executor_info: dict[str, Any], calib: dict[str, Any]) -> dict[str, Any]:
    """Which host measured a condition: the machine, its link backend and the image ids."""
    images = {"client": executor_info.get("client_image"), **(executor_info.get("server_images") or {})}
    backend = runmanifest.calibration_record(calib).get("backend")
    return {
        **host,
        "link_backend": backend or executor_info.get("backend"),
        "images": {k: v.get("id") if isinstance(v, dict) else v for k, v in images.items() if v},
        "git_commit": git_info()["commit"],
        # The host's own settings the testbed changed (quicbed/hostsettings.py; clean restores).
        "host_settings_changed": hostsettings.changed(),
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def _run_trial(
    trial: Trial, executor: Executor, calib: dict, run_id: str, attempt: int = 1, unit: str | None = None
) -> dict[str, Any]:
    started, t0 = _now(), time.monotonic()
    try:
        executor.ensure_server(trial.server)
        tool_row, error = executor.run_trial(trial), None
    except TrialError as exc:
        tool_row, error = exc.row, exc.reason
    except HostProblem:  # Docker stopped answering: no later trial could run either
        raise
    except Exception as exc:  # an executor bug must not lose the rest of the run
        tool_row, error = {}, f"{type(exc).__name__}: {exc}"
    # A tool does not say which trial or run it was, nor where the run's files lie: an error
    # row, its claims dropped (the executor's own keys it checks itself: rowschema.tool_rows).
    owned = rowschema.owned_keys(tool_row, rowschema.RUNNER_OWNED)
    owned += rowschema.misplaced_files(tool_row, trial.trial_id)
    if owned:
        tool_row = {k: v for k, v in tool_row.items() if k not in owned}
        error = error or rowschema.owned_key_error(owned)
    # A capture's own start and stop (tcpdump, the server's qlog) are the trial's bookkeeping,
    # not its time: the executor says how long they took (capture_s) and wall_s leaves it out.
    capture_s = tool_row.get("capture_s") if tool_row else None
    wall = time.monotonic() - t0 - (capture_s if isinstance(capture_s, int | float) else 0.0)
    timing = {"started_at": started, "wall_s": round(wall, 3), "attempt": attempt}
    row = make_row(run_id, trial, tool_row, calib, unit) | timing
    # The tools write "" for success; rows say None, so one test (`error is None`) holds.
    row["error"] = error or row.get("error") or None
    # Whether the sender's rate is one a loss-responsive congestion control could reach here.
    return row | loss_response.runner_columns(row, calib)


def make_row(
    run_id: str, trial: Trial, tool_row: dict[str, Any], calib: dict[str, Any], unit: str | None = None
) -> dict[str, Any]:
    """Axes + the tool's row + calibration summary. Axes win; a tool value that disagrees with
    an axis (e.g. its own `protocol` spelling) is kept as tool_<key>."""
    axes = trial_axes(run_id, trial, unit)
    clashes = {f"tool_{k}": v for k, v in tool_row.items() if k in axes and v != axes[k]}
    calib_summary = {
        "calib_rtt_ms": calib.get("rtt_ms"),
        "calib_passed": calib.get("passed"),
        "calib_forced": bool(calib.get("forced", False)),
    }
    row = axes | {k: v for k, v in tool_row.items() if k not in axes} | clashes | calib_summary
    return row | {k: v for k, v in ROW_DEFAULTS.items() if k not in row}


def trial_axes(run_id: str, trial: Trial, unit: str | None = None) -> dict[str, Any]:
    cond, link = trial.condition, trial.condition.link
    return {
        "run_id": run_id,
        "trial_id": trial.trial_id,
        "condition": cond.id,
        "condition_label": cond.label,
        "unit": unit,  # the part of the condition that ran on one path (experiments/shard.py)
        "profile": cond.profile,
        "rtt_ms": link.rtt_ms,
        "rate_down_mbit": link.down.rate_mbit,
        "rate_up_mbit": link.up.rate_mbit,
        "loss_pct": link.down.expected_loss_pct,  # a Gilbert-Elliott model as its mean
        "loss_up_pct": link.up.expected_loss_pct,
        "jitter_ms": link.down.jitter_ms,
        "queue_packets": link.down.queue_packets,
        **{f"param_{k}": v for k, v in cond.params.items()},
        "server": trial.server,
        "client": trial.client.label,
        "tool": trial.client.tool,
        "protocol": trial.client.protocol,
        "workload": trial.workload.kind,
        "object": trial.object,
        "repetition": trial.repetition,
    }


def condition_summary(part: Condition | Unit, rows: list[dict[str, Any]]) -> str:
    """One line: medians per protocol, e.g. `c0 india: quic conn 81 ttfb 162 dl 170 ms | ...`
    (of a condition, or of one unit: `c0u1 india [caddy: 10MB]: ...`)."""
    if isinstance(part, Unit):
        mine = [r for r in rows if r.get("unit") == part.id]
    else:
        mine = [r for r in rows if r.get("condition") == part.id]
    cond = part
    parts = []
    for proto in sorted({r["protocol"] for r in mine}):
        ok = [r for r in mine if r["protocol"] == proto and r.get("error") is None]
        # Only what the rows measured: a playback has no download time, but a startup.
        medians = {k: statistic([r.get(c) for r in ok], "median") for k, c in SUMMARY_METRICS.items()}
        stats = " ".join(f"{k} {v:.0f}" for k, v in medians.items() if not math.isnan(v))
        parts.append(f"{proto} {stats} ms" if ok else f"{proto} no successful trials")
    failed = sum(r.get("error") is not None for r in mine)
    tail = f" | {failed} failed" if failed else ""
    return f"{cond.id} {cond.label}: " + " | ".join(parts) + tail


def _finish(store: RunStore, manifest: dict, summary: RunSummary, console: Console, exp: Experiment) -> None:
    status = (
        "interrupted"
        if summary.interrupted
        else "stopped"
        if summary.stopped
        else "incomplete"
        if summary.skipped
        else "complete"
    )
    manifest.update(status=status, ended_at=_now())
    manifest["sessions"][-1].update(status=status, ended_at=manifest["ended_at"], ran=summary.ran)
    rows = load_rows(store.dir)[0]
    if exp.decide:
        manifest["decisions"] = decisions_of(exp, rows, _units(exp, manifest))
    store.write_manifest(manifest)
    store.write_parquet()
    done = summary.done_before + summary.ran
    for line in summary_lines(account(rows, manifest)):
        console.print(line, markup=False)
    for entry in manifest.get("decisions", []):
        console.print(decisions.summary_line(entry), markup=False)
    not_needed = f", {summary.not_needed} not needed (decided)" if summary.not_needed else ""
    console.print(
        f"{summary.run_id}: {done}/{summary.total} trials{not_needed}, {summary.failed} failed "
        f"this session, {len(summary.skipped)} units skipped -> {store.dir}",
        markup=False,
    )


def decisions_of(exp: Experiment, rows: list[dict[str, Any]], held: list[Unit]) -> list[dict[str, Any]]:
    """Every decide line's verdict in every cell of the held units, from the rows in round
    order."""
    alpha = exp.auto.alpha if exp.auto else decisions.DEFAULT_ALPHA
    per = exp.auto.per if exp.auto else decisions.PER_CELL
    lines = paired_lines(exp.decide, (t for unit in held for t in unit_trials(exp, unit)), per)
    by_cell: dict[decisions.Cell, list[dict[str, Any]]] = {}
    for r in rows:
        by_cell.setdefault(decisions.Cell.of(r).decided_in(per), []).append(r)
    verdicts = []
    for cell, mine in lines.items():
        if mine:
            verdicts += decisions.cell_verdicts(mine, by_cell.get(cell, []), alpha, [cell], per=per)

    def ran(decide: decisions.Decide) -> dict[decisions.Cell, int]:
        return decisions.ran_rounds((r for r in rows if decide.judges(str(r.get("object")))), per)

    return decisions.manifest_entries(verdicts, exp.auto, alpha, ran)


def _units(exp: Experiment, manifest: dict[str, Any]) -> list[Unit]:
    """The units this run holds: all of them, or its shard's, as its manifest recorded them
    (a shard started before units holds whole conditions: all their units)."""
    shard, every = manifest.get("shard"), units(exp)
    if not shard:
        return every
    if "units" in shard:
        return [u for u in every if u.id in set(shard["units"])]
    return [u for u in every if u.condition.id in set(shard["conditions"])]


def _unit_entries(held: list[Unit]) -> dict[str, runmanifest.UnitEntry]:
    return {
        u.id: {
            "condition": u.condition.id,
            "cells": [list(c) for c in u.cells],
            "label": u.label,
            "calibration": None,
        }
        for u in held
    }


def _start_manifest(
    exp: Experiment,
    executor: Executor | Dispatcher,
    run_dir: Path,
    resume: bool,
    retry_failed: bool = False,
    shard: Shard | None = None,
) -> dict:
    # Each session records its own commit: a resumed run may have been resumed on other code.
    session: runmanifest.Session = {
        "started_at": _now(),
        "pid": os.getpid(),
        "status": "running",
        "git": git_info(),
    }
    if retry_failed:
        session["retry_failed"] = True
    session["capture"] = list(exp.capture)  # a resume may capture otherwise
    if resume:
        manifest = read_manifest(run_dir)
        if manifest.get("matrix_hash") != exp.matrix_hash():
            raise StoreError(
                f"{run_dir.name} was started from a different experiment (matrix "
                "changed); start a new run instead of resuming"
            )
        recorded = manifest.get("shard")
        if shard and (not recorded or (recorded["index"], recorded["count"]) != (shard.index, shard.count)):
            held = f"shard {recorded['index']}/{recorded['count']}" if recorded else "a whole run"
            raise StoreError(
                f"{run_dir.name} is not shard {shard} (it holds {held}); " "resume it without --shard"
            )
        _resume_units(exp, manifest)
        manifest["sessions"].append(session)
        manifest["status"] = "running"
        return manifest
    mine = shard_units(exp, shard) if shard else units(exp)
    fresh: runmanifest.Manifest = {
        "manifest_version": runmanifest.MANIFEST_VERSION,
        "run_id": run_dir.name,
        "experiment": exp.name,
        "file": exp.file,
        "file_sha256": hashlib.sha256(exp.text.encode()).hexdigest(),
        "experiment_text": exp.text,
        "matrix_hash": exp.matrix_hash(),
        "quick": exp.quick,
        "capture": list(exp.capture),  # per trial beside the rows (trials/); per session too
        "seed": exp.seed,
        "order": exp.order,
        "trials_total": sum(len(unit_trials(exp, u)) for u in mine),
        "git": session["git"],
        # Per condition, `ran_on` has the whole host_facts(); here only what runs compare on
        # (analysis.manifest: a hostname would keep identical machines' runs apart).
        "host": {k: v for k, v in host_facts().items() if k in ("kernel", "machine", "python")},
        "versions": _safe(paths.read_versions),
        "executor": _safe(executor.manifest_info),
        "started_at": session["started_at"],
        "status": "running",
        "sessions": [session],
        "conditions": {
            c.id: {
                "label": c.label,
                "profile": c.profile,
                "link": c.link.to_dict(),
                "overrides": c.overrides,
                "params": c.params,
                "calibration": None,
            }
            for c in conditions(exp)
        },
        # Each unit: its condition, its (server, object) cells, its own calibration and host.
        "units": _unit_entries(mine),
    }
    if shard:
        fresh["shard"] = {
            **shard.to_dict(),
            "units": [u.id for u in mine],
            "conditions": sorted({u.condition.id for u in mine}, key=lambda c: int(c[1:])),
            "trials_all": sum(len(unit_trials(exp, u)) for u in units(exp)),
        }
    return dict(fresh)


def _resume_units(exp: Experiment, manifest: dict[str, Any]) -> None:
    """A run started before units (or by code that split its conditions otherwise) resumes
    with this code's units: rows already stored keep their trial ids (which name no unit), and
    the units still to run get entries. A shard's units must be this code's: its plan is."""
    current = {u.id: u for u in units(exp)}
    shard = manifest.get("shard") or {}
    stale = [uid for uid in shard.get("units", []) if uid not in current]
    if stale:
        raise StoreError(
            f"{manifest['run_id']} is a shard of units this code does not make ({', '.join(stale[:3])}"
            "...); resume it with the code that started it (its manifest's git commit)"
        )
    wanted = _unit_entries(_units(exp, manifest))
    recorded = manifest.get("units") or {}
    if any(
        uid not in wanted or entry.get("cells") != wanted[uid]["cells"] for uid, entry in recorded.items()
    ):
        manifest["units_earlier"], recorded = recorded, {}  # another split's calibrations, kept
    manifest["units"] = wanted | recorded  # a merged run's missing shards: their units added


def git_info() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(paths.REPO), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()

    try:
        # Results written inside the checkout must not make every run look dirty.
        status = git("status", "--porcelain", "--", ".", ":(exclude)results")
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _safe(fn) -> Any:
    try:
        return fn()
    except Exception as exc:  # the manifest records the failure instead of aborting the run
        return {"error": f"{type(exc).__name__}: {exc}"}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class _Stopping:
    depth: int = 0  # nested signals_interrupt() blocks (reproduce around run)
    stopping: bool = False  # the first signal came; the unwinding must not be cut short


_STOP = _Stopping()


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGINT, SIGTERM (a CI cancel, `timeout`) and SIGHUP (a closed terminal) unwind like
    Ctrl-C, even if inherited as ignored, so the executor's context managers tear the path down
    and the run is marked interrupted. Only the first signal does: a second one (Ctrl-C pressed
    twice, a terminal's SIGINT to the whole group) would cut the teardown short and leave the
    path behind, so until the outermost block ends it is only acknowledged."""

    def handler(signum: int, frame: object) -> None:
        if _STOP.stopping:
            os.write(
                2, b"quicbed: already stopping, tearing down (to force: kill -9, then " b"quicbed clean)\n"
            )
            return
        _STOP.stopping = True
        raise KeyboardInterrupt  # not an Exception: per-trial error handling must not catch it

    try:
        previous = [signal.signal(s, handler) for s in STOP_SIGNALS]
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    _STOP.depth += 1
    try:
        yield
    finally:
        for sig, old in zip(STOP_SIGNALS, previous, strict=True):
            signal.signal(sig, old)
        _STOP.depth -= 1
        if not _STOP.depth:
            _STOP.stopping = False


def _progress(console: Console, enabled: bool) -> AbstractContextManager[Progress]:
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
    )
    # A disabled bar still prints a newline when stopped; don't start it at all.
    return bar if enabled else contextlib.nullcontext(bar)
