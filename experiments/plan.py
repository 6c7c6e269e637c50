"""Dry run: what an experiment would run and roughly how long, without touching the network."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from quicbed.analysis.decisions import PER_CELL, PER_CONDITION, PER_SERVER, Decide, floor_rounds
from quicbed.analysis.loss_response import mathis_mbit
from quicbed.errors import InputError
from quicbed.rowschema import TRIALS_DIR
from quicbed.servers.pairing import need_text, spoken_pairs, unspoken_pairs
from quicbed.workloads import WORKLOADS, TrialPath

from . import cpu_known
from .cross import CrossFlow
from .matrix import Condition, conditions, count_per_condition
from .registry import HANDSHAKE_RTTS, TOOLS
from .schema import ClientVariant, Experiment

# Measured by bench/overhead_bench.py on a 2-core host (india, UML router):
SETUP_S = 42.0  # per condition: path up (~6 s), calibration (~34 s), servers (~1 s), teardown
# What one trial costs in time and CPU is its workload kind's (workloads/<kind>.py:
# trial_seconds, cpu_cores, measured per client tool).
# The path itself: its router backend (UML or the delay line forward in user space), the idle
# containers and the runner. bench/parallel_bench.py: the quick video slice kept 0.36 of the
# host's cores busy at K = 1, 0.24 of them in the trials' containers, so about 0.1 a path
# (host-wide, on a shared host); 0.25 keeps a margin.
PATH_CPU_CORES = 0.25

# The worker a cluster plan assumes: 2 cores, as the host these figures were measured on (and
# docs/cluster/ray-cluster.yaml's c6i.large).
WORKER_CORES = 2
# bench/parallel_bench.py (bench/README.md, 2026-11-26): the quick video slice with two paths
# at once took 0.59 and 0.58 of one path's wall time. So each of two paths ran 2 x 0.59 = 1.18
# times as long as alone (both paths' mutual slowdown and the slice's unequal conditions
# together; not a perfect 0.5). Only K = 2 is measured, so plans go no further.
PARALLEL_WALL_K2 = 0.59
MEASURED_PATHS = (1, 2)


def path_stretch(paths: int) -> float:
    """How much longer a unit takes on a worker running `paths` at once than alone (a plan
    stretches every unit of such a worker, as if it always had a neighbour: an upper bound)."""
    return 1.0 if paths <= 1 else 2 * PARALLEL_WALL_K2


def trial_cpu_cores(kind: str, tool: str) -> float:
    return WORKLOADS[kind].trial_cpu_cores(tool)


def trial_seconds(exp: Experiment, cond: Condition, client: ClientVariant, obj: str) -> float:
    """The workload kind's estimate of one trial on this path with this client (a transfer:
    handshake, request, slow start, serialisation and the tool's own start-up, a browser's a
    second, a perf tool's a tenth; a rough lower bound). A trial waits for its cross flows to
    end; while they run it has half the link at best."""
    tool = TOOLS[client.tool]
    path = TrialPath(
        rtt_s=cond.link.rtt_ms / 1000,
        rate_mbit=_sender_rate_mbit(cond),
        shared=bool(exp.cross),
        handshake_rtts=HANDSHAKE_RTTS.get(client.protocol, 2),
        start_s=tool.start_s,
        plays_streams=tool.plays_streams,
    )
    cross_end = max((f.end_s for f in exp.cross), default=0.0)
    return max(WORKLOADS[exp.workload.kind].trial_seconds(obj, exp.workload.duration_s, path), cross_end)


def _sender_rate_mbit(cond: Condition) -> float:
    """The link's rate, or under random loss the most a loss-responsive sender reaches (at 10 %
    loss on india 0.56 of 20 Mbit/s: a 1 MB transfer takes 15 s, not 0.4)."""
    down = cond.link.down
    loss = down.expected_loss_pct
    if loss <= 0:
        return down.rate_mbit
    return min(down.rate_mbit, mathis_mbit(loss, cond.link.rtt_ms))


def estimate_seconds(
    exp: Experiment, repetitions: int | Mapping[tuple[str, str], int] | None = None
) -> float:
    """The run's time at `repetitions` (default: the experiment's, the cap of auto ones), one
    count for every cell or one per (condition id, object)."""
    total = 0.0
    pairs = spoken_pairs(exp.servers, exp.clients)
    for cond in conditions(exp):
        for obj in exp.workload.objects:
            if isinstance(repetitions, Mapping):
                reps = repetitions[cond.id, obj]
            else:
                reps = repetitions or exp.repetitions
            total += sum(trial_seconds(exp, cond, c, obj) for _, c in pairs) * reps
        total += SETUP_S
    return total


def floors(exp: Experiment) -> dict[tuple[str, str], int]:
    """Each condition's objects' rounds when every line that judges them decides at its floor
    (where no line judges, `min`): an auto run's shortest."""
    assert exp.auto is not None
    servers, objects = len(exp.servers), len(exp.workload.objects)
    out = {}
    for cond in conditions(exp):
        for obj in exp.workload.objects:
            lines = _judging(exp, cond, obj)
            out[cond.id, obj] = floor_rounds(lines, exp.auto, servers, objects) if lines else exp.auto.min
    return out


def caps(exp: Experiment) -> dict[tuple[str, str], int]:
    """Each condition's objects' rounds when no line decides before the cap: an auto run's
    longest. Where no line judges, `min`: the runner stops such a cell there
    (stopping.Stopper), so the cap would overstate it (a slice that runs its bulk files on
    one path for one line and on another for none)."""
    assert exp.auto is not None
    auto = exp.auto
    return {
        (cond.id, obj): auto.max if _judging(exp, cond, obj) else auto.min
        for cond in conditions(exp)
        for obj in exp.workload.objects
    }


def _judging(exp: Experiment, cond: Condition, obj: str) -> list[Decide]:
    """The decide lines that judge an object's cells in a condition."""
    return [d for d in exp.decide if d.judges(obj) and d.applies(cond.values)]


def duration_text(exp: Experiment) -> str:
    model = f"(rough: {SETUP_S:g} s setup per condition, handshake/slow-start/rate model per trial)"
    if exp.auto is None:
        return f"estimated duration: {hms(estimate_seconds(exp))} {model}"
    # Every comparison decided at its floor, or none before the cap.
    least = floors(exp)
    return (
        f"estimated duration: {hms(estimate_seconds(exp, least))} if every line decides at its "
        f"floor (rounds: {_floors_text(least)}), {hms(estimate_seconds(exp, caps(exp)))} at the cap of "
        f"{exp.auto.max} {model}"
    )


def _floors_text(least: Mapping[tuple[str, str], int]) -> str:
    """ "index.html 6" when every condition has the same floor, else "c0 dash 3, c1 dash 11"."""
    by_object: dict[str, set[int]] = {}
    for (_, obj), n in least.items():
        by_object.setdefault(obj, set()).add(n)
    if all(len(ns) == 1 for ns in by_object.values()):
        return ", ".join(f"{obj} {ns.pop()}" for obj, ns in by_object.items())
    return ", ".join(f"{cond} {obj} {n}" for (cond, obj), n in least.items())


def repetitions_text(exp: Experiment) -> str:
    if exp.auto is None:
        return f"{exp.repetitions} repetitions"
    return (
        f"up to {exp.auto.max} repetitions (auto: at least {exp.auto.min}, then until every "
        f"decide line is decided in the "
        + {PER_CELL: "cell", PER_SERVER: "condition per server", PER_CONDITION: "condition"}[exp.auto.per]
        + f" at alpha {exp.auto.alpha:g})"
    )


def dry_run(exp: Experiment) -> str:
    conds = conditions(exp)
    per = count_per_condition(exp)
    unspoken = unspoken_pairs(exp.servers, exp.clients)
    w = exp.workload
    lines = [
        f"experiment {exp.name} ({exp.file}){' [quick]' if exp.quick else ''}",
        f"conditions: {len(conds)}",
    ]
    for c in conds:
        d, u = c.link.down, c.link.up
        lines.append(
            f"  {c.id:<4} {c.label:<30} rtt {c.link.rtt_ms:g} ms  "
            f"{d.rate_text()}/{u.rate_text()} Mbit/s  "
            f"loss {d.expected_loss_pct:g}/{u.expected_loss_pct:g}%"
        )
    lines += [
        f"servers: {', '.join(exp.servers)}",
        f"clients: {', '.join(c.label for c in exp.clients)}",
        f"workload: {w.kind}: {', '.join(w.objects)}"
        + (f" ({w.duration_s:g} s each)" if w.duration_s else ""),
        *(
            f"  {page.name}: {page.file}, {page.requests} requests from {page.origins} "
            f"origin{'s' if page.origins != 1 else ''}"
            + (" (its one-origin twin)" if page.one_origin else "")
            + f", "
            f"{page.body_bytes / 1e6:.2f} MB of bodies; a trial fetches {page.landing_url}"
            for page in w.pages
        ),
        f"per condition: {len(exp.servers) * len(exp.clients) - len(unspoken)} server x client pairs "
        f"({len(exp.servers)} servers x {len(exp.clients)} clients, {len(unspoken)} not spoken) x "
        f"{len(w.objects)} objects x {repetitions_text(exp)} = {per} trials"
        + (" at most" if exp.auto else ""),
        "pairs not spoken (no trials): "
        + (
            "; ".join(f"{s} x {c.label} ({need_text(c)})" for s, c in unspoken)
            if unspoken
            else "none (every server speaks every client variant)"
        ),
        f"total: {len(conds)} conditions x {per} = {len(conds) * per} trials, "
        f"order {exp.order}, seed {exp.seed}",
        duration_text(exp),
        f"expectations: {len(exp.expect)}",
        "decide: " + ("; ".join(d.text() for d in exp.decide) or "none"),
        "capture: "
        + (
            f"{', '.join(exp.capture)} per trial, in {TRIALS_DIR}/<trial id>/ (what a stack cannot "
            "write is listed in its row's capture_missing)"
            if exp.capture
            else "none"
        ),
        "cross traffic: " + ("; ".join(_cross_text(f) for f in exp.cross) or "none"),
        rate_cpu_text(exp),
        # A browser the repo measured CPU-bound on such a path: the report will leave it out.
        *cpu_known.warnings(exp, os.cpu_count() or WORKER_CORES),
    ]
    return "\n".join(lines)


def _cross_text(flow: CrossFlow) -> str:
    cc = f" {flow.cc}" if flow.cc else " (its server's cc)"
    return (
        f"{flow.name} {flow.kind} {flow.protocol}{cc} {flow.direction}, "
        f"{flow.start_s:g}-{flow.end_s:g} s of each trial"
    )


def hms(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


CPU_BUDGET = 0.8  # of the host's cores, for auto K: the rest for the kernel, Docker, the runner


def cpu_per_path(exp: Experiment) -> float:
    """Cores one path and its trials keep busy: the busiest client's trial plus the path's
    own (router backend, containers), from the measured table above."""
    trial = max((trial_cpu_cores(exp.workload.kind, c.tool) for c in exp.clients), default=0.0)
    return trial + PATH_CPU_CORES


def paths_fit(exp: Experiment, cores: int) -> int:
    """Paths of this workload that fit in CPU_BUDGET of `cores`, at most one per core (at
    least one): --parallel auto's K, and a Ray worker's (cluster.py, on plan.WORKER_CORES)."""
    fits = math.floor(cores * CPU_BUDGET / cpu_per_path(exp))
    return max(1, min(fits, cores))


def parse_paths_per_worker(text: str) -> int | None:
    """`--paths-per-worker K` or `auto` (None): only the K that bench/parallel_bench.py measured."""
    if text == "auto":
        return None
    if text not in {str(k) for k in MEASURED_PATHS}:
        raise InputError(
            f"--paths-per-worker {text!r}: expected auto or one of "
            f"{', '.join(map(str, MEASURED_PATHS))} (the parallel slowdown of more is not measured)"
        )
    return int(text)


def paths_per_worker(exp: Experiment, offered: int | None) -> tuple[int, str]:
    """The paths a worker offering `offered` (None: auto) runs of this experiment at once, and
    why: a CPU-heavy workload's unit holds the whole worker (`task_paths`)."""
    fit = paths_fit(exp, WORKER_CORES)
    k = fit if offered is None else min(offered, fit)
    why = f"{cpu_per_path(exp):.2f} cores a path on a {WORKER_CORES}-core worker fit {fit}"
    if offered is not None and offered > k:
        why += f"; its units hold all {offered} of a worker's paths"
    return k, why


# What this host's cores carry at a rate, measured on 2 shared cores with the delay line
# (2026-12-01). The link: its processes' CPU per Gbit/s of TCP goodput, 0.22-0.31 at 1000
# Mbit/s (bench/link_bench.py --rates, bench/README.md). The perf tools' client + server
# containers per Gbit/s of a 100 MB download (cpu_client_pct + cpu_server_pct, fast.yaml
# --quick at 1000 Mbit/s: TLS 1.3 0.33-0.34, QUIC 0.74-0.80). A browser is CPU-bound on one
# core well below 1 Gbit/s, so its figure is the rate it reached there (its rows carry
# cpu_bound): Chromium's QUIC 245-370 Mbit/s, its TLS 1.3 562-844.
LINK_CORES_PER_GBIT = 0.3
ENDPOINT_CORES_PER_GBIT = {"tls_perf": 0.34, "quic_perf": 0.8}
CPU_BOUND_MBIT = {"chromium-quic": 245.0, "chromium-tls1.3": 560.0}


def rate_cpu_text(exp: Experiment) -> str:
    """Before the run, per rate: the cores the link and the busiest perf tool's ends take on
    this host, whether its cores carry that, and which clients will be CPU-bound there."""
    cores = os.cpu_count() or WORKER_CORES
    rates = sorted({max(c.link.down.rate_mbit, c.link.up.rate_mbit) for c in conditions(exp)})
    parts = []
    for rate in rates:
        gbit = rate / 1000
        ends = max((ENDPOINT_CORES_PER_GBIT.get(c.tool, 0.0) * gbit for c in exp.clients), default=0.0)
        need = LINK_CORES_PER_GBIT * gbit + ends + PATH_CPU_CORES
        verdict = f"fits {cores}" if need <= cores * CPU_BUDGET else f"{cores} cores cannot carry it"
        bound = [f"{label} above ~{mbit:g}" for label, mbit in CPU_BOUND_MBIT.items() if rate > mbit]
        bound = [b for b in bound if any(b.startswith(c.label + " ") for c in exp.clients)]
        parts.append(
            f"{rate:g} Mbit/s: {need:.2f} cores ({verdict})"
            + (f", CPU-bound: {', '.join(bound)} Mbit/s" if bound else "")
        )
    return "cpu by rate (link + perf tool ends + path, this host): " + ("; ".join(parts) or "none")
