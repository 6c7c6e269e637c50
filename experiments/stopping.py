"""When a cell's rounds stop, under `repetitions: {auto: {min, max}}`.

A cell is one condition's server and object. Its trials run round by round (a round: every
client's trial of one repetition); before a trial of round r, the runner asks whether every
`decide:` line is decided in that cell on rounds 0..r-1 (analysis/decisions.py). With
`per: server` or `per: condition`, one test decides all of a server's (or the condition's)
cells: its rounds pair every object's (and server's) trials, so it decides in fewer rounds,
and the condition runs as one unit. If so, the
cell's later trials are not needed: they are not run, and the run says how many. A cell in
which no line pairs two clients (a server that speaks only one side) has nothing to decide
and stops after `min` rounds.

A decision only ever looks at complete earlier rounds, and once made it stays (the sequential
test reports its first crossing), so the same rows give the same stops in one session or in
several: a resumed run is seeded with the rows it stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from quicbed.analysis.decisions import PER_CELL, Cell, Decide, all_decided, cell_verdicts, member, repetition

from .matrix import Trial, trials
from .schema import Experiment


class Stopper:
    def __init__(self, exp: Experiment, stored: Iterable[Mapping[str, Any]] = ()):
        if exp.auto is None:
            raise ValueError("a Stopper is for auto repetitions")
        self.exp, self.auto = exp, exp.auto
        self.per = exp.auto.per
        # By deciding cell (a cell, or a condition's pooled cell): the latest row per trial id.
        self._rows: dict[Cell, dict[str, Mapping[str, Any]]] = {}
        self._paired: dict[str, dict[Cell, list[Decide]]] = {}  # per condition: each cell's lines
        self._stopped: dict[Cell, int] = {}  # cell -> the round it stopped before
        # By deciding cell, per (round, lines): whether the lines were decided on the rounds
        # before it. A pooled cell's trials of a round (each object's and client's) ask alike.
        self._decided: dict[Cell, dict[tuple[int, tuple[Decide, ...]], bool]] = {}
        for row in stored:
            self.add(row)

    def add(self, row: Mapping[str, Any]) -> None:
        pooled = Cell.of(row).decided_in(self.per)
        self._rows.setdefault(pooled, {})[str(row["trial_id"])] = row
        # A row of round r (a new trial's, or one measured again) changes the answers on the
        # rounds before a later round: those are asked afresh.
        rep, answers = repetition(row), self._decided.get(pooled, {})
        for key in [key for key in answers if rep is None or rep < key[0]]:
            del answers[key]

    def not_needed(self, trial: Trial) -> bool:
        """Whether every line that judges the trial's cell was decided on the rounds before
        the trial's (in the cell, or in the server's or condition's cells pooled)."""
        cell = Cell(trial.condition.id, trial.server, trial.object)
        if cell in self._stopped:
            return trial.repetition >= self._stopped[cell]
        if trial.repetition < self.auto.min:
            return False
        pooled = cell.decided_in(self.per)
        lines = [d for d in self._lines_of(trial).get(pooled, []) if d.judges(trial.object)]
        # Without a line, nothing to decide here: min rounds, as every cell gets.
        decided = not lines or self._decided_before(pooled, trial.repetition, tuple(lines))
        if decided:
            self._stopped[cell] = trial.repetition
        return decided

    def _decided_before(self, pooled: Cell, round_: int, lines: tuple[Decide, ...]) -> bool:
        """Whether every line is decided in the deciding cell on its rounds before round_:
        asked once, until a row of those rounds arrives (add)."""
        answers = self._decided.setdefault(pooled, {})
        if (round_, lines) not in answers:
            rows = self._rows.get(pooled, {}).values()
            answers[round_, lines] = all_decided(
                cell_verdicts(lines, rows, self.auto.alpha, [pooled], round_, self.per)
            )
        return answers[round_, lines]

    def _lines_of(self, trial: Trial) -> dict[Cell, list[Decide]]:
        cond = trial.condition
        if cond.id not in self._paired:
            self._paired[cond.id] = paired_lines(self.exp.decide, trials(self.exp, cond), self.per)
        return self._paired[cond.id]


def paired_lines(
    decides: Iterable[Decide], planned: Iterable[Trial], per: str = PER_CELL
) -> dict[Cell, list[Decide]]:
    """Per deciding cell, the decide lines that have a trial on both their sides in it (in
    one of a pooled cell's cells)."""
    clients: dict[Cell, set[tuple[str, str]]] = {}
    values: dict[Cell, dict[str, Any]] = {}
    for t in planned:
        cell = Cell(t.condition.id, t.server, t.object)
        clients.setdefault(cell, set()).add((t.client.protocol, t.client.label))
        values[cell] = t.condition.values
    lines = list(decides)

    def has(there: set[tuple[str, str]], group: str) -> bool:
        return any(member(protocol, label, group) for protocol, label in there)

    out: dict[Cell, list[Decide]] = {}
    for cell, there in clients.items():
        mine = out.setdefault(cell.decided_in(per), [])
        mine += [
            d
            for d in lines
            if d.judges(cell.object)
            and d.applies(values[cell])
            and has(there, d.a)
            and has(there, d.b)
            and d not in mine
        ]
    return out


def skipper(stopper: Stopper | None, count: Callable[[Trial], None]) -> Callable[[Trial], bool]:
    """measure_units' `not_needed`: whether a trial's cell is decided by `stopper` (with none,
    never). A decided trial is handed to `count`: it is counted, not run."""

    def not_needed(trial: Trial) -> bool:
        if stopper is None or not stopper.not_needed(trial):
            return False
        count(trial)
        return True

    return not_needed
