"""Shards for batch schedulers: `quicbed run FILE --shard I/N` runs a deterministic, balanced
subset of an experiment's conditions; `quicbed merge RUN...` makes the shards one run.

A condition (one topology, its calibration and all its trials) is the unit: one emulated path
per machine at a time, and a condition's trials compare protocols on the same calibrated path.
Conditions go to shards by their estimated duration, longest first, each to the shard with the
least work so far (ties: the lower index), so every machine computes the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from quicbed.errors import InputError

from .matrix import Condition, conditions
from .plan import SETUP_S, hms, trial_seconds
from .schema import Experiment


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


def condition_seconds(exp: Experiment, cond: Condition) -> float:
    """The dry run's estimate for one condition: set-up, calibration and every trial."""
    per_rep = sum(trial_seconds(exp, cond, c, o) for c in exp.clients for o in exp.workload.objects)
    return SETUP_S + per_rep * len(exp.servers) * exp.repetitions


def assign(exp: Experiment, count: int) -> list[list[Condition]]:
    """The conditions of each of `count` shards (longest-first greedy; deterministic)."""
    conds = conditions(exp)
    cost = {c.id: condition_seconds(exp, c) for c in conds}
    bins: list[list[Condition]] = [[] for _ in range(count)]
    load = [0.0] * count
    for cond in sorted(conds, key=lambda c: (-cost[c.id], c.index)):
        target = min(range(count), key=lambda i: (load[i], i))
        bins[target].append(cond)
        load[target] += cost[cond.id]
    return [sorted(b, key=lambda c: c.index) for b in bins]


def shard_conditions(exp: Experiment, shard: Shard) -> list[Condition]:
    return assign(exp, shard.count)[shard.index - 1]


def plan(exp: Experiment, count: int) -> str:
    """The per-worker plan of `count` shards (or workers) and the expected wall time."""
    bins = assign(exp, count)
    lines = [f"plan for {count} worker(s), one emulated path each at a time:"]
    totals = []
    for i, conds in enumerate(bins, 1):
        seconds = sum(condition_seconds(exp, c) for c in conds)
        totals.append(seconds)
        ids = ", ".join(c.id for c in conds) or "nothing (more workers than conditions)"
        lines.append(f"  worker {i:>3}: {len(conds):>3} condition(s), ~{hms(seconds)}: {ids}")
    whole = sum(totals)
    wall = max(totals)
    lines.append(
        f"expected wall time: {hms(wall)} (one worker: {hms(whole)}; speed-up "
        f"{whole / wall if wall else 1:.1f}x, bounded by the longest condition)"
    )
    return "\n".join(lines)
