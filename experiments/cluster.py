"""`quicbed run FILE --ray ADDRESS`: an experiment's units on a Ray cluster.

Each unit (part of a condition: its path, its own calibration and its trials; shard.py) is one
Ray task holding the custom resource `quicbed_path: 1`, so a machine that offers K runs K paths
at once (K = 1: one at a time). Units side by side on one machine keep apart as --parallel's
paths do (parallel.py): namespaces and containers are each Testbed's own, the servers' logs go
to logs/<unit>/ when a condition is split (parallel.own_log_scope), and the files every path
shares (keys, content) are made under a lock of the machine. A workload whose path and trial
need more than one of a 2-core worker's paths' CPU (plan.WORKER_CORES; plan.paths_fit:
web with Chromium, 1.65 cores) holds all of a worker's paths (`task_paths`), so it runs alone:
the rule chosen over --parallel's "rerun a CPU-bound unit alone", which a cluster could only
follow by running the unit twice. Rows of a worker offering more than one path say `parallel`
(how many paths the worker ran at most beside this unit's, itself included). The
worker measures through its own executor (`runner.measure_units`, as a local run does) and
hands each row, as it is measured, to a `Sink` actor on the head's node; the head drains it into
the run's store (append + fsync, one row per trial: `runner.Session.record` drops a second).
The sink also tells a retried task which of its trials already arrived, so a worker that dies
mid-unit costs only its unfinished trials, whether Ray retries the task or `--resume`
runs them later, on any worker.

Ray is an optional extra (`pip install -e .[cluster]`) and imported only here, lazily.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quicbed import limits, paths, rowschema
from quicbed.errors import InputError, QuicbedError

from .matrix import Trial
from .parallel import own_log_scope
from .plan import WORKER_CORES, paths_fit
from .runner import ConditionSkipped, Executor, Session, Work, host_facts, measure_units, ran_on
from .schema import Experiment
from .shard import Unit, condition_units, unit_seconds

RESOURCE = "quicbed_path"  # paths a machine runs at once: `ray start ... --resources '{"quicbed_path": 2}'`
CONNECT_S = 5.0
POLL_S = 0.2  # how often the head drains the sink
CANCEL_WAIT_S = 120.0  # an interrupted worker's teardown (path, containers) gets this long

ExecutorFactory = Callable[[Experiment, Path], Executor]


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError(
            "--ray needs the cluster extra: pip install -e '.[cluster]' " "(Ray, pinned in versions.env)"
        ) from None
    return ray


def connect(address: str) -> Any:
    ray = import_ray()
    if not ray.is_initialized():
        _reachable(address)  # Ray itself would retry a wrong address for minutes
        try:
            # Workers' own output stays in their logs; the head prints one line per unit.
            ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise QuicbedError(f"--ray {address}: cannot connect ({exc})") from None
    return ray


def _reachable(address: str) -> None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_S).close()
    except (OSError, ValueError) as exc:
        raise QuicbedError(
            f"--ray {address}: no Ray head there "
            f"({getattr(exc, 'strerror', None) or exc}; expected HOST:PORT)"
        ) from None


def node_paths(address: str) -> list[int]:
    """Each live node's `quicbed_path` offer (those that offer one)."""
    ray = connect(address)
    offers = (int(node["Resources"].get(RESOURCE, 0)) for node in ray.nodes() if node["Alive"])
    return [k for k in offers if k > 0]


def path_slots(address: str) -> int:
    """How many paths the cluster runs at once: its live nodes' `quicbed_path` resources."""
    return sum(node_paths(address))


def task_paths(exp: Experiment, most_offered: int) -> int:
    """The `quicbed_path` resources a unit's task holds: one, or for a workload of which fewer
    paths fit a 2-core worker's CPU than a worker offers, enough that no more run beside it
    (all of them, for web with Chromium). It can only run on a node offering that many: in a
    cluster of unequal workers, those offering the most."""
    return max(1, math.ceil(most_offered / paths_fit(exp, WORKER_CORES)))


class Sink:
    """The rows' way home (a Ray actor on the head's node): workers put, the head drains."""

    def __init__(self) -> None:
        self.queue: list[tuple[str, Any]] = []
        self.arrived: set[str] = set()  # trial ids: a retried task skips these

    def put(self, kind: str, payload: Any) -> None:
        if kind == "row":
            self.arrived.add(payload[0]["trial_id"])
        self.queue.append((kind, payload))

    def received(self) -> set[str]:
        return self.arrived

    def drain(self) -> list[tuple[str, Any]]:
        taken, self.queue = self.queue, []
        return taken


def unit_task(
    sink: Any,
    exp: Experiment,
    unit: Unit,
    todo: list[tuple[Trial, int]],
    run_id: str,
    factory: ExecutorFactory,
    held: int = 1,
) -> str:
    """On a worker: measure one unit on a path of its own (holding `held` of the machine's
    paths), sending home each row before the next trial."""
    import ray

    from quicbed.topology.marker import kill_own_helpers

    def put(kind: str, payload: Any) -> None:
        ray.get(sink.put.remote(kind, payload))  # waited for: an acknowledged row is home

    arrived = ray.get(sink.received.remote())
    todo = [(t, a) for t, a in todo if t.trial_id not in arrived]
    # The worker's own results/<run-id>/ holds its logs; rows and traces go to the head.
    run_dir = paths.RESULTS / run_id
    executor = factory(exp, run_dir)
    host, info = host_facts(), executor.manifest_info()
    offered = _this_node_paths(ray)
    beside = {"parallel": offered // held} if offered > 1 else {}
    own_log_scope(executor, [(unit, todo)], len(condition_units(exp, unit.condition)))
    prepare = getattr(executor, "prepare", None)
    if prepare:  # keys and content, which a unit beside this one may be making too
        with _machine_lock(run_id):
            prepare()
    try:
        measure_units(
            [(unit, todo)],
            executor,
            run_id,
            lambda u, calib: put("calibrated", (u.id, calib, ran_on(host, info, calib))),
            lambda row: put("row", (row | beside, _trace(run_dir, row))),
        )
    except ConditionSkipped as exc:
        put("skipped", (unit.id, f"{exc} (on {host['hostname']})"))
    finally:
        kill_own_helpers()  # a helper its teardown missed must not outlive the task
    return unit.id


def _this_node_paths(ray: Any) -> int:
    here = ray.get_runtime_context().get_node_id()
    return next((int(n["Resources"].get(RESOURCE, 0)) for n in ray.nodes() if n["NodeID"] == here), 1)


@contextlib.contextmanager
def _machine_lock(run_id: str) -> Any:
    """One unit at a time on this machine makes the run's shared files (as --parallel makes
    them once before its paths fork)."""
    lock = paths.STATE / "locks" / f"prepare-{run_id}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _trace(run_dir: Path, row: dict[str, Any]) -> str | None:
    """A trial's trace file (video), which lives beside the rows on the head: only at the
    trial's own trace path (rowschema.trace_path), read with a bound."""
    path = _trace_file(run_dir, row)
    if path is None or not path.exists():
        return None
    try:
        return limits.read_bounded(path, limits.RUN_JSON_MAX_BYTES, follow=False).decode(errors="replace")
    except (limits.TooBig, OSError):  # not a file the executor wrote: the row keeps no trace
        return None


def _trace_file(run_dir: Path, row: dict[str, Any]) -> Path | None:
    """Where a row's trace file goes in `run_dir`, or None: a row naming any other place than
    its trial's trace path (a tool's row is not trusted with the head's filesystem) has none."""
    rel, trial_id = row.get("trace_file"), row.get("trial_id")
    if not rel or not isinstance(trial_id, str) or rel != rowschema.trace_path(trial_id):
        return None
    try:
        return rowschema.run_file(run_dir, rel)
    except rowschema.RunPathError:
        return None


class RayDispatcher:
    """runner.Dispatcher for a Ray cluster at `address`."""

    def __init__(
        self, address: str, factory: ExecutorFactory, exp: Experiment, run_dir: Path, retries: int = 1
    ) -> None:
        self.ray = connect(address)
        self.address, self.factory, self.exp, self.run_dir = address, factory, exp, run_dir
        self.retries = retries
        self.work: dict[str, tuple[Unit, list[tuple[Trial, int]]]] = {}
        if not path_slots(address):
            raise QuicbedError(
                f"--ray {address}: no live node offers the {RESOURCE} resource "
                f"(start workers with --resources '{{\"{RESOURCE}\": 1}}', or 2: docs/cluster/README.md)"
            )

    def manifest_info(self) -> dict[str, Any]:
        return {
            "ray": {
                "address": self.address,
                "version": self.ray.__version__,
                "path_slots": path_slots(self.address),
                "paths_per_node": node_paths(self.address),
                "paths_per_unit": task_paths(self.exp, max(node_paths(self.address))),
                "retries": self.retries,
            },
            "per_unit": "units.<id>.ran_on",
        }

    def run_conditions(self, work: Work, session: Session) -> None:
        ray = self.ray
        here = ray.get_runtime_context().get_node_id()
        affinity = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(here, soft=False)
        sink = ray.remote(num_cpus=0)(Sink).options(scheduling_strategy=affinity).remote()
        held = task_paths(self.exp, max(node_paths(self.address)))
        # SPREAD: a unit goes to an idle worker before it joins a busy one beside another unit.
        task = ray.remote(unit_task).options(
            num_cpus=0,
            resources={RESOURCE: held},
            max_retries=self.retries,
            retry_exceptions=False,
            scheduling_strategy="SPREAD",
        )
        # Longest first, as shard.assign plans it: Ray hands them to free workers in this order.
        work = sorted(work, key=lambda w: -unit_seconds(self.exp, w[0]))
        self.work = {unit.id: (unit, todo) for unit, todo in work}
        pending = {
            task.remote(sink, self.exp, unit, todo, session.manifest["run_id"], self.factory, held): (
                unit,
                todo,
            )
            for unit, todo in work
        }
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=POLL_S)
                self._drain(sink, session)  # a finished task's rows are all in the sink
                for ref in ready:
                    self._finished(ref, *pending.pop(ref), session)
        except KeyboardInterrupt:
            self._cancel(list(pending), sink, session)
            raise
        finally:
            ray.kill(sink)

    def _finished(self, ref: Any, unit: Unit, todo: list[tuple[Trial, int]], session: Session) -> None:
        try:
            self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:  # the task itself raised (set-up)
            cause = getattr(exc, "cause", None) or exc
            session.skipped(
                unit, _left(todo, session), f"failed on its worker: {type(cause).__name__}: {cause}"
            )
            return
        except self.ray.exceptions.RayError as exc:  # the worker or its node died
            left = _left(todo, session)
            reason = f"worker lost mid-unit ({type(exc).__name__}); {left} trial(s) left"
            session.skipped(unit, left, reason)
            return
        if unit.id not in session.summary.skipped:
            session.finished(unit)

    def _drain(self, sink: Any, session: Session) -> None:
        for kind, payload in self.ray.get(sink.drain.remote()):
            if kind == "row":
                row, trace = payload
                target = _trace_file(self.run_dir, row)
                if session.record(row) and trace is not None and target is not None:
                    _write_text(target, trace)
            elif kind == "calibrated":
                unit_id, calib, where = payload
                session.calibrated(unit_id, calib, where)
                session.bar.console.print(f"{unit_id}: calibrated on {where['hostname']}", markup=False)
            else:
                unit_id, reason = payload
                unit, todo = self.work[unit_id]
                session.skipped(unit, _left(todo, session), reason)

    def _cancel(self, refs: list[Any], sink: Any, session: Session) -> None:
        """Ctrl-C: each running task unwinds (its path torn down), rows so far are kept."""
        for ref in refs:
            self.ray.cancel(ref)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while refs and time.monotonic() < deadline:
            _, refs = self.ray.wait(refs, num_returns=len(refs), timeout=POLL_S)
        with contextlib.suppress(Exception):
            self._drain(sink, session)


def _left(todo: list[tuple[Trial, int]], session: Session) -> int:
    return sum(t.trial_id not in session.stored for t, _ in todo)


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def dispatcher(
    address: str, factory: ExecutorFactory, retries: int = 1
) -> Callable[[Experiment, Path], RayDispatcher]:
    """For `cmd_run`: the run's dispatcher, made where the executor would be."""

    def make(exp: Experiment, run_dir: Path) -> RayDispatcher:
        return RayDispatcher(address, factory, exp, run_dir, retries)

    return make
