"""The lab checker's logic: answers files (units, counts, choices, located errors) and grading
against a reference with the stated tolerances. The measuring side runs on the path
(test_lab_exercises.py)."""

from __future__ import annotations

import lab_physics
import pytest

from quicbed.cli import main
from quicbed.labs.check import grade, parse_answers, report, solutions
from quicbed.labs.exercises import EXERCISES
from quicbed.yamlio import LocatedError, parse_source

RT = EXERCISES["round-trips"]
REFERENCE = {"rtt_ms": 80.4, "tls12_rtts": 3, "tls13_rtts": 2, "quic_rtts": 1, "quic_connection_ms": 84.0}


def _answers(text: str) -> dict:
    return parse_answers(RT, parse_source(text, "answers.yaml"))


def test_units_convert_and_all_right_answers_pass() -> None:
    answers = _answers(
        "rtt_ms: 0.0812 s\ntls12_rtts: 3\ntls13_rtts: 2\nquic_rtts: 1\n" "quic_connection_ms: 90 ms\n"
    )
    assert answers["rtt_ms"] == pytest.approx(81.2)
    verdicts = grade(RT, answers, REFERENCE)
    assert all(v.passed for v in verdicts)
    assert report(verdicts)[-1] == "5 of 5 answers pass"


def test_wrong_answers_fail_with_a_direction_and_a_hint_never_the_answer() -> None:
    answers = _answers("rtt_ms: 40 ms\ntls12_rtts: 2\ntls13_rtts: 2\nquic_rtts: 1\n")
    lines = report(grade(RT, answers, REFERENCE))
    assert lines[0].startswith("FAIL  rtt_ms: 40 ms  (too low: more than ±5% from the path's")
    assert not any("80.4" in line or ": 3" in line for line in lines)  # the reference stays hidden
    assert "hint: ping the server" in lines[0]
    assert lines[1].startswith("FAIL  tls12_rtts: 2") and "TCP's SYN" in lines[1]
    assert lines[4].startswith("FAIL  quic_connection_ms: (no answer)  (no answer; hint:")
    assert lines[-1] == "2 of 5 answers pass"


def test_tolerance_is_the_stated_one() -> None:
    q = {q.key: q for q in RT.questions}["rtt_ms"]
    inside = 80.4 * (1 + q.tolerance * 0.9)
    outside = 80.4 * (1 + q.tolerance * 1.1)
    assert grade(RT, {"rtt_ms": inside}, REFERENCE)[0].passed
    assert not grade(RT, {"rtt_ms": outside}, REFERENCE)[0].passed


def test_choices() -> None:
    cc = EXERCISES["cc"]
    ref = {"cubic_mbit": 0.9, "bbr_mbit": 15.0, "faster": "bbr"}
    answers = parse_answers(cc, parse_source("faster: cubic\n", "a.yaml"))
    assert not grade(cc, answers, ref)[2].passed
    with pytest.raises(LocatedError, match=r"^a.yaml:1: faster: 'reno' is not one of cubic, bbr"):
        parse_answers(cc, parse_source("faster: reno\n", "a.yaml"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rtt_ms: 80\nrtt: 3\n", "answers.yaml:2: rtt: no such question in round-trips"),
        ("rtt_ms: 161 Mbit/s\n", "answers.yaml:1: rtt_ms: unit 'Mbit/s' does not measure this"),
        ("tls12_rtts: 2.5\n", "answers.yaml:1: tls12_rtts: 2.5: expected a whole count"),
        ("tls12_rtts: [3]\n", "answers.yaml:1: tls12_rtts: expected a number"),
        ("rtt_ms: fast\n", "answers.yaml:1: rtt_ms: 'fast' is not a number with a unit (ms)"),
        ("- 3\n", "answers.yaml:1: answers: expected a mapping"),
    ],
)
def test_bad_answers_files_are_located(text: str, message: str) -> None:
    with pytest.raises(LocatedError) as info:
        _answers(text)
    assert str(info.value).startswith(message)


def test_bad_file_through_the_cli_is_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "answers.yaml"
    bad.write_text("rtt_ms: 160 ms\nquic_rtts: one\n")
    # Refused before anything is measured (so before the root check, too).
    assert main(["lab", "check", "round-trips", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"quicbed: {bad}:2: quic_rtts: 'one' is not a number"


def test_solutions_list_every_question_with_its_tolerance() -> None:
    lines = solutions(RT, REFERENCE)
    assert len(lines) == 1 + len(RT.questions)
    assert lines[1] == "rtt_ms: 80.4 ms  # ±5%  # the path's round-trip time"
    assert lines[2].startswith("tls12_rtts: 3  #")


@pytest.mark.parametrize("name", list(EXERCISES))
def test_solutions_output_is_an_answers_file_that_passes(name: str) -> None:
    """`--solutions > reference.yaml` gives instructors a file `lab check` accepts."""
    exercise = EXERCISES[name]
    ref = {q.key: (q.choices[-1] if q.choices else (3 if not q.unit else 12.5)) for q in exercise.questions}
    text = "\n".join(solutions(exercise, ref)) + "\n"
    answers = parse_answers(exercise, parse_source(text, "reference.yaml"))
    assert all(v.passed for v in grade(exercise, answers, ref))


@pytest.mark.parametrize("name", list(EXERCISES))
def test_every_exercise_has_its_handout_example_and_row_in_the_readme(name: str) -> None:
    from quicbed.paths import REPO

    exercise = EXERCISES[name]
    labs = REPO / "labs"
    handout = (labs / exercise.handout).read_text()
    assert f"quicbed lab check {name} answers.yaml" in handout
    # every graded key is asked in the handout, and no answer is written there
    assert all(f"`{q.key}`" in handout for q in exercise.questions)
    number = exercise.handout[:2]
    assert any(
        p.read_text().startswith(f'"""Lab {int(number)}.') for p in (labs / "examples").glob("*.py")
    ), f"no example script for lab {number}"
    assert f"`{name}`" in (labs / "README.md").read_text()


# --- the references against the physics the labs teach (tests/lab_physics.py) -----------------

# Stand-ins for what the checker measures on india: physics-consistent, with a path's noise.
MEASURED = {
    "round-trips": [
        REFERENCE,
        {"rtt_ms": 79.3, "tls12_rtts": 3, "tls13_rtts": 2, "quic_rtts": 1, "quic_connection_ms": 88.1},
    ],
    "queues": [
        {
            "bdp_kbyte": 200.0,
            "goodput_mbit_q20": 18.7,
            "loaded_rtt_ms_q20": 99.5,
            "goodput_mbit_q200": 19.1,
            "loaded_rtt_ms_q200": 268.0,
            "bufferbloat_queue": "200",
        }
    ],
    # measured on india here (uml router, a busy 2-core host)
    "hol": [
        {
            "h2_ms_loss0": 431.4,
            "h3_ms_loss0": 203.5,
            "h2_ms_loss5": 507.6,
            "h3_ms_loss5": 219.7,
            "hurt_more": "h2",
        }
    ],
    "cc": [{"cubic_mbit": 1.82, "bbr_mbit": 6.04, "faster": "bbr"}],
    "video": [
        {
            "startup_ms_quic": 437.1,
            "startup_ms_tcp": 413.4,
            "faster_start_loss5": "quic",
            "lower_quality_loss5": "tcp",
        }
    ],
}


def test_the_physics_holds_for_india() -> None:
    india = lab_physics.exercise_profile("round-trips")
    assert india.rtt_ms == 80 and india.down.rate_mbit == 20
    assert lab_physics.bdp_kbyte(india) == 200  # 20 Mbit/s x 80 ms = 1.6 Mbit = 200 kB
    for name, refs in MEASURED.items():
        profile = lab_physics.exercise_profile(name)
        for ref in refs:
            assert lab_physics.physics_violations(name, profile, ref) == [], (name, ref)


@pytest.mark.parametrize(
    ("name", "change", "named"),
    [
        ("round-trips", {"tls12_rtts": 2}, "tls12_rtts = 2, the handshake takes 3"),
        ("round-trips", {"tls13_rtts": 3}, "tls13_rtts = 3, the handshake takes 2"),
        ("round-trips", {"quic_rtts": 2}, "quic_rtts = 2, the handshake takes 1"),
        ("round-trips", {"rtt_ms": 81.0}, "rtt_ms = 81.0, the physics says 80 (±1%)"),
        ("round-trips", {"rtt_ms": 79.1}, "rtt_ms = 79.1, the physics says 80 (±1%)"),
        ("round-trips", {"quic_connection_ms": 165.0}, "quic_connection_ms = 165.0"),
        ("queues", {"bdp_kbyte": 1600.0}, "bdp_kbyte = 1600.0, the physics says 200 (±1%)"),
        ("queues", {"bdp_kbyte": 100.0}, "bdp_kbyte = 100.0"),
        ("queues", {"goodput_mbit_q200": 25.0}, "goodput_mbit_q200 = 25.0 above the link's 20"),
        ("queues", {"loaded_rtt_ms_q20": 60.0}, "loaded_rtt_ms_q20 = 60.0 below the idle RTT 80"),
        ("queues", {"bufferbloat_queue": "20"}, "bufferbloat_queue = 20"),
        # 3 round trips of setup (TCP, TLS 1.3, the request) at least; 4 of slow start at most
        ("hol", {"h2_ms_loss0": 200.0}, "h2_ms_loss0 = 200.0, the physics says 240..592"),
        (
            "hol",
            {"h3_ms_loss0": 600.0, "h3_ms_loss5": 650.0},
            "h3_ms_loss0 = 600.0, the physics says 160..504",
        ),
        ("hol", {"h2_ms_loss5": 420.0}, "h2_ms_loss5 = 420.0, below 471.4 ms"),  # no HoL stall
        ("hol", {"h3_ms_loss5": 150.0}, "h3_ms_loss5 = 150.0, below 203.5 ms"),
        ("hol", {"hurt_more": "h3"}, "hurt_more = h3: TCP's in-order delivery"),
        ("cc", {"cubic_mbit": 9.5}, "cubic_mbit = 9.5, the Mathis bound is 1.25"),  # beats no loss
        ("cc", {"cubic_mbit": 0.5}, "cubic_mbit = 0.5, the Mathis bound is 1.25"),
        ("cc", {"bbr_mbit": 2.0}, "bbr_mbit = 2.0, a lossless download is 9.24"),  # BBR as CUBIC
        ("cc", {"bbr_mbit": 19.0}, "bbr_mbit = 19.0, a lossless download is 9.24"),  # no slow start
        ("cc", {"faster": "cubic"}, "faster = cubic: random loss cuts"),
        ("video", {"startup_ms_quic": 200.0}, "startup_ms_quic = 200.0, the physics says 240..800"),
        ("video", {"startup_ms_quic": 900.0}, "startup_ms_quic = 900.0, the physics says 240..800"),
        ("video", {"startup_ms_tcp": 1100.0}, "startup_ms_tcp = 1100.0, the physics says 240..1000"),
    ],
)
def test_a_reference_against_the_physics_is_caught(name: str, change: dict, named: str) -> None:
    ref = MEASURED[name][0] | change
    problems = lab_physics.physics_violations(name, lab_physics.exercise_profile(name), ref)
    assert len(problems) == 1 and problems[0].startswith(named), problems


def test_the_known_wrong_answers_cover_the_lessons() -> None:
    wrong = lab_physics.known_wrong()
    by_key = {(w.exercise, w.key, str(w.answer)) for w in wrong}
    assert ("round-trips", "tls12_rtts", "2") in by_key  # TLS 1.2 as 2 RTT
    assert ("round-trips", "rtt_ms", "96 ms") in by_key  # the RTT 20 % off
    assert ("round-trips", "tls13_rtts", "1") in by_key  # another protocol's count
    assert ("hol", "h2_ms_loss0", "80 ms") in by_key  # the handshakes not counted
    assert ("hol", "h3_ms_loss0", "0.16") in by_key  # curl's seconds as ms
    assert ("cc", "cubic_mbit", "0.16 Mbit/s") in by_key  # bytes for bits
    assert ("cc", "bbr_mbit", "1.25 Mbit/s") in by_key  # a loss-based bound for BBR
    assert ("video", "startup_ms_quic", "80 ms") in by_key  # the handshake alone
    assert {w.exercise for w in wrong} == set(EXERCISES)  # every exercise has its mistakes


@pytest.mark.parametrize("name", list(MEASURED))
def test_known_wrong_answers_fail_with_their_hint(name: str) -> None:
    for ref in MEASURED[name]:
        wrong = [w for w in lab_physics.known_wrong() if w.exercise == name]
        assert wrong
        problems = [p for w in wrong if (p := lab_physics.wrong_graded_right(w, ref))]
        assert problems == [], problems


@pytest.mark.parametrize("name", [n for n in MEASURED if n != "video"])  # video: none fixed
def test_the_textbook_answers_pass(name: str) -> None:
    text = lab_physics.physics_answers(name, lab_physics.exercise_profile(name))
    for ref in MEASURED[name]:
        keys = [line.split(":")[0] for line in text.splitlines()]
        assert keys
        for key in keys:
            passed, line = lab_physics.graded_line(name, text, ref, key)
            assert passed and line.startswith(f"pass  {key}: "), line


def test_a_grader_that_passes_everything_is_caught() -> None:
    """The check is not a no-op: a reference equal to the wrong answers grades them pass."""
    w = next(w for w in lab_physics.known_wrong() if w.key == "tls12_rtts")
    assert lab_physics.wrong_graded_right(w, REFERENCE | {"tls12_rtts": 2}) is not None
    w = next(w for w in lab_physics.known_wrong() if w.side == "too high")
    assert "not 'too high'" in (lab_physics.wrong_graded_right(w, REFERENCE | {"rtt_ms": 200.0}) or "")
