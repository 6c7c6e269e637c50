"""Comparisons an experiment decides as it runs: its `decide:` lines, and when to stop.

A decide line names a metric and two groups (protocols or client labels), A and B:

    decide:
      - {metric: connection_time, a: quic, b: tls1.3}                      # which is lower
      - {metric: ttfb, a: quic, b: tls1.3, similar_within: 1.10}           # within 10 %?
      - {metric: cpu_client, a: quic, b: tls1.2, b_times: 1.5}             # A against 1.5 B
      - {metric: connection_time, a: quic, b: tcp}                         # TLS 1.2 and 1.3
      - {metric: startup_delay, a: quic, b: tcp, where: {loss_pct: [5]}}   # at 5 % loss only

The group `tcp` is every protocol over TCP (TLS 1.2 and 1.3), as the paper pools them for
video; a round's side of several trials is their median.

Each line is judged apart in every condition, server and object (a cell), on rounds: round r
pairs A's and B's trials of repetition r, which the interleaved order runs side by side. The
test is analysis/sequential.py's sign test by betting, valid however often it is looked at:
with `repetitions: {auto: {min, max}}` the runner (experiments/runner.py) asks after every
round and stops a condition once every cell of every line is decided, or at max, "not
decided at the cap". A decision is a pure function of the rows in round order, so a resumed
run replays its stored rounds and reaches the decision an uninterrupted one would.

The runner, the manifest and the report read decisions from here: one place.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

from quicbed.rowschema import DECIDABLE, PROTOCOLS

from .sequential import SignBettor, Verdict, direction, equivalence, rounds_needed

DEFAULT_ALPHA = 0.01  # the paper's findings are judged at p < 0.01 (analysis/stats.py)
# Why a cell's trials stopped: decided; at an auto run's cap; at a fixed count; not yet.
DECIDED, CAP, FIXED, OPEN = "decided", "not decided at the cap", "not decided in its repetitions", "running"


# What a line's `where:` may name: the condition's values its rows carry in these columns.
WHERE_AXES = ("profile", "loss_pct", "rtt_ms", "jitter_ms")


@dataclass(frozen=True)
class Decide:
    """One decide line: which of A and B has the lower metric, or are they similar."""

    metric: str  # a DECIDABLE name: connection_time, ttfb, cpu_client, ...
    a: str  # a protocol, a client label, or TCP
    b: str
    similar_within: float | None = None  # an equivalence margin, a ratio above 1
    b_times: float = 1.0  # A is compared with this multiple of B ("about 2x": A above 1.5 B?)
    objects: tuple[str, ...] = ()  # judged in these objects' cells only (none: every cell)
    # judged in the conditions with these values only, axis -> values (none: every condition)
    where: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    @property
    def column(self) -> str:
        return DECIDABLE[self.metric]

    @property
    def b_label(self) -> str:
        """Side B as it is compared: "tls1.2", or scaled, "1.5x tls1.2"."""
        return self.scaled_b(self.b)

    def scaled_b(self, name: str) -> str:
        """Side B under another name (the report's display name), scaled as it is compared."""
        return name if self.b_times == 1.0 else f"{self.b_times:g}x {name}"

    def text(self) -> str:
        b = self.b_label
        metric = self.metric + (f" of {'+'.join(self.objects)}" if self.objects else "")
        metric += "".join(f" at {axis} {'/'.join(map(axis_value, values))}" for axis, values in self.where)
        if self.similar_within:
            return f"{self.a} vs {b} {metric}: similar within {self.similar_within:g}x?"
        return f"{self.a} vs {b} {metric}: which is lower?"

    def judges(self, obj: str) -> bool:
        return not self.objects or obj in self.objects

    def applies(self, values: Mapping[str, Any]) -> bool:
        """Whether a condition is judged: its values (a row carries its condition's)."""
        return all(any(_same(values.get(axis), v) for v in allowed) for axis, allowed in self.where)


def axis_value(value: Any) -> str:
    """A condition's axis value as lines and messages show it: 10, 0.5, india."""
    return f"{value:g}" if isinstance(value, Real) and not isinstance(value, bool) else str(value)


def _same(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, Real) and isinstance(value, Real) and not isinstance(value, bool):
        return math.isclose(float(value), float(wanted), rel_tol=1e-9, abs_tol=1e-9)
    return value == wanted


# What one sequential test decides: each cell (condition, server, object) alone, each
# server's cells of a condition in one test (its rounds: all its objects'), or every cell of a
# condition in one (all its servers' and objects'). The report's findings are judged per path
# and server (analysis/claims.py), as `per: server` decides them.
PER_CELL, PER_SERVER, PER_CONDITION = "cell", "server", "condition"
PER = (PER_CELL, PER_SERVER, PER_CONDITION)
ALL = "all"  # a pooled cell's object (and server, per condition)


@dataclass(frozen=True)
class AutoRepetitions:
    """`repetitions: {auto: {min, max, alpha, per}}`: rounds run until decided, at least min."""

    min: int
    max: int
    alpha: float = DEFAULT_ALPHA
    per: str = PER_CELL


def fewest_rounds(alpha: float, similar: bool = False) -> int:
    """The rounds a test needs even when every round agrees: its floor. A direction test
    needs wealth 2/alpha (two one-sided tests), an equivalence test 1/alpha on both sides."""
    bettor, goal = SignBettor(), (1.0 if similar else 2.0) / alpha
    while bettor.wealth < goal:
        bettor.update(True)
    return bettor.rounds


def pooled_cells(per: str, servers: int, objects: int) -> int:
    """The cells one test pools: the pairs a round gives it."""
    return {PER_CELL: 1, PER_SERVER: objects, PER_CONDITION: servers * objects}[per]


def floor_rounds(decides: Iterable[Decide], auto: AutoRepetitions, servers: int = 1, objects: int = 1) -> int:
    """The fewest rounds in which every line could be decided, and at least auto's min; a
    pooled test gets a pair a round from each of its cells."""
    fewest = (
        math.ceil(
            fewest_rounds(auto.alpha, bool(d.similar_within))
            / pooled_cells(auto.per, servers, len(d.objects) or objects)
        )
        for d in decides
    )
    return max(auto.min, *fewest)


TCP = "tcp"  # the group of every protocol over TCP
TCP_PROTOCOLS = tuple(p for p in PROTOCOLS if p.startswith("tls"))


def member(protocol: object, label: object, group: str) -> bool:
    """Whether a client (its protocol and label) is in a group."""
    return group in (protocol, label) or (group == TCP and protocol in TCP_PROTOCOLS)


def matches(row: Mapping[str, Any], group: str) -> bool:
    return member(row.get("protocol"), row.get("client"), group)


def repetition(row: Mapping[str, Any]) -> int | None:
    """A row's round: its repetition, however a table typed it (an integral float, numpy's)."""
    rep = row.get("repetition")
    if rep is None or isinstance(rep, bool | str):
        return None
    try:
        value = float(rep)
    except (TypeError, ValueError):
        return None
    return int(value) if math.isfinite(value) and value.is_integer() else None


@dataclass(frozen=True, order=True)
class Cell:
    condition: str  # its id, c0
    server: str
    object: str

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Cell:
        return cls(str(row["condition"]), str(row["server"]), str(row["object"]))

    def decided_in(self, per: str) -> Cell:
        """The cell whose test decides this one: itself, its server's or its condition's."""
        if per == PER_CELL:
            return self
        return Cell(self.condition, self.server if per == PER_SERVER else ALL, ALL)

    @property
    def pooled(self) -> bool:
        return self.object == ALL


def _value(rows: Sequence[Mapping[str, Any]], column: str) -> float:
    """One side of a round: its successful trial's value (the median of several, which a
    group of two client labels has); NaN when none succeeded, a round without a sign."""
    xs = []
    for r in rows:
        v = r.get(column)
        if not r.get("error") and isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(float(v))
    return statistics.median(xs) if xs else math.nan


def rounds(
    decide: Decide, rows: Iterable[Mapping[str, Any]], before: int | None = None, per: str = PER_CELL
) -> dict[Cell, list[tuple[float, float]]]:
    """Per deciding cell, its (A, B) pairs in round order, rounds below `before` only (all if
    None); a condition's pooled cell takes round 0 of each of its cells, then round 1, ...
    A round missing on one side (failed, or not yet run) gives NaN there: no sign."""
    out: dict[Cell, list[tuple[float, float]]] = {}
    for cell, pair in _in_round_order(decide, [rows], before):
        out.setdefault(cell.decided_in(per), []).append(pair)
    return out


def _sides(
    decide: Decide, rows: Iterable[Mapping[str, Any]], before: int | None = None
) -> dict[Cell, dict[int, tuple[float, float]]]:
    """Per cell, per round: (A's value, B's value times b_times)."""
    sides: dict[Cell, dict[int, tuple[list, list]]] = {}
    for r in rows:
        rep = repetition(r)
        if rep is None or (before is not None and rep >= before):
            continue
        in_a, in_b = matches(r, decide.a), matches(r, decide.b)
        if not (in_a or in_b) or not decide.judges(str(r.get("object"))) or not decide.applies(r):
            continue
        a, b = sides.setdefault(Cell.of(r), {}).setdefault(rep, ([], []))
        (a if in_a else b).append(r)
    column = decide.column
    return {
        cell: {rep: (_value(a, column), _value(b, column) * decide.b_times) for rep, (a, b) in by_rep.items()}
        for cell, by_rep in sides.items()
    }


def pooled(decide: Decide, runs: Iterable[Iterable[Mapping[str, Any]]]) -> list[tuple[float, float]]:
    """One claim's rounds over many cells (and runs, each its own rows): round 0 of every
    cell, then round 1, ... Rounds are independent pairs, so one sign test over all of them
    is as valid as one per cell, and decides a finding that spans cells sooner."""
    return [pair for _, pair in _in_round_order(decide, runs)]


def _in_round_order(
    decide: Decide, runs: Iterable[Iterable[Mapping[str, Any]]], before: int | None = None
) -> list[tuple[Cell, tuple[float, float]]]:
    """`_sides` of each run's rows flattened to (cell, pair) in round order: round 0 of every
    cell of every run (by run, then by cell), then round 1, ..."""
    keyed = []
    for i, rows in enumerate(runs):
        for cell, by_rep in _sides(decide, rows, before).items():
            keyed += [((rep, i, cell), pair) for rep, pair in by_rep.items()]
    return [(key[2], pair) for key, pair in sorted(keyed, key=lambda kv: kv[0])]


def signs(pairs: Iterable[tuple[float, float]]) -> tuple[int, int]:
    """Rounds in which A was above B, and below (ties and gaps aside)."""
    finite = [(a, b) for a, b in pairs if math.isfinite(a) and math.isfinite(b)]
    return sum(a > b for a, b in finite), sum(a < b for a, b in finite)


def judge(decide: Decide, pairs: list[tuple[float, float]], alpha: float) -> Verdict:
    if decide.similar_within:
        return equivalence(pairs, decide.similar_within, alpha)
    return direction(pairs, alpha)


@dataclass(frozen=True)
class CellVerdict:
    decide: Decide
    cell: Cell
    verdict: Verdict
    signs: tuple[int, int]  # rounds in which A was above B, and below (ties and gaps aside)

    @property
    def decided(self) -> bool:
        return self.verdict.decided

    def rounds_to_decide(self, alpha: float) -> int | None:
        """For an undecided direction: the rounds its observed effect would need."""
        if self.decide.similar_within:
            return None
        return pairs_needed(*self.signs, self.verdict.rounds, alpha)


def pairs_needed(above: int, below: int, pairs: int, alpha: float) -> int | None:
    """The pairs a direction test would need at the effect its signs show, ties counted as
    often as they came (two sessions without a stall say nothing): None without an effect."""
    if above + below == 0:
        return None
    signed = rounds_needed(above / (above + below), alpha)
    return math.ceil(signed * max(pairs, above + below) / (above + below)) if signed else None


def cell_verdicts(
    decides: Sequence[Decide],
    rows: Iterable[Mapping[str, Any]],
    alpha: float,
    cells: Iterable[Cell] = (),
    before: int | None = None,
    per: str = PER_CELL,
) -> list[CellVerdict]:
    """Every line's verdict in every deciding cell that has rows, and in `cells` (planned,
    perhaps not yet run: undecided with 0 rounds)."""
    rows = list(rows)
    planned = list(cells)
    out = []
    for decide in decides:
        by_cell = rounds(decide, rows, before, per)
        for cell in dict.fromkeys([*planned, *sorted(by_cell)]):
            pairs = by_cell.get(cell, [])
            out.append(CellVerdict(decide, cell, judge(decide, pairs, alpha), signs(pairs)))
    return out


def all_decided(verdicts: Sequence[CellVerdict]) -> bool:
    return bool(verdicts) and all(v.decided for v in verdicts)


def manifest_entries(
    verdicts: Sequence[CellVerdict],
    auto: AutoRepetitions | None,
    alpha: float,
    ran_rounds: Callable[[Decide], Mapping[Cell, int]],
) -> list[dict[str, Any]]:
    """What the manifest keeps of each verdict: the line, its cell, the decision, the rounds
    it took and why it stopped (ran_rounds: the rounds each cell ran in a line's objects)."""
    out = []
    for v in verdicts:
        ran = ran_rounds(v.decide).get(v.cell, 0)
        if v.decided:
            why = DECIDED
        elif auto is None:
            why = FIXED if ran else OPEN
        elif ran >= auto.max:
            why = CAP
        else:
            why = OPEN
        entry: dict[str, Any] = {
            "decide": v.decide.text(),
            "condition": v.cell.condition,
            "server": v.cell.server,
            "object": v.cell.object,
            "decision": v.verdict.decision,
            "answer": answer(v.decide, v.verdict.decision),
            # A cell's pairs are its rounds; a pooled cell has a pair per cell a round.
            "rounds": v.verdict.rounds if v.decided and not v.cell.pooled else ran,
            "pairs": v.verdict.rounds,
            "why": why,
            "a_above_b": v.signs[0],
            "a_below_b": v.signs[1],
            "evidence": {k: round(x, 3) for k, x in v.verdict.evidence.items()},
            "alpha": alpha,
        }
        if why in (CAP, FIXED):
            needed = v.rounds_to_decide(alpha)
            if needed and v.cell.pooled and v.verdict.rounds:  # pairs, at this run's per round
                needed = math.ceil(needed * ran / v.verdict.rounds)
            entry["rounds_needed"] = needed
        out.append(entry)
    return out


def answer(decide: Decide, decision: str) -> str:
    """A decision in the line's own names: "quic lower", "similar within 1.1x"."""
    if decision == "A < B":
        return f"{decide.a} lower"
    if decision == "A > B":
        return f"{decide.b_label} lower"
    if decision in ("similar", "different"):
        return f"{decision} {'within' if decision == 'similar' else 'beyond'} {decide.similar_within:g}x"
    return decision


def ran_rounds(rows: Iterable[Mapping[str, Any]], per: str = PER_CELL) -> dict[Cell, int]:
    """The rounds each deciding cell ran: its highest repetition, plus one."""
    out: dict[Cell, int] = {}
    for r in rows:
        rep = repetition(r)
        if rep is not None:
            cell = Cell.of(r).decided_in(per)
            out[cell] = max(out.get(cell, 0), rep + 1)
    return out


def summary_line(entry: Mapping[str, Any]) -> str:
    """One manifest entry as the run's console says it."""
    where = str(entry["condition"])
    where += "".join(f" {entry[k]}" for k in ("server", "object") if entry[k] != ALL)
    head = f"{where}: {entry['decide']} {entry['answer']}"
    if entry["why"] == DECIDED:
        return f"{head} after {entry['rounds']} rounds"
    tail = f" ({entry['a_above_b']} rounds A above B, {entry['a_below_b']} below"
    needed = entry.get("rounds_needed")
    tail += f"; about {needed} rounds would decide at this effect)" if needed else ")"
    return f"{head}: {entry['why']} after {entry['rounds']} rounds{tail}"


def run_summary(manifest: Mapping[str, Any], trials_run: int) -> str | None:
    """An auto run's trials against its plan at the cap, and whether every cell was decided;
    None for a run without decide lines."""
    entries = [e for e in manifest.get("decisions") or [] if isinstance(e, Mapping)]
    if not entries:
        return None
    planned = manifest.get("trials_total")
    undecided = [e for e in entries if e.get("why") != DECIDED]
    head = f"{manifest.get('run_id')}: {trials_run} trials"
    if isinstance(planned, int) and planned > trials_run and manifest.get("status") == "complete":
        head += f" of {planned} planned at the cap; {planned - trials_run} not needed"
    if not undecided:
        return f"{head}: every cell decided ({len(entries)} decisions)."
    return f"{head}: {len(undecided)} of {len(entries)} decisions not decided (see Decided as it ran)."
