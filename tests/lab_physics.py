"""What the labs teach, as checks on a reference the checker measured, and answers a student
gets wrong that are fixed here (not derived from the reference), each with the hint its FAIL
must give. Pure logic: tests/labs/test_lab_check.py runs it on fixed references,
tests/labs/test_lab_exercises.py on what the path measures."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from quicbed.analysis.physics import FRAME_BYTES, TCP_PAYLOAD, tcp_download_s
from quicbed.labs.exercises import EXERCISES, OBJECT, OBJECTS, Answers
from quicbed.topology.calibrate import GOODPUT_CEILING
from quicbed.topology.profiles import Profile, load_profile, parse_overrides
from quicbed.workloads.cloud import CLOUD_SIZES as FILES

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


# --- 3. head-of-line blocking: 30 objects of 5 KiB multiplexed on one fresh connection -------

# Round trips before an object's first byte: the handshake (TCP + TLS 1.3: 2; QUIC: 1; curl
# speaks TLS 1.3 to nginx) and the request's own.
PAGE_SETUP_RTTS = {"h2": 2 + 1, "h3": 1 + 1}


def page_rounds(profile: Profile) -> int:
    """Flights the server's slow start needs for the 30 answers (10, 20, 40, ... segments)."""
    segments = math.ceil(OBJECTS * FILES[OBJECT.split("/")[1]] / TCP_PAYLOAD)
    return max(1, math.ceil(math.log2(segments / 10 + 1)))


def page_ms(profile: Profile, http: str) -> tuple[float, float]:
    """The mean object time without loss: no object before its setup round trips; every
    object by then plus the flights of slow start, the last flight's bytes at line rate and
    RTT_SLACK of the RTT per round for the endpoints' own time (curl, nginx) on a shared host."""
    rtt = profile.rtt_ms
    wire_ms = (
        OBJECTS * FILES[OBJECT.split("/")[1]] * 8 * FRAME_BYTES / TCP_PAYLOAD / profile.down.rate_mbit / 1e3
    )
    rounds = PAGE_SETUP_RTTS[http] - 1 + page_rounds(profile)
    return PAGE_SETUP_RTTS[http] * rtt, rounds * rtt * (1 + RTT_SLACK) + wire_ms


RTT_SLACK = 0.1


def hol_violations(profile: Profile, ref: Answers) -> list[str]:
    out = []
    for http in ("h2", "h3"):
        lo, hi = page_ms(profile, http)
        key = f"{http}_ms_loss0"
        if not lo <= float(ref[key]) <= hi:
            out.append(f"{key} = {ref[key]}, the physics says {lo:g}..{hi:g} ms")
        # Loss never speeds a page up; at 5 % of ~110 packets nearly every page loses one, and
        # TCP holds every stream behind it for at least a round trip (head-of-line blocking).
        lossy, clean = float(ref[f"{http}_ms_loss5"]), float(ref[key])
        floor = clean + (HOL_STALL_RTTS * profile.rtt_ms if http == "h2" else 0)
        if lossy < floor * (1 - RTT_SLACK):
            out.append(
                f"{http}_ms_loss5 = {lossy}, below {floor:g} ms (the loss-free time"
                + (" plus a retransmission's round trip)" if http == "h2" else ")")
            )
    if ref["hurt_more"] != "h2":
        out.append(f"hurt_more = {ref['hurt_more']}: TCP's in-order delivery blocks every stream")
    return out


HOL_STALL_RTTS = 0.5  # the mean object waits at least half a retransmission round trip


# --- 4. congestion control at 2 % random loss ----------------------------------------------

CC_FILE = "1MB"
MATHIS_C = math.sqrt(3 / 2)


def mathis_mbit(profile: Profile) -> float:
    """Mathis et al.'s bound for loss-based TCP: C x MSS / (RTT x sqrt(p))."""
    return MATHIS_C * TCP_PAYLOAD * 8 / (profile.rtt_ms / 1e3 * math.sqrt(profile.down.loss_pct / 100)) / 1e6


def lossless_mbit(profile: Profile) -> float:
    """A fresh TLS 1.3 connection's 1 MiB download with no loss (analysis/physics.py's model:
    handshake, request, slow start to the BDP, the rest at line rate): what no loss-based
    sender beats, and what BBR, which does not read random loss as congestion, approaches."""
    size = FILES[CC_FILE]
    return size * 8 / tcp_download_s(size, profile.down.rate_mbit, profile.rtt_ms, 2) / 1e6


def cc_violations(profile: Profile, ref: Answers) -> list[str]:
    out = []
    mathis, lossless = mathis_mbit(profile), lossless_mbit(profile)
    cubic, bbr = float(ref["cubic_mbit"]), float(ref["bbr_mbit"])
    if not CUBIC_BAND[0] * mathis <= cubic <= CUBIC_BAND[1] * lossless:
        out.append(
            f"cubic_mbit = {cubic}, the Mathis bound is {mathis:.2f} Mbit/s, a lossless "
            f"download {lossless:.2f} (x{CUBIC_BAND})"
        )
    if not BBR_BAND[0] * lossless <= bbr <= BBR_BAND[1] * lossless:
        out.append(f"bbr_mbit = {bbr}, a lossless download is {lossless:.2f} Mbit/s (x{BBR_BAND})")
    if ref["faster"] != "bbr":
        out.append(f"faster = {ref['faster']}: random loss cuts CUBIC's window, not BBR's rate")
    return out


# A 1 MiB download is short: from half the Mathis bound (a retransmission timeout in it) to a
# lossless download (no loss-based sender beats it; a download whose losses come late runs
# slow start nearly through). Measured on india at 2 %: 0.97-6.47 Mbit/s over 12 downloads,
# against Mathis' 1.25 and the lossless 9.24.
CUBIC_BAND = (0.5, 1.0)
# ~14 random losses in its ~725 packets each cost BBR at most a recovery round trip, and its
# startup (gain 2.89 a round, not 2) may beat the slow-start model by about a round (measured
# here at 2 %: 5.61-8.47 of 9.24). 0.4 still puts BBR at three times the Mathis bound.
BBR_BAND = (0.4, 1.25)


# --- 5. video: the startup's round trips -----------------------------------------------------

# Requests one after another before the first frame: the manifest, the initialization segment,
# the first media segment (150-2500 kbit/s: 2 s of it fits the 20 Mbit/s link in well under a
# round trip). Each is a round trip at least, whatever the connection (a browser may open it
# ahead of the play request), and the handshake adds its own (QUIC 1, TLS 1.3 over TCP 2).
VIDEO_REQUESTS = 3
VIDEO_HANDSHAKE_RTTS = {"quic": 1, "tcp": 2}
# The browser's own time on top (the manifest parsed, media appended, the first frame decoded)
# on a shared 2-core host: up to 1.5 times the network's (measured here: QUIC 437 ms against
# 320, TLS 1.3 413 against 400), so the ceiling is 2.5 times the network's time.
STARTUP_CEILING = 2.5


def startup_band_ms(profile: Profile, label: str) -> tuple[float, float]:
    rtt = profile.rtt_ms
    return VIDEO_REQUESTS * rtt, (VIDEO_HANDSHAKE_RTTS[label] + VIDEO_REQUESTS) * rtt * STARTUP_CEILING


def video_violations(profile: Profile, ref: Answers) -> list[str]:
    out = []
    for label in VIDEO_HANDSHAKE_RTTS:
        key, (lo, hi) = f"startup_ms_{label}", startup_band_ms(profile, label)
        if not lo <= float(ref[key]) <= hi:
            out.append(f"{key} = {ref[key]}, the physics says {lo:g}..{hi:g} ms")
    return out


OTHER_PHYSICS = {"hol": hol_violations, "cc": cc_violations, "video": video_violations}


def physics_violations(name: str, profile: Profile, ref: Answers) -> list[str]:
    """Where a reference contradicts the physics exercise `name` teaches (empty: none)."""
    out = []
    rtt = profile.rtt_ms
    if name in OTHER_PHYSICS:
        return OTHER_PHYSICS[name](profile, ref)

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
        *hol_wrong(profile_of("hol")),
        *cc_wrong(profile_of("cc")),
        *video_wrong(profile_of("video")),
    ]


def hol_wrong(profile: Profile) -> list[Wrong]:
    rtt = profile.rtt_ms
    return [
        Wrong(
            "hol",
            "h2_ms_loss0",
            f"{rtt:g} ms",
            "the request's round trip alone: TCP's and TLS's handshakes not counted",
            "the mean of the 30",
            "too low",
        ),
        Wrong(
            "hol",
            "h3_ms_loss0",
            f"{rtt:g} ms",
            "the request's round trip alone: QUIC's handshake not counted",
            "--http3-only",
            "too low",
        ),
        Wrong(
            "hol",
            "h3_ms_loss0",
            f"{PAGE_SETUP_RTTS['h3'] * rtt / 1e3:g}",
            "curl's seconds (time_total) written as ms",
            "--http3-only",
            "too low",
        ),
        Wrong(
            "hol",
            "h2_ms_loss5",
            f"{rtt:g} ms",
            "the retransmission's round trip (the stall) given for the object's whole time",
            "the HTTP/2 command",
            "too low",
        ),
        Wrong(
            "hol",
            "hurt_more",
            "h3",
            "QUIC over UDP taken to suffer loss more",
            "subtract each protocol's 0 % time",
        ),
    ]


def cc_wrong(profile: Profile) -> list[Wrong]:
    mathis = mathis_mbit(profile)
    return [
        Wrong(
            "cc",
            "cubic_mbit",
            f"{profile.down.rate_mbit:g} Mbit/s",
            "the link's rate: random loss taken to cost CUBIC nothing",
            "`cc cubic`",
            "too high",
        ),
        Wrong(
            "cc",
            "cubic_mbit",
            f"{mathis / 8:.2f} Mbit/s",
            "the Mathis bound in MB/s written as Mbit/s (bytes for bits)",
            "`cc cubic`",
            "too low",
        ),
        Wrong(
            "cc",
            "bbr_mbit",
            f"{mathis:.2f} Mbit/s",
            "the Mathis bound of a loss-based sender applied to BBR",
            "`cc bbr`",
            "too low",
        ),
        Wrong(
            "cc", "faster", "cubic", "CUBIC taken to be faster under random loss", "compare the two goodputs"
        ),
    ]


def video_wrong(profile: Profile) -> list[Wrong]:
    rtt = profile.rtt_ms
    return [
        Wrong(
            "video",
            "startup_ms_quic",
            f"{rtt:g} ms",
            "the handshake alone: manifest and segments not counted",
            "`play quic`",
            "too low",
        ),
        Wrong(
            "video",
            "startup_ms_tcp",
            f"{VIDEO_HANDSHAKE_RTTS['tcp'] * rtt:g} ms",
            "TLS 1.3's handshake alone: manifest and segments not counted",
            "`play tls1.3`",
            "too low",
        ),
        Wrong(
            "video",
            "startup_ms_tcp",
            f"{startup_band_ms(profile, 'tcp')[0] / 1e3:g}",
            "seconds written as ms",
            "`play tls1.3`",
            "too low",
        ),
    ]


# The choices the physics fixes: TCP's in-order delivery holds every HTTP/2 stream behind a
# loss; random loss cuts CUBIC's window and not BBR's rate.
TEXTBOOK = {"hol": {"hurt_more": "h2"}, "cc": {"faster": "bbr"}}


def physics_answers(name: str, profile: Profile) -> str:
    """An answers file with the textbook's answers (those the physics fixes): a student who
    gives them passes against any correct path's reference."""
    if name == "round-trips":
        lines = [f"{k}: {v}" for k, v in HANDSHAKE_RTTS.items()] + [f"rtt_ms: {profile.rtt_ms:g} ms"]
    elif name == "queues":
        lines = [f"bdp_kbyte: {bdp_kbyte(profile):g} kB", "bufferbloat_queue: 200"]
    elif name in TEXTBOOK:
        lines = [f"{k}: {v}" for k, v in TEXTBOOK[name].items()]
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
