"""Units and shards: `quicbed run FILE --shard I/N` runs a deterministic, balanced subset of an
experiment's units; `quicbed merge RUN...` makes the shards one run; a Ray cluster runs each
unit as a task.

A unit is part of one condition: some of its cells, a cell being one server and object with
every client of its repetitions (all of them, or a block of them where a server and object
alone would take over UNIT_MAX_S: the paper's video, 30 three-minute playbacks, is 90 min). It
runs on its own path with its own calibration, on any machine, so a condition whose trials
take hours no longer bounds a cluster's wall time; its clients stay together, so protocols are
still compared trial by trial on one calibrated path. A condition is split into as many units
as its trials fill UNIT_MIN_S each (at most one per cell): a unit's path set-up and
calibration (plan.SETUP_S) then costs under a tenth of its trials' time. The cells go to units
by estimated duration, longest first, each to the unit with the least so far (ties: the lower
index), and a unit still under UNIT_MIN_S joins the next smallest; units go to shards the same
way, so every machine computes the same split and the same plan. A machine that holds several
units of one condition (a local run, a shard) brings that path up once for them
(runner.Local); a Ray task is one unit on its own path.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from quicbed.analysis.decisions import PER_CELL
from quicbed.errors import InputError
from quicbed.servers.pairing import spoken_clients

from .matrix import Condition, Trial, conditions, trials
from .plan import (
    PARALLEL_WALL_K2,
    SETUP_S,
    hms,
    parse_paths_per_worker,
    path_stretch,
    paths_per_worker,
    trial_seconds,
)
from .schema import Experiment

# A unit's trials take at least this long (when its condition has that much), so its own
# set-up and calibration (SETUP_S, 42 s) stay under a tenth of it.
UNIT_MIN_S = 600.0

# A (server, object) longer than this (a 3-minute video played 30 times: 90 min) splits into
# blocks of repetitions, every client in each; else a cluster could go no faster than it.
UNIT_MAX_S = 1800.0

# (server, object, first repetition, end repetition): every client of those repetitions.
Cell = tuple[str, str, int, int]
T = TypeVar("T")


@dataclass(frozen=True)
class Unit:
    condition: Condition
    index: int  # within its condition, 0-based
    cells: tuple[Cell, ...]  # in the experiment's server x object x repetition order

    @property
    def id(self) -> str:
        return f"{self.condition.id}u{self.index}"

    @property
    def label(self) -> str:
        servers = dict.fromkeys(c[0] for c in self.cells)
        objects = dict.fromkeys(c[1] for c in self.cells)
        reps = dict.fromkeys(f"r{a}" if b == a + 1 else f"r{a}-{b - 1}" for _, _, a, b in self.cells)
        blocks = f" {'+'.join(reps)}" if len(reps) == 1 and len(self.cells) == 1 else ""
        return f"{self.condition.label} [{'+'.join(servers)}: {'+'.join(objects)}{blocks}]"

    def holds(self, trial: Trial) -> bool:
        return trial.condition.id == self.condition.id and any(
            (trial.server, trial.object) == (s, o) and a <= trial.repetition < b for s, o, a, b in self.cells
        )


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as Slurm's array index and the CLI's I/N
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def to_dict(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}


def parse_shard(text: str) -> Shard:
    index, sep, count = text.partition("/")
    try:
        shard = Shard(int(index), int(count))
    except ValueError:
        shard = None
    if not sep or shard is None or not 1 <= shard.index <= shard.count <= 10_000:
        raise InputError(f"--shard {text!r}: expected I/N with 1 <= I <= N (e.g. 2/4)")
    return shard


def cell_seconds(exp: Experiment, cond: Condition, cell: Cell) -> float:
    """Every client's trials of one server and object, in the cell's repetitions."""
    server, obj, first, end = cell
    clients = spoken_clients(server, exp.clients)
    return sum(trial_seconds(exp, cond, c, obj) for c in clients) * (end - first)


def cells_of(exp: Experiment, cond: Condition) -> list[Cell]:
    """A condition's cells: each server and object, its repetitions in as few blocks of
    about equal length as keep each under UNIT_MAX_S (a repetition longer stays one). Under
    auto repetitions a cell stays whole: its rounds are decided one after another, by the
    rounds before them, so one path runs them all."""
    out = []
    reps = exp.repetitions
    for server in exp.servers:
        for obj in exp.workload.objects:
            per_rep = cell_seconds(exp, cond, (server, obj, 0, 1))
            # Repetitions a block: all of them under auto, or when a repetition costs nothing.
            fits = reps if exp.auto or not per_rep else max(1, math.floor(UNIT_MAX_S / per_rep))
            blocks = math.ceil(reps / min(fits, reps))
            edges = [round(i * reps / blocks) for i in range(blocks + 1)]
            out += [(server, obj, a, b) for a, b in itertools.pairwise(edges)]
    return out


def condition_units(exp: Experiment, cond: Condition) -> list[Unit]:
    """One condition's units: its cells split, balanced by estimated duration (deterministic).
    Auto repetitions decided over several cells (per server or condition) keep it one unit:
    their test pairs every cell's round r before round r + 1, as one path running the
    interleaved order gives."""
    cells = cells_of(exp, cond)
    if exp.auto and exp.auto.per != PER_CELL:
        return [Unit(cond, 0, tuple(cells))]
    cost = {cell: cell_seconds(exp, cond, cell) for cell in cells}
    count = max(1, min(len(cells), int(sum(cost.values()) // UNIT_MIN_S)))
    order = {cell: i for i, cell in enumerate(cells)}
    groups = _balance(cells, count, lambda cell: (-cost[cell], order[cell]), cost.__getitem__)
    groups = _merge_small([g for g in groups if g], lambda g: sum(map(cost.__getitem__, g)), order)
    # Numbered by their first cell, so a unit's id does not depend on the balancing's ties.
    groups = sorted((sorted(g, key=order.__getitem__) for g in groups), key=lambda g: order[g[0]])
    return [Unit(cond, i, tuple(g)) for i, g in enumerate(groups)]


def _merge_small(
    groups: list[list[Cell]], cost: Callable[[list[Cell]], float], order: dict[Cell, int]
) -> list[list[Cell]]:
    """The smallest unit joins the next smallest while it is under UNIT_MIN_S: a cell of
    seconds (1 KB files) is not worth a path of its own."""
    groups = list(groups)
    while len(groups) > 1:
        groups.sort(key=lambda g: (cost(g), min(map(order.__getitem__, g))))
        if cost(groups[0]) >= UNIT_MIN_S:
            break
        groups[1] = groups[0] + groups[1]
        del groups[0]
    return groups


def units(exp: Experiment) -> list[Unit]:
    """Every unit of the experiment, condition by condition."""
    return [u for cond in conditions(exp) for u in condition_units(exp, cond)]


def unit_trials(exp: Experiment, unit: Unit) -> list[Trial]:
    """A unit's trials in its condition's run order (protocols still interleaved)."""
    return [t for t in trials(exp, unit.condition) if unit.holds(t)]


def unit_seconds(exp: Experiment, unit: Unit) -> float:
    """A unit on a path of its own: set-up, calibration and its trials."""
    return SETUP_S + sum(cell_seconds(exp, unit.condition, cell) for cell in unit.cells)


def worker_seconds(exp: Experiment, held: list[Unit], shared: bool = True) -> float:
    """What one machine spends on its units: one set-up per condition when it runs them in
    one session (`shared`: runner.Local brings a condition's path up once for all its units
    there: a local run, a shard), else one per unit (a Ray task each) and every trial."""
    setups = (len({u.condition.id for u in held}) if shared else len(held)) * SETUP_S
    return setups + sum(unit_seconds(exp, u) - SETUP_S for u in held)


def _balance(
    items: list[T], count: int, key: Callable[[T], tuple[float, int]], cost: Callable[[T], float]
) -> list[list[T]]:
    """Longest first, each to the bin with the least so far (ties: the lower index)."""
    bins: list[list[T]] = [[] for _ in range(count)]
    load = [0.0] * count
    for item in sorted(items, key=key):
        target = min(range(count), key=lambda i: (load[i], i))
        bins[target].append(item)
        load[target] += cost(item)
    return bins


def assign(exp: Experiment, count: int) -> list[list[Unit]]:
    """The units of each of `count` shards (or workers): longest first, each to the least
    loaded; deterministic. Within a shard, in experiment order."""
    every = units(exp)
    position = {u.id: i for i, u in enumerate(every)}
    cost = {u.id: unit_seconds(exp, u) for u in every}
    bins = _balance(every, count, lambda u: (-cost[u.id], position[u.id]), lambda u: cost[u.id])
    return [sorted(b, key=lambda u: position[u.id]) for b in bins]


def shard_units(exp: Experiment, shard: Shard) -> list[Unit]:
    return assign(exp, shard.count)[shard.index - 1]


def worker_paths(exp: Experiment, count: int, paths: int) -> list[list[list[Unit]]]:
    """Each of `count` Ray workers' paths (`paths` each) and their units: longest first, each
    to the path with the least so far, the workers' first paths before any second one (as
    Ray's SPREAD hands units to idle workers first)."""
    slots = assign(exp, count * paths)
    return [[slots[w + p * count] for p in range(paths)] for w in range(count)]


def plan(exp: Experiment, count: int, shared: bool = True, paths: int = 1, why: str = "") -> str:
    """Where the time goes on `count` shards (`shared`: a shard's units of one condition share
    its path) or Ray workers (each unit on a path of its own, `paths` at once on a worker, each
    then plan.path_stretch times as long): each one's units and time, the unit count and what
    bounds the wall time (the longest unit, or the total / (N x paths))."""
    stretch = path_stretch(paths)
    workers = worker_paths(exp, count, paths)
    every = [u for w in workers for p in w for u in p]
    at_once = "one emulated path" if paths == 1 else f"{paths} emulated paths"
    lines = [
        f"plan for {count} worker(s), {at_once} each at a time: "
        f"{len(every)} unit(s) in {len(conditions(exp))} condition(s)"
    ]
    if paths > 1 or why:
        lines.append(
            f"paths per worker: {paths} ({why or 'as asked'}); each unit {stretch:.2f}x as long "
            f"as alone (bench/parallel_bench.py: {PARALLEL_WALL_K2:g} of the wall time at 2)"
            if paths > 1
            else f"paths per worker: 1 ({why})"
        )
    totals = []
    for i, held_paths in enumerate(workers, 1):
        held = [u for p in held_paths for u in p]
        seconds = max(worker_seconds(exp, p, shared) for p in held_paths) * stretch
        totals.append(seconds)
        ids = ", ".join(u.id for u in held) or "nothing (more workers than units)"
        lines.append(f"  worker {i:>3}: {len(held):>3} unit(s), ~{hms(seconds)}: {ids}")
    whole = sum(worker_seconds(exp, p, shared) for w in workers for p in w) * stretch
    wall = max(totals)
    longest = max(every, key=lambda u: unit_seconds(exp, u))
    floor_unit, floor_share = unit_seconds(exp, longest) * stretch, whole / (count * paths)
    per = f"{count}" if paths == 1 else f"({count} x {paths} paths)"
    bound = (
        f"the longest unit ({longest.id} {longest.label}, ~{hms(floor_unit)})"
        if floor_unit >= floor_share
        else f"the total / {per} (~{hms(floor_share)})"
    )
    alone = worker_seconds(exp, every)
    lines.append(
        f"expected wall time: {hms(wall)} (one worker: {hms(alone)}; all workers together: "
        f"{hms(whole)}; speed-up {alone / wall if wall else 1:.1f}x; bound: {bound})"
    )
    return "\n".join(lines)


def ray_wall(exp: Experiment, count: int, paths: int = 1) -> float:
    """The planned wall time on `count` Ray workers of `paths` paths each (a path per unit)."""
    stretch = path_stretch(paths)
    return (
        max(worker_seconds(exp, p, shared=False) for w in worker_paths(exp, count, paths) for p in w)
        * stretch
    )


def plan_together(exps: list[Experiment], count: int, paths: dict[str, int] | None = None) -> str:
    """Several experiments on `count` Ray workers (a path per unit; `paths`: how many at once
    on a worker, per experiment name, default 1): one after another (as `quicbed run --ray`
    runs each), and as one pool of units (each worker takes the next unit of any experiment:
    a bound no command reaches yet; one path a worker)."""
    paths = paths or {}
    lines = [f"{len(exps)} experiment(s) on {count} worker(s):"]
    walls = []
    for exp in exps:
        k = paths.get(exp.name, 1)
        wall = ray_wall(exp, count, k)
        walls.append(wall)
        lines.append(
            f"  {exp.name:<14} {len(units(exp)):>4} unit(s), {k} path(s) a worker, wall ~{hms(wall)}"
        )
    pool = [(exp, u) for exp in exps for u in units(exp)]
    cost = {(e.name, u.id): unit_seconds(e, u) for e, u in pool}
    order = {(e.name, u.id): i for i, (e, u) in enumerate(pool)}
    bins = _balance(
        pool,
        count,
        lambda p: (-cost[p[0].name, p[1].id], order[p[0].name, p[1].id]),
        lambda p: cost[p[0].name, p[1].id],
    )
    pooled = max(sum(cost[e.name, u.id] for e, u in b) for b in bins)
    total = sum(cost.values())
    lines += [
        f"one after another: ~{hms(sum(walls))}",
        f"as one pool of {len(pool)} units, one path a worker: ~{hms(pooled)} "
        f"(total {hms(total)} / {count} = {hms(total / count)}; longest unit {hms(max(cost.values()))})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m quicbed.experiments.shard --workers N FILE...`: the plan of several
    experiments together (e.g. experiments/paper/*.yaml, in full)."""
    import argparse

    from .schema import load_experiment

    ap = argparse.ArgumentParser(prog="python -m quicbed.experiments.shard", description=main.__doc__)
    ap.add_argument("files", nargs="+", metavar="FILE")
    ap.add_argument("--workers", type=int, required=True, metavar="N")
    ap.add_argument("--quick", action="store_true", help="the files' quick: settings")
    ap.add_argument("--paths-per-worker", metavar="K", help="1, 2 or auto (per experiment; default 1)")
    args = ap.parse_args(argv)
    try:
        exps = [load_experiment(f, quick=args.quick) for f in args.files]
        per_worker = {e.name: _paths_per_worker(e, args.paths_per_worker) for e in exps}
    except InputError as exc:
        print(exc)
        return 2
    print(plan_together(exps, args.workers, per_worker))
    return 0


def _paths_per_worker(exp: Experiment, text: str | None) -> int:
    return paths_per_worker(exp, parse_paths_per_worker(text))[0] if text else 1


if __name__ == "__main__":
    raise SystemExit(main())
