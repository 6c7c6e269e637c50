"""The course exercises as data, and how the testbed measures each one's answers itself.

Each exercise names its path (a profile and overrides, as `quicbed lab` takes them) and its
questions: a number with a unit and a relative tolerance, an exact count, or a short choice.
`measure` brings nothing up: it gets the lab's testbed (the path and an nginx server) and
measures every answer on it with the same tools the handout (labs/NN-*.md) has the student
use, so the reference is what this host's path gives, not a number in a key.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

SERVER_URL = "https://server.quicbed"
CA = "/etc/quicbed/pki/ca.pem"
Answers = dict[str, float | str]


@dataclass(frozen=True)
class Question:
    key: str
    text: str
    hint: str
    unit: str = ""  # "" for a count or a choice; else a unit of labs/units.py's families
    tolerance: float = 0.0  # relative, for numbers with a unit; counts must match exactly
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exercise:
    name: str
    title: str
    handout: str
    profile: str
    overrides: tuple[str, ...]
    questions: tuple[Question, ...]
    measure: Callable[[Any], Answers]


# --- tools in the client container -----------------------------------------------------------


def perf_rows(
    tb: Any, tool: str, path: str, reps: int, options: dict[str, str] | None = None, timeout: float = 120
) -> list[dict[str, Any]]:
    """`reps` rows of tls_perf/quic_perf fetching `path` from the lab's server, run in the client
    container with the arguments a run gives them (clients/tools.py; errors raise)."""
    from quicbed.clients.tools import tool_argv
    from quicbed.topology.net import server_address

    argv = tool_argv(tool, path, server_address(0), options=options, repetitions=reps, cpu=False)
    proc = tb.client.exec(argv, timeout=timeout)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    bad = [r["error"] for r in rows if r.get("error")] or ([] if rows else [proc.stderr])
    if bad:
        raise RuntimeError(f"{tool} {path} {options or ''}: {bad[0]}")
    return rows


def median_of(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def rtt_ms(tb: Any) -> float:
    return statistics.median(tb.ping(count=20, interval=0.05))


def set_link(tb: Any, **down_up: Any) -> None:
    """The profile's link with these LinkSpec fields changed in both directions (queue_ms
    only downstream: the bottleneck a download fills)."""
    down = replace(tb.profile.down, **down_up)
    up = replace(tb.profile.up, **{k: v for k, v in down_up.items() if k != "queue_ms"})
    tb.apply_link(down, up)


def set_congestion_control(tb: Any, name: str) -> None:
    """The default TCP congestion control in every host; a download's sender is the server,
    whose accepted connections take the namespace default at accept time."""
    from quicbed.topology.net import allow_congestion_control

    allow_congestion_control(name)
    for host in (tb.client, *tb.servers):
        host.run(["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={name}"])


# --- 1. count the round trips ----------------------------------------------------------------

HANDSHAKES = {
    "tls12": ("tls_perf", {"tls": "1.2"}),
    "tls13": ("tls_perf", {"tls": "1.3"}),
    "quic": ("quic_perf", {}),
}


def measure_round_trips(tb: Any) -> Answers:
    rtt = rtt_ms(tb)
    answers: Answers = {"rtt_ms": round(rtt, 1)}
    for label, (tool, options) in HANDSHAKES.items():
        rows = perf_rows(tb, tool, "web/index.html", 3, options)
        connection = median_of(rows, "connection_time_ms")
        answers[f"{label}_rtts"] = round(connection / rtt)
        if label == "quic":
            answers["quic_connection_ms"] = round(connection, 1)
    return answers


# --- 2. bandwidth-delay product and queues -----------------------------------------------------


def loaded(tb: Any, queue_ms: float) -> tuple[float, float]:
    """Goodput (Mbit/s) of a 10 MB download, and the median ping RTT (ms) during it."""
    set_link(tb, queue_ms=queue_ms)
    from quicbed.clients.tools import tool_argv
    from quicbed.topology.net import server_address

    argv = tool_argv("tls_perf", "cloud/10MB", server_address(0), cpu=False)
    download = subprocess.Popen(
        ["docker", "exec", tb.client.container, *argv], stdout=subprocess.PIPE, text=True
    )
    try:
        time.sleep(1.5)  # past slow start: the queue has filled
        samples = tb.ping(count=20, interval=0.1)
        out, _ = download.communicate(timeout=120)
    finally:
        if download.poll() is None:
            download.kill()
    row = json.loads(out.splitlines()[-1])
    if row.get("error"):
        raise RuntimeError(f"the download failed: {row['error']}")
    return float(row["throughput_mbps"]), statistics.median(samples)


def measure_queues(tb: Any) -> Answers:
    down = tb.profile.down
    answers: Answers = {"bdp_kbyte": round(down.rate_mbit * 1e6 * tb.profile.rtt_ms / 1e3 / 8 / 1e3, 1)}
    loaded_rtt = {}
    for queue in (20, 200):
        goodput, rtt = loaded(tb, queue)
        answers[f"goodput_mbit_q{queue}"] = round(goodput, 2)
        loaded_rtt[queue] = answers[f"loaded_rtt_ms_q{queue}"] = round(rtt, 1)
    tb.apply_link(tb.profile.down, tb.profile.up)
    answers["bufferbloat_queue"] = "200" if loaded_rtt[200] > loaded_rtt[20] else "20"
    return answers


# --- 3. loss and head-of-line blocking ---------------------------------------------------------

OBJECTS = 30
OBJECT = "cloud/5KB"  # small objects: a page's many resources


def page_command(http: str) -> list[str]:
    """curl fetching OBJECTS objects over one connection, multiplexed; per object, when its
    connection was up and when it completed."""
    args = [
        "curl",
        "-s",
        "--cacert",
        CA,
        http,
        "--parallel",
        "--parallel-max",
        str(OBJECTS),
        "-w",
        "%{time_appconnect} %{time_total}\\n",
    ]
    for i in range(OBJECTS):
        args += ["-o", "/dev/null", f"{SERVER_URL}/{OBJECT}?i={i}"]
    return args


@dataclass(frozen=True)
class PageLoad:
    mean_ms: float  # the mean object completion time: what the handout's awk prints
    data_ms: float  # the same from the moment the connection was up


def page_load(tb: Any, http: str) -> PageLoad:
    proc = tb.client.exec(page_command(http), timeout=120)
    rows = [[float(v) * 1e3 for v in line.split()] for line in proc.stdout.splitlines() if line.strip()]
    if len(rows) != OBJECTS or any(len(r) != 2 for r in rows):
        raise RuntimeError(f"curl {http}: {len(rows)} of {OBJECTS} objects: {proc.stderr}")
    connected = max(r[0] for r in rows)  # the one connection; the multiplexed others report 0
    return PageLoad(statistics.fmean(r[1] for r in rows), statistics.fmean(r[1] - connected for r in rows))


def page_loads(tb: Any, http: str, repetitions: int) -> PageLoad:
    """Medians over repetitions of both means."""
    loads = [page_load(tb, http) for _ in range(repetitions)]
    return PageLoad(statistics.median(x.mean_ms for x in loads), statistics.median(x.data_ms for x in loads))


# At 5 % loss, about one load in five loses a handshake packet and waits out a timeout (TCP's
# SYN, QUIC's PTO; 0.4-0.9 s measured) before any stream exists: a median of 3 landed on two
# such QUIC loads in CI (h3 +336 ms against h2's +190). Seven keep the median off them.
REPETITIONS = {0: 3, 5: 7}


def measure_hol(tb: Any) -> Answers:
    answers: Answers = {}
    data: dict[tuple[str, int], float] = {}
    for loss, repetitions in REPETITIONS.items():
        set_link(tb, loss_pct=float(loss))
        for label, flag in (("h2", "--http2"), ("h3", "--http3-only")):
            load = page_loads(tb, flag, repetitions)
            answers[f"{label}_ms_loss{loss}"] = round(load.mean_ms, 1)
            data[label, loss] = load.data_ms
    tb.apply_link(tb.profile.down, tb.profile.up)
    # "Hurt more" is the time loss added, in ms: head-of-line blocking is a delay. A ratio to
    # the loss-free time weighs h3's losses more, its loss-free load being a round trip shorter,
    # so one QUIC timeout could decide it (issue 45: h2 2.87x for +805 ms, h3 3.10x for +426).
    # It is judged on the streams' time once the connection is up: a lost handshake packet is
    # a timeout for either protocol, not head-of-line blocking (measured at 5 %: h2 +53..+1440
    # ms over 12 loads, h3 +13..+59).
    added = {p: data[p, 5] - data[p, 0] for p in ("h2", "h3")}
    answers["hurt_more"] = max(added, key=lambda p: added[p])
    return answers


# --- 4. congestion control -------------------------------------------------------------------


def measure_cc(tb: Any) -> Answers:
    answers: Answers = {}
    goodput = {}
    try:
        for cc in ("cubic", "bbr"):
            set_congestion_control(tb, cc)
            rows = perf_rows(tb, "tls_perf", "cloud/1MB", 3, timeout=180)
            goodput[cc] = answers[f"{cc}_mbit"] = round(median_of(rows, "throughput_mbps"), 2)
    finally:
        set_congestion_control(tb, "cubic")
    answers["faster"] = "bbr" if goodput["bbr"] > goodput["cubic"] else "cubic"
    return answers


# --- 5. video under loss ----------------------------------------------------------------------

VIDEO_URL = f"{SERVER_URL}/video/dash/manifest.mpd"
PLAY_SECONDS = 20  # of media; the experiments play 60 (quick) or 180 (the paper)
PLAYED = {"quic": "quic", "tcp": "tls1.3"}  # the handout's two protocols


def playback(tb: Any, protocol: str, seconds: int | None = None) -> dict[str, Any]:
    """One DASH playback in a fresh headless Chromium: browser_perf with the arguments the
    experiments give it (clients/tools.py), so the lab plays what a run measures. The media
    time is PLAY_SECONDS unless given (read at the call: the suite plays shorter)."""
    seconds = seconds or PLAY_SECONDS
    from quicbed.clients.tools import TOOLS
    from quicbed.topology.hosts import SideContainer
    from quicbed.topology.net import server_address

    argv = TOOLS["chromium"].argv(
        VIDEO_URL,
        f"server.quicbed:443:{server_address(0)}",
        CA,
        seconds + 90,
        {"protocol": protocol},
        {"--duration": str(seconds)},
    )
    # The browser has its own image: it plays in a container of it beside the client's, on
    # the client's interfaces and mounts (the CA), as a run's browser trials do.
    browser = SideContainer(tb.client, TOOLS["chromium"].image, "browser")
    try:
        proc = browser.exec(argv, timeout=seconds + 150)
    finally:
        browser.stop()
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if not rows or rows[-1].get("error"):
        raise RuntimeError(
            f"playback over {protocol}: " f"{rows[-1]['error'] if rows else proc.stderr.strip()[-300:]}"
        )
    return rows[-1]


def playback_line(protocol: str, row: dict[str, Any]) -> str:
    """What a student reads of a playback: the QoE metrics of analysis/README.md."""
    return (
        f"{protocol}: startup {row['startup_delay_ms']:.0f} ms, {row['stall_count']} stalls "
        f"({row['stall_total_ms']:.0f} ms), {row['quality_switches']} quality switches, "
        f"lowest {row['lowest_quality']}, mean {row['mean_height']:.0f}p"
    )


def measure_video(tb: Any) -> Answers:
    answers: Answers = {}
    try:
        for loss in (0, 5):
            set_link(tb, loss_pct=float(loss))
            rows = {label: playback(tb, protocol) for label, protocol in PLAYED.items()}
            if loss == 0:
                for label, row in rows.items():
                    answers[f"startup_ms_{label}"] = round(float(row["startup_delay_ms"]), 1)
            else:
                startup = {label: float(row["startup_delay_ms"]) for label, row in rows.items()}
                height = {label: float(row["mean_height"]) for label, row in rows.items()}
                answers["faster_start_loss5"] = min(startup, key=lambda k: startup[k])
                answers["lower_quality_loss5"] = min(height, key=lambda k: height[k])
    finally:
        tb.apply_link(tb.profile.down, tb.profile.up)
    return answers


EXERCISES = {
    e.name: e
    for e in (
        Exercise(
            "round-trips",
            "Count the round trips",
            "01-round-trips.md",
            "india",
            (),
            (
                Question(
                    "rtt_ms", "the path's round-trip time", "ping the server: the median of 20", "ms", 0.05
                ),
                Question(
                    "tls12_rtts",
                    "round trips before the request can leave, TLS 1.2 over TCP",
                    "count TCP's SYN/SYN-ACK, then the TLS 1.2 flights until the client's Finished",
                ),
                Question(
                    "tls13_rtts",
                    "the same for TLS 1.3 over TCP",
                    "TLS 1.3 sends the key share in the ClientHello: one flight less",
                ),
                Question(
                    "quic_rtts",
                    "the same for QUIC",
                    "QUIC has no separate transport handshake: its Initial carries the ClientHello",
                ),
                Question(
                    "quic_connection_ms",
                    "QUIC connection time (quic_perf's connection_time_ms)",
                    "about one RTT: read connection_time_ms in quic_perf's row",
                    "ms",
                    0.15,
                ),
            ),
            measure_round_trips,
        ),
        Exercise(
            "queues",
            "Bandwidth-delay product and queues",
            "02-queues.md",
            "india",
            (),
            (
                Question(
                    "bdp_kbyte",
                    "the downstream bandwidth-delay product",
                    "rate (bit/s) x RTT (s) / 8 gives bytes; 1 kB = 1000 B",
                    "kB",
                    0.05,
                ),
                Question(
                    "goodput_mbit_q20",
                    "goodput of the 10 MB download with a 20 ms queue",
                    "tls_perf's throughput_mbps with `link down.queue_ms=20`",
                    "Mbit/s",
                    0.3,
                ),
                Question(
                    "loaded_rtt_ms_q20",
                    "ping RTT during that download",
                    "ping while the download runs (the handout's two commands)",
                    "ms",
                    0.2,
                ),
                Question(
                    "goodput_mbit_q200",
                    "goodput with a 200 ms queue",
                    "`link down.queue_ms=200`, then the same download",
                    "Mbit/s",
                    0.3,
                ),
                Question(
                    "loaded_rtt_ms_q200",
                    "ping RTT during that download",
                    "the queue fills: RTT grows by about the queue's length",
                    "ms",
                    0.2,
                ),
                Question(
                    "bufferbloat_queue",
                    "with which queue (ms) does latency balloon?",
                    "compare the two loaded RTTs with the idle one",
                    choices=("20", "200"),
                ),
            ),
            measure_queues,
        ),
        Exercise(
            "hol",
            "Loss and head-of-line blocking",
            "03-hol.md",
            "india",
            (),
            (
                Question(
                    "h2_ms_loss0",
                    "HTTP/2 mean object time, 30 objects, no loss",
                    "curl --http2 --parallel ... -w '%{time_total}': the mean of the 30",
                    "ms",
                    0.3,
                ),
                Question(
                    "h3_ms_loss0", "HTTP/3 mean object time, no loss", "the same with --http3-only", "ms", 0.3
                ),
                Question(
                    "h2_ms_loss5",
                    "HTTP/2 mean object time at 5 % loss",
                    "`link loss_pct=5`, then the HTTP/2 command",
                    "ms",
                    0.5,
                ),
                Question(
                    "h3_ms_loss5",
                    "HTTP/3 mean object time at 5 % loss",
                    "`link loss_pct=5`, then the HTTP/3 command",
                    "ms",
                    0.5,
                ),
                Question(
                    "hurt_more",
                    "which protocol does loss slow down more (ms added from 0 to 5 %)?",
                    "subtract each protocol's 0 % time from its 5 % time",
                    choices=("h2", "h3"),
                ),
            ),
            measure_hol,
        ),
        Exercise(
            "cc",
            "Congestion control on a lossy long link",
            "04-congestion-control.md",
            "india",
            ("loss_pct=2",),
            (
                Question(
                    "cubic_mbit",
                    "goodput of a 1 MB download with cubic at 2 % loss",
                    "`cc cubic`, then tls_perf's throughput_mbps (median of 3)",
                    "Mbit/s",
                    0.4,
                ),
                Question("bbr_mbit", "the same with bbr", "`cc bbr`, then the same download", "Mbit/s", 0.4),
                Question(
                    "faster", "which is faster here?", "compare the two goodputs", choices=("cubic", "bbr")
                ),
            ),
            measure_cc,
        ),
        Exercise(
            "video",
            "Video under loss",
            "05-video.md",
            "india",
            (),
            (
                Question(
                    "startup_ms_quic",
                    "startup delay over QUIC without loss",
                    "`play quic`: the startup it prints (play requested to first frame)",
                    "ms",
                    0.4,
                ),
                Question(
                    "startup_ms_tcp",
                    "startup delay over TLS 1.3/TCP without loss",
                    "`play tls1.3`: the same",
                    "ms",
                    0.4,
                ),
                Question(
                    "faster_start_loss5",
                    "which starts playing sooner at 5 % loss?",
                    "`link loss_pct=5`, then play both and compare their startups",
                    choices=("quic", "tcp"),
                ),
                Question(
                    "lower_quality_loss5",
                    "which plays the lower mean quality at 5 % loss?",
                    "compare the mean resolution the two playbacks print",
                    choices=("quic", "tcp"),
                ),
            ),
            measure_video,
        ),
    )
}
