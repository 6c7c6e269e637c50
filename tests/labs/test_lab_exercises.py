"""Every handout walked on the real path, and its checker against the path's own answers.

For each exercise: a lab started as the handout says (its ```sh `quicbed lab` line) runs every
line of the handout's ```lab block at the prompt, and nothing fails; then the checker measures
the exercise's path (one more bring-up) and grades the reference answers (all pass) and wrong
ones (every one fails, with a hint). The reference is then held against the physics each
lab teaches, computed from the profile (tests/lab_physics.py: 3/2/1 handshake round trips, the
RTT within 1 %, BDP = rate x RTT; hol's setup round trips and slow-start flights, and a lossy
HTTP/2 page slower by a head-of-line stall; CUBIC near the Mathis bound, BBR near a lossless
download; a video's startup of its requests' round trips), textbook answers pass against it,
and fixed wrong answers of every exercise, not derived from it (TLS 1.2 as 2 RTT, the one-way
delay, bits for bytes, seconds for ms, the handshakes not counted, the link's rate for
CUBIC's), fail with their hint. About a minute per exercise."""

from __future__ import annotations

import os
import re
import shlex

import lab_physics
import pytest
from lab_session import LabSession

from quicbed.labs import exercises
from quicbed.labs.check import grade, measure, parse_answers, report, solutions
from quicbed.labs.exercises import EXERCISES
from quicbed.paths import REPO
from quicbed.yamlio import parse_source

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]
FAILURES = re.compile(
    r"command not found|No such file|\*\*\* Unknown command|Traceback|"
    r'"error":"[^"]|^link: |^cc: |^play: |curl: \(\d+\)',
    re.MULTILINE,
)
# What each handout's commands must show (beyond failing nowhere).
SHOWS = {
    "round-trips": [r"Client Hello", r"Server Hello", r"\bQUIC\b|Initial", r"2 received|5 received"],
    "queues": [r'"throughput_mbps": ?\d', r"rtt min/avg/max/mdev"],
    "hol": [r"h2 mean \d+\.\d ms over 30 objects", r"h3 mean \d+\.\d ms over 30 objects"],
    "cc": [r'"throughput_mbps": ?\d', r"TCP congestion control: bbr"],
    "video": [
        r"quic: startup \d+ ms, \d+ stalls",
        r"tls1\.3: startup \d+ ms, \d+ stalls",
        r"loss_pct=5|5 % loss",
    ],
}


def handout(name: str) -> tuple[list[str], list[str]]:
    """The handout's `quicbed lab` arguments and its lab commands."""
    text = (REPO / "labs" / EXERCISES[name].handout).read_text()
    start = re.search(r"```sh\n(?:sudo )?quicbed lab (.+)\n", text)
    block = re.search(r"```lab\n(.*?)```", text, re.DOTALL)
    assert start and block, f"{name}: no ```sh quicbed lab line or ```lab block"
    return shlex.split(start.group(1)), [ln for ln in block.group(1).splitlines() if ln.strip()]


def wrong(answers: dict) -> dict:
    """Every answer wrong: numbers doubled (plus one: counts), choices swapped."""
    out = {}
    for q in EXERCISES_BY_KEY.values():
        if q.key in answers:
            value = answers[q.key]
            out[q.key] = next(c for c in q.choices if c != value) if q.choices else float(value) * 2 + 1
    return out


TEST_PLAY_SECONDS = 4
EXERCISES_BY_KEY = {q.key: q for e in EXERCISES.values() for q in e.questions}


@pytest.mark.parametrize("name", list(EXERCISES))
def test_handout_walks_and_checker_grades(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    args, lines = handout(name)
    # Playbacks of a few seconds show every line works; the handout's 20 s adds nothing here.
    lines = [f"{line} {TEST_PLAY_SECONDS}" if re.fullmatch(r"play \S+", line) else line for line in lines]
    # A playback line walks once (a browser's start and a playback, 12 s each): its second
    # time, under loss, is the checker's below, which plays both protocols at 0 and 5 %.
    lines = [line for i, line in enumerate(lines) if not line.startswith("play ") or line not in lines[:i]]
    # One download of each shows the line works; the checker below measures the handout's three.
    lines = [line.replace(" -n 3 ", " -n 1 ") if name == "cc" else line for line in lines]
    monkeypatch.setattr(exercises, "PLAY_SECONDS", TEST_PLAY_SECONDS)
    lab = LabSession(args[0], f"walk{name[:4].replace('-', '')}", *args[1:], "--no-calibrate")
    try:
        lab.started()
        output = "".join(lab.command(line) for line in lines)
        os.write(lab.master, b"exit\n")
        assert lab.wait(60) == 0
    finally:
        lab.close()
    bad = FAILURES.search(output)
    assert not bad, f"{name}: {bad.group(0)!r} in:\n{output[-3000:]}"
    for pattern in SHOWS[name]:
        assert re.search(pattern, output), f"{name}: no {pattern!r} in:\n{output[-3000:]}"

    exercise = EXERCISES[name]
    reference = measure(exercise, say=print)
    assert set(reference) == {q.key for q in exercise.questions}
    # The reference as `--solutions` prints it, read back as an answers file: all pass.
    text = "\n".join(solutions(exercise, reference)) + "\n"
    answers = parse_answers(exercise, parse_source(text, "reference.yaml"))
    assert all(v.passed for v in grade(exercise, answers, reference)), text
    verdicts = grade(exercise, wrong(reference), reference)
    assert not any(v.passed for v in verdicts), report(verdicts)
    assert all("hint: " in line for line in report(verdicts)[:-1])
    print(name, reference)

    # Against physics, not against itself.
    profile = lab_physics.exercise_profile(name)
    assert lab_physics.physics_violations(name, profile, reference) == [], reference
    textbook = lab_physics.physics_answers(name, profile)
    for key in [line.split(":")[0] for line in textbook.splitlines()]:
        passed, line = lab_physics.graded_line(name, textbook, reference, key)
        assert passed, (line, reference)
    fixed_wrong = [w for w in lab_physics.known_wrong() if w.exercise == name]
    problems = [p for w in fixed_wrong if (p := lab_physics.wrong_graded_right(w, reference))]
    assert problems == [], (problems, reference)
