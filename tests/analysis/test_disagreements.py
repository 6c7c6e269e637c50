"""Where the stacks disagree (analysis/disagreements.py): a server (or client) whose goodput of
the model or handshake RTTs stand apart from the other stacks' beyond the statistics is named
with its numbers, and why: the measured initial windows in the model's slow start, the client's
CPU netted out of the handshake, or that the reason was not measured."""

from __future__ import annotations

import pandas as pd
import pytest

from quicbed.analysis import disagreements
from quicbed.analysis.physics import TCP_PAYLOAD, tcp_download_s
from quicbed.analysis.render import Bullets, Text
from quicbed.analysis.report import DISAGREE_INTRO, matrix_section
from quicbed.analysis.stacks import StackWindow
from quicbed.analysis.stats import Estimate

RTT, RATE, SIZE, CPU_MS = 80.0, 20.0, 10 * 2**20, 0.4
QUIC_CLIENTS = {"quic-h3": "quic_perf", "aioquic": "aioquic", "quicgo": "quicgo"}
TCP_SERVERS = ("caddy", "nginx", "haproxy")  # quinn serves HTTP/3 only
JITTER = (0.998, 1.0, 1.002)  # three trials a cell, a little apart so that the CIs have width


def trial(client: str, tool: str, server: str, protocol: str, share: float, rtts: float) -> dict:
    setup = {"quic": 1, "tls1.3": 2}[protocol]
    return {
        "profile": "india",
        "condition_label": "india",
        "client": client,
        "tool": tool,
        "server": server,
        "protocol": protocol,
        "object": "10MB",
        "calib_rtt_ms": RTT,
        "rate_down_mbit": RATE,
        "loss_pct": 0.0,
        "connection_time_ms": rtts * RTT + CPU_MS,
        "client_cpu_ms": CPU_MS,
        "download_time_ms": tcp_download_s(SIZE, RATE, RTT, setup) * 1000 / share,
        "bytes": SIZE,
        "error": None,
    }


def matrix(
    quic_share: dict[str, float] | None = None,
    client_share: dict[str, float] | None = None,
    quic_rtts: dict[str, float] | None = None,
    quic_spread: dict[str, tuple[float, ...]] | None = None,
    tls_share: float = 0.97,
) -> pd.DataFrame:
    """Four servers' QUIC against three QUIC clients, three of them also over TLS 1.3 (two
    TCP clients); every share 0.99 and every handshake 1.01 RTT unless given."""
    quic_share, client_share = quic_share or {}, client_share or {}
    quic_rtts, quic_spread = quic_rtts or {}, quic_spread or {}
    out = []
    for server in ("caddy", "nginx", "quinn", "haproxy"):
        for client, tool in QUIC_CLIENTS.items():
            share = quic_share.get(server, 0.99) * client_share.get(client, 1.0)
            for jitter in quic_spread.get(server, JITTER):
                out.append(
                    trial(client, tool, server, "quic", share * jitter, quic_rtts.get(server, 1.01) * jitter)
                )
    for server in TCP_SERVERS:
        for client in ("tls1.3-h2", "tls1.3-h2-x"):
            out += [trial(client, "tls_perf", server, "tls1.3", tls_share * j, 2.01 * j) for j in JITTER]
    return pd.DataFrame(out)


def window(server: str, packets: int, segment: int = TCP_PAYLOAD, reached: bool = True) -> StackWindow:
    return StackWindow(server, "QUIC", packets, packets * segment, reached, (f"india/{server}/r0",), 40)


def test_agreeing_stacks_say_nothing_and_the_report_shows_no_heading() -> None:
    # TLS at 0.97 against QUIC at 0.99, and quinn without TLS: pooled across transports quinn
    # would stand apart; per transport every server agrees.
    data = matrix()
    assert disagreements.find(data) == []
    section = matrix_section(data, [])
    assert section is not None
    assert not any(isinstance(b, Text) and b.text == DISAGREE_INTRO for b in section.blocks)


@pytest.mark.parametrize(
    "change",
    [
        {"quic_share": {"haproxy": 0.98}},  # CIs apart, but 1 % is below what any check judges by
        # 3 % below the others, but its trials spread so far that its CI spans theirs
        {"quic_share": {"haproxy": 0.96}, "quic_spread": {"haproxy": (0.90, 1.0, 1.10)}},
    ],
)
def test_a_gap_within_the_statistics_or_below_a_check_is_no_disagreement(change: dict) -> None:
    assert disagreements.find(matrix(**change)) == []


def test_a_disagreeing_server_is_named_with_its_numbers_and_no_capture_says_not_measured() -> None:
    data = matrix(quic_share={"haproxy": 0.92, "nginx": 0.98})
    found = disagreements.find(data)
    assert [(d.role, d.stack, d.metric, d.group) for d in found] == [("server", "haproxy", "goodput", "QUIC")]
    (line,) = disagreements.lines(data)
    assert line.startswith("india: haproxy's QUIC reaches 0.92 of the model [0.92, 0.92] where ")
    assert "the other servers' QUIC reach 0.98–0.99 (all their trials: 0.99 of the model [" in line
    assert "Why: not measured: no captured trial shows the initial window of haproxy's QUIC" in line
    assert "`--capture pcap,keys`" in line


def test_the_windows_explanation_puts_the_measured_windows_into_slow_start() -> None:
    data = matrix(quic_share={"haproxy": 0.92})
    windows = [window("haproxy", 10), window("caddy", 30), window("nginx", 30), window("quinn", 30)]
    (found,) = disagreements.find(data, windows)
    # By hand at 20 Mbit/s and 80 ms: a BDP of 132.1 frames; from 10 segments slow start takes
    # 4 rounds (10, 20, 40, 80), from 30 three (30, 60, 120); each round loses the BDP less
    # what it sent.
    frame_s = 1514 * 8 / (RATE * 1e6)
    bdp = RATE * 1e6 * RTT / 1e3 / (1514 * 8)
    window_s = ((4 * bdp - 150) - (3 * bdp - 210)) * frame_s
    assert window_s == pytest.approx(0.1163, abs=1e-4)
    model_s = tcp_download_s(SIZE, RATE, RTT, 1)
    base_s = model_s / found.others.value
    gap_s = model_s / found.own.value - base_s
    share = disagreements.window_share(
        windows[0], windows[1:], found.own.value, found.others.value, model_s, RATE, RTT
    )
    assert (share.extra_rounds, share.own_packets, share.others_packets) == (1, 10, 30)
    assert share.window_s == pytest.approx(window_s)
    assert (share.gap_s, share.base_s) == (pytest.approx(gap_s), pytest.approx(base_s))
    assert found.why == (
        "initial window 10 vs 30 packets (14.5 vs 43.4 KB, measured): 1 slow-start round more, "
        f"0.12 s longer than the others' {base_s:.1f} s download, which accounts for "
        f"{window_s / base_s:.1%} of its {gap_s / base_s:.1%} longer download".replace("%", " %")
    )
    assert 0 < window_s < gap_s  # the window explains part of the gap, not all of it


def test_a_window_in_quic_packets_counts_by_its_bytes() -> None:
    # 32 QUIC packets of 1252 bytes are 27.7 full-size segments, not 32: fewer bytes per round.
    share = disagreements.window_share(
        window("haproxy", 32, segment=1252), [window("caddy", 32)], 0.95, 0.99, 4.8, RATE, RTT
    )
    assert share.own_bytes == 32 * 1252 and share.window_s > 0
    same = disagreements.window_share(
        window("haproxy", 30), [window("caddy", 30)], 0.95, 0.99, 4.8, RATE, RTT
    )
    assert same.window_s == 0
    assert "the same slow start, so the windows do not explain" in same.text()


def test_a_larger_window_on_the_slower_server_does_not_explain_its_gap() -> None:
    data = matrix(quic_share={"haproxy": 0.92})
    windows = [window("haproxy", 40), window("caddy", 10), window("nginx", 10), window("quinn", 10)]
    (found,) = disagreements.find(data, windows)
    # from 40 segments 2 rounds (40, 80) lose 2·132.1 − 120 frames, from 10 four lose 378.4
    assert "2 slow-start rounds fewer, 0.14 s shorter than the others' 4.8 s download" in found.why
    assert found.why.endswith("longer download: the windows do not explain it")


@pytest.mark.parametrize(
    "windows, missing",
    [
        ([], "haproxy's QUIC"),
        ([window("caddy", 10), window("nginx", 10)], "haproxy's QUIC"),
        ([window("haproxy", 10)], "the other servers' QUIC"),
    ],
)
def test_without_both_sides_windows_the_reason_is_not_measured(windows: list, missing: str) -> None:
    (found,) = disagreements.find(matrix(quic_share={"haproxy": 0.92}), windows)
    assert found.why.startswith(f"not measured: no captured trial shows the initial window of {missing};")


def test_a_window_that_held_a_whole_response_is_no_explanation() -> None:
    windows = [window("haproxy", 10, reached=False), window("caddy", 30), window("nginx", 30)]
    (found,) = disagreements.find(matrix(quic_share={"haproxy": 0.92}), windows)
    assert found.why.startswith("not measured: a captured response fit in its first flight")


def test_a_slow_handshake_says_what_was_netted_out_and_what_remains() -> None:
    data = matrix(quic_rtts={"quinn": 1.06})
    (found,) = disagreements.find(data)
    assert (found.stack, found.metric, found.group) == ("quinn", "handshake", "QUIC")
    assert found.own.value == pytest.approx(1.06) and found.others.value == pytest.approx(1.01)
    assert found.line().startswith(
        "india: quinn's QUIC handshake takes 1.06 RTT [1.06, 1.06], net of the client's CPU, where "
        "the other servers' QUIC take 1.01 (all their trials: 1.01 RTT [1.01, 1.01])."
    )
    # 0.05 RTT of 80 ms: 4.0 ms beyond the others', after the 0.4 ms of the client's CPU
    assert "the client's CPU (median 0.4 ms a trial) is netted out, so the 4.0 ms more" in found.why
    assert "the rows do not net out the server's time: captures would show" in found.why
    captured = disagreements.find(data, [window("quinn", 10)])[0]
    assert "`quicbed explain RUN india/quinn/r0` shows when each flight" in captured.why
    raw = disagreements.find(data.drop(columns="client_cpu_ms"))[0]
    assert raw.why.startswith("these rows carry no client CPU (`client_cpu_ms`), so nothing is netted out")


def test_a_disagreeing_client_is_pooled_over_the_servers() -> None:
    data = matrix(client_share={"quicgo": 0.9})  # quicgo slower against every server alike
    (found,) = disagreements.find(data)
    assert (found.role, found.stack, found.group) == ("client", "quicgo", "QUIC")
    assert found.line().startswith("india: the client quicgo's QUIC reaches 0.89 of the model [")
    assert "where the other QUIC clients reach 0.99 (" in found.line()
    assert "not measured: the servers, and so their initial windows, were the same" in found.why
    assert "CPU-bound" not in found.why
    busy = data.assign(cpu_bound=(data["client"] == "quicgo") & (data["server"] == "nginx"))
    (found,) = disagreements.find(busy)
    assert found.why.endswith("; 3 of its 12 trials were flagged CPU-bound (`cpu_bound`)")


def test_the_report_shows_the_block_with_its_lines() -> None:
    data = matrix(quic_share={"haproxy": 0.92})
    section = matrix_section(data, [], [window("haproxy", 10), window("caddy", 30)])
    assert section is not None
    at = next(i for i, b in enumerate(section.blocks) if isinstance(b, Text) and b.text == DISAGREE_INTRO)
    bullets = section.blocks[at + 1]
    assert isinstance(bullets, Bullets) and len(bullets.items) == 1
    assert "initial window 10 vs 30 packets" in bullets.items[0]


def test_the_rule_needs_both_apart_cis_and_a_material_gap() -> None:
    others = Estimate(30, 1.00, 0.99, 1.01)
    assert disagreements.beyond_statistics(Estimate(9, 0.95, 0.94, 0.96), others)
    assert not disagreements.beyond_statistics(Estimate(9, 0.95, 0.90, 0.995), others)  # CIs overlap
    assert not disagreements.beyond_statistics(Estimate(9, 0.988, 0.987, 0.989), others)  # 1.5 % not reached
    assert disagreements.beyond_statistics(Estimate(9, 1.02, 1.015, 1.03), others)  # either side
