"""What the labs teach, as checks on a reference the checker measured, and answers a student
gets wrong that are fixed here (not derived from the reference), each with the hint its FAIL
must give. Pure logic: tests/labs/test_lab_check.py runs it on fixed references,
tests/labs/test_lab_exercises.py on what the path measures."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from quicbed.labs.exercises import EXERCISES, Answers
from quicbed.topology.calibrate import GOODPUT_CEILING
from quicbed.topology.profiles import Profile, load_profile, parse_overrides

# Round trips before the request can leave: TCP's handshake (1) plus TLS 1.2's two flights,
# or TLS 1.3's one; QUIC's Initial carries the ClientHello (1).
HANDSHAKE_RTTS = {"tls12_rtts": 3, "tls13_rtts": 2, "quic_rtts": 1}
RTT_TOLERANCE = 0.01  # an idle ping median against the profile's RTT


def exercise_profile(name: str) -> Profile:
    exercise = EXERCISES[name]
    return load_profile(exercise.profile, parse_overrides(list(exercise.overrides)))


def bdp_kbyte(profile: Profile) -> float:
    """The downstream bandwidth-delay product: rate (bit/s) x RTT (s) / 8, in kB."""
    return profile.down.rate_mbit * 1e6 * profile.rtt_ms / 1e3 / 8 / 1e3


def physics_violations(name: str, profile: Profile, ref: Answers) -> list[str]:
    """Where a reference contradicts the physics exercise `name` teaches (empty: none)."""
    out = []
    rtt = profile.rtt_ms

    def near(key: str, want: float, tol: float) -> None:
        if not math.isclose(float(ref[key]), want, rel_tol=tol):
            out.append(f"{key} = {ref[key]}, the physics says {want:g} (±{tol:.0%})")

    if name == "round-trips":
        for key, rtts in HANDSHAKE_RTTS.items():
            if float(ref[key]) != rtts:
                out.append(f"{key} = {ref[key]}, the handshake takes {rtts}")
        near("rtt_ms", rtt, RTT_TOLERANCE)
        # one round trip of QUIC's handshake: within the question's own tolerance of the RTT
        near("quic_connection_ms", float(ref["rtt_ms"]), 0.15)
    elif name == "queues":
        near("bdp_kbyte", bdp_kbyte(profile), RTT_TOLERANCE)
        for queue in (20, 200):
            goodput, loaded = float(ref[f"goodput_mbit_q{queue}"]), float(ref[f"loaded_rtt_ms_q{queue}"])
            if goodput > profile.down.rate_mbit * GOODPUT_CEILING:
                out.append(
                    f"goodput_mbit_q{queue} = {goodput} above the link's "
                    f"{profile.down.rate_mbit:g} Mbit/s"
                )
            if loaded < rtt * (1 - RTT_TOLERANCE):
                out.append(f"loaded_rtt_ms_q{queue} = {loaded} below the idle RTT {rtt:g} ms")
        if ref["bufferbloat_queue"] != "200":
            out.append(
                f"bufferbloat_queue = {ref['bufferbloat_queue']}: a full 200 ms queue "
                "must add more delay than a 20 ms one"
            )
    return out


@dataclass(frozen=True)
class Wrong:
    """One wrong answer to one question, and what its FAIL line must say."""

    exercise: str
    key: str
    answer: Any  # as a student writes it in the answers file
    why: str
    hint: str  # a part of the question's hint
    side: str = ""  # "too high" / "too low" for numbers with a unit


def known_wrong(profile_of: Any = exercise_profile) -> list[Wrong]:
    """Answers wrong by the physics, whatever a correct path measures."""
    india = profile_of("round-trips")
    queues = profile_of("queues")
    return [
        Wrong("round-trips", "tls12_rtts", 2, "TLS 1.2 counted as TLS 1.3", "count TCP's SYN/SYN-ACK", ""),
        Wrong(
            "round-trips",
            "tls13_rtts",
            1,
            "QUIC's count given for TLS 1.3 (the wrong " "protocol)",
            "TLS 1.3 sends the key share in the ClientHello",
        ),
        Wrong(
            "round-trips",
            "quic_rtts",
            2,
            "TLS 1.3's count given for QUIC (the wrong " "protocol)",
            "its Initial carries the ClientHello",
        ),
        Wrong(
            "round-trips",
            "rtt_ms",
            f"{india.rtt_ms * 1.2:g} ms",
            "the RTT 20 % high",
            "ping the server",
            "too high",
        ),
        Wrong(
            "round-trips",
            "rtt_ms",
            f"{india.rtt_ms * 0.8 / 1e3:g} s",
            "the RTT 20 % low",
            "ping the server",
            "too low",
        ),
        Wrong(
            "round-trips",
            "rtt_ms",
            f"{india.rtt_ms / 2:g} ms",
            "the one-way delay",
            "ping the server",
            "too low",
        ),
        Wrong(
            "queues",
            "bdp_kbyte",
            f"{bdp_kbyte(queues) * 8:g} kB",
            "bits taken for bytes",
            "/ 8 gives bytes",
            "too high",
        ),
        Wrong(
            "queues",
            "bdp_kbyte",
            f"{bdp_kbyte(queues) / 2:g} kB",
            "the one-way delay",
            "rate (bit/s) x RTT (s)",
            "too low",
        ),
        Wrong("queues", "bufferbloat_queue", "20", "the short queue", "compare the two loaded RTTs"),
    ]


def physics_answers(name: str, profile: Profile) -> str:
    """An answers file with the textbook's answers (those the physics fixes): a student who
    gives them passes against any correct path's reference."""
    if name == "round-trips":
        lines = [f"{k}: {v}" for k, v in HANDSHAKE_RTTS.items()] + [f"rtt_ms: {profile.rtt_ms:g} ms"]
    elif name == "queues":
        lines = [f"bdp_kbyte: {bdp_kbyte(profile):g} kB", "bufferbloat_queue: 200"]
    else:
        return ""  # nothing the physics fixes alone: its answers are the path's to measure
    return "\n".join(lines) + "\n"


def graded_line(exercise: str, text: str, reference: Answers, key: str) -> tuple[bool, str]:
    """The verdict and report line of question `key` for the answers file `text`."""
    from quicbed.labs.check import grade, parse_answers, report
    from quicbed.yamlio import parse_source

    ex = EXERCISES[exercise]
    verdicts = grade(ex, parse_answers(ex, parse_source(text, "answers.yaml")), reference)
    lines = report(verdicts)
    (i,) = [n for n, v in enumerate(verdicts) if v.question.key == key]
    return verdicts[i].passed, lines[i]


def wrong_graded_right(w: Wrong, reference: Answers) -> str | None:
    """None when the wrong answer is graded FAIL with its hint (and direction); else why not."""
    passed, line = graded_line(w.exercise, f"{w.key}: {w.answer}\n", reference, w.key)
    if passed or not line.startswith(f"FAIL  {w.key}: "):
        return f"{w.why}: graded {line!r}"
    if "hint: " not in line or w.hint not in line.split("hint: ", 1)[1]:
        return f"{w.why}: no hint {w.hint!r} in {line!r}"
    if w.side and f"({w.side}:" not in line:
        return f"{w.why}: not {w.side!r} in {line!r}"
    return None
