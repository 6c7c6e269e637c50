"""Expand an experiment into conditions (profile x sweep point) and their trials.

Trial ids are derived from the axes, not from positions in the run order, so a resumed run (or a
different `order`) finds the same ids: `c0/caddy/tls1.3-h2/index.html/r3`.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from quicbed.servers.pairing import spoken_pairs

from .links import Link, apply_overrides, is_link_axis
from .schema import ClientVariant, Experiment, Workload


@dataclass(frozen=True)
class Condition:
    index: int
    profile: str  # the profile's name
    link: Link  # the topology's Profile with this condition's sweep values applied: build this
    overrides: dict[str, Any] = field(default_factory=dict)  # link axes, e.g. {"loss_pct": 1.0}
    params: dict[str, Any] = field(default_factory=dict)  # server./client. axes, for the executor

    @property
    def id(self) -> str:
        return f"c{self.index}"

    @property
    def values(self) -> dict[str, Any]:
        """What a decide line's `where:` asks of the condition, as its rows carry it."""
        return {"profile": self.profile, **self.overrides}

    @property
    def label(self) -> str:
        axes = " ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in (self.overrides | self.params).items()
        )
        return f"{self.profile} {axes}".strip()


@dataclass(frozen=True)
class Trial:
    condition: Condition
    server: str
    client: ClientVariant
    workload: Workload
    object: str
    repetition: int  # 0-based
    timeout_s: float

    @property
    def trial_id(self) -> str:
        parts = (self.condition.id, self.server, self.client.label, self.object)
        return "/".join(parts) + f"/r{self.repetition}"


def conditions(exp: Experiment) -> list[Condition]:
    """profiles x the cartesian product of the sweep axes, in file order."""
    axes = list(exp.sweep)
    points = list(itertools.product(*exp.sweep.values()))
    out: list[Condition] = []
    for profile, point in itertools.product(exp.profiles, points):
        values = dict(zip(axes, point, strict=True))
        link_axes = {k: v for k, v in values.items() if is_link_axis(k)}
        params = {k: v for k, v in values.items() if not is_link_axis(k)}
        link = apply_overrides(profile, link_axes)
        out.append(Condition(len(out), profile.name, link, link_axes, params))
    return out


def trials(exp: Experiment, cond: Condition) -> list[Trial]:
    """One condition's trials in run order.

    interleaved: for each repetition and object, one trial per server x client, so protocols
    alternate trial by trial and slow drift (CPU heat, neighbours) hits all of them alike.
    shuffled: as interleaved, with each server x client block in a seeded random order.
    blocked: all repetitions of one server x client x object back to back.
    """
    # Only the pairs the server speaks (servers/pairing.py): an HTTP/3-only server gets
    # no TLS-over-TCP trial.
    pairs = spoken_pairs(exp.servers, exp.clients)
    objects = exp.workload.objects

    def make(rep: int, obj: str, server: str, client: ClientVariant) -> Trial:
        return Trial(cond, server, client, exp.workload, obj, rep, exp.timeout_s)

    if exp.order == "blocked":
        return [
            make(r, o, s, c)
            for (s, c), o in itertools.product(pairs, objects)
            for r in range(exp.repetitions)
        ]
    out: list[Trial] = []
    for rep, obj in itertools.product(range(exp.repetitions), objects):
        block = list(pairs)
        if exp.order == "shuffled":
            random.Random(f"{exp.seed}/{cond.id}/{rep}/{obj}").shuffle(block)
        out.extend(make(rep, obj, s, c) for s, c in block)
    return out


def count_per_condition(exp: Experiment) -> int:
    return len(spoken_pairs(exp.servers, exp.clients)) * len(exp.workload.objects) * exp.repetitions
