"""`quicbed lab check EXERCISE ANSWERS.yaml`: grade a student's answers against what the
testbed measures on the exercise's path, now, on this host.

The answers file is flat YAML, one key per question (`quicbed lab check EXERCISE --solutions`
lists them with the reference values): numbers with a unit (`rtt_ms: 161 ms`, `0.161 s` is the
same), counts (`tls12_rtts: 3`) and choices (`faster: bbr`). Numbers pass within the question's
stated relative tolerance, counts and choices must match. A bad file is refused before anything
is measured, with `file:line: field: message`.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quicbed.errors import EnvironmentProblem, InputError
from quicbed.labs.exercises import EXERCISES, Answers, Exercise, Question
from quicbed.yamlio import LocatedError, Source, load_source

# unit -> (family's base unit, factor to it)
UNITS = {
    "ms": ("ms", 1.0),
    "s": ("ms", 1e3),
    "us": ("ms", 1e-3),
    "Mbit/s": ("Mbit/s", 1.0),
    "kbit/s": ("Mbit/s", 1e-3),
    "Gbit/s": ("Mbit/s", 1e3),
    "B": ("kB", 1e-3),
    "kB": ("kB", 1.0),
    "KB": ("kB", 1.0),
    "MB": ("kB", 1e3),
}
NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")


@dataclass(frozen=True)
class Verdict:
    question: Question
    answer: float | str | None
    reference: float | str
    passed: bool


def get_exercise(name: str) -> Exercise:
    if name not in EXERCISES:
        raise InputError(f"lab check: no exercise {name!r} (one of: {', '.join(EXERCISES)})")
    return EXERCISES[name]


def parse_answers(exercise: Exercise, source: Source) -> Answers:
    """The answers in the question's base unit; every problem located in the file."""
    if not isinstance(source.data, dict):
        raise LocatedError(source.file, 1, "answers", "expected a mapping of question: answer")
    questions = {q.key: q for q in exercise.questions}
    answers: Answers = {}
    for key, value in source.data.items():
        if key not in questions:
            raise source.error(
                (key,), f"no such question in {exercise.name} " f"(questions: {', '.join(questions)})"
            )
        answers[key] = _parse_one(questions[key], value, source, (key,))
    return answers


def _parse_one(q: Question, value: Any, source: Source, path: tuple[str]) -> float | str:
    if q.choices:
        text = str(value).strip()
        if text not in q.choices:
            raise source.error(path, f"{text!r} is not one of {', '.join(q.choices)}")
        return text
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise source.error(path, "expected a number" + (f" with a unit ({q.unit})" if q.unit else ""))
    match = NUMBER.match(str(value))
    if not match:
        raise source.error(
            path, f"{value!r} is not a number" + (f" with a unit ({q.unit})" if q.unit else "")
        )
    number, unit = float(match.group(1)), match.group(2)
    if not q.unit:
        if unit or number != int(number):
            raise source.error(path, f"{value!r}: expected a whole count, no unit")
        return number
    unit = unit or q.unit
    if unit not in UNITS or UNITS[unit][0] != UNITS[q.unit][0]:
        same = [u for u, (base, _) in UNITS.items() if base == UNITS[q.unit][0]]
        raise source.error(path, f"unit {unit!r} does not measure this (use {', '.join(same)})")
    return number * UNITS[unit][1] / UNITS[q.unit][1]


def grade(exercise: Exercise, answers: Answers, reference: Answers) -> list[Verdict]:
    verdicts = []
    for q in exercise.questions:
        answer, ref = answers.get(q.key), reference[q.key]
        if answer is None:
            passed = False
        elif q.choices:
            passed = answer == ref
        elif not q.unit:
            passed = float(answer) == float(ref)
        else:
            passed = math.isclose(float(answer), float(ref), rel_tol=q.tolerance)
        verdicts.append(Verdict(q, answer, ref, passed))
    return verdicts


def _shown(q: Question, value: float | str | None) -> str:
    if value is None:
        return "(no answer)"
    if q.choices:
        return str(value)
    return f"{float(value):g}" + (f" {q.unit}" if q.unit else "")


def _miss(q: Question, v: Verdict) -> str:
    """How an answer missed, without the measured value: the grader is run again and again,
    and a value it printed would be the answer (instructors see it with --solutions)."""
    if v.answer is None:
        return "no answer"
    if q.choices or not q.unit:
        return "not what the path shows"
    side = "too high" if float(v.answer) > float(v.reference) else "too low"
    return f"{side}: more than ±{q.tolerance:.0%} from the path's own measurement"


def report(verdicts: list[Verdict]) -> list[str]:
    lines = []
    for v in verdicts:
        q = v.question
        mark = "pass" if v.passed else "FAIL"
        line = f"{mark}  {q.key}: {_shown(q, v.answer)}"
        if not v.passed:
            line += f"  ({_miss(q, v)}; hint: {q.hint})"
        lines.append(line)
    passed = sum(v.passed for v in verdicts)
    lines.append(f"{passed} of {len(verdicts)} answers pass")
    return lines


def solutions(exercise: Exercise, reference: Answers) -> list[str]:
    lines = [f"# {exercise.title}: reference answers measured on this host's path now"]
    for q in exercise.questions:
        tol = f"  # ±{q.tolerance:.0%}" if q.unit else ""
        lines.append(f"{q.key}: {_shown(q, reference[q.key])}{tol}  # {q.text}")
    return lines


def _to_stderr(message: str) -> None:
    # stdout stays the answers' YAML: `--solutions > reference.yaml` is a valid answers file.
    print(message, file=sys.stderr, flush=True)


def measure(exercise: Exercise, say: Any = _to_stderr, backend: str = "auto") -> Answers:
    """Bring the exercise's path up as a lab does (on `backend`, as `quicbed lab --backend`),
    measure every answer, tear down."""
    from quicbed.experiments.options import PathOptions
    from quicbed.labs.lab import lab_path
    from quicbed.topology.profiles import load_profile, parse_overrides

    profile = load_profile(exercise.profile, parse_overrides(list(exercise.overrides)))
    say(f"measuring {exercise.name} on {profile.name} ({profile.description}) ...")
    with lab_path(profile, path=PathOptions(backend=backend)) as tb:
        return exercise.measure(tb)


def main_check(args: argparse.Namespace) -> int:
    if not args.rest or len(args.rest) > 2 or (len(args.rest) == 1) != args.solutions:
        raise InputError(
            "usage: quicbed lab check EXERCISE ANSWERS.yaml, or quicbed lab check "
            f"EXERCISE --solutions (exercises: {', '.join(EXERCISES)})"
        )
    exercise = get_exercise(args.rest[0])
    answers = None if args.solutions else parse_answers(exercise, load_source(Path(args.rest[1])))
    if os.geteuid() != 0:
        raise EnvironmentProblem("lab check measures the path: needs root (namespaces, tc, Docker)")
    reference = measure(exercise, backend=args.backend)
    if answers is None:
        print("\n".join(solutions(exercise, reference)))
        return 0
    verdicts = grade(exercise, answers, reference)
    print("\n".join(report(verdicts)))
    return 0 if all(v.passed for v in verdicts) else 1
