"""The streaming findings of issue 64 (analysis/claims.py): the startup verdicts name the
rounds whose protocols started at different renditions (dash.js starts where it chooses),
and quality switches are judged by a one-sided sequential sign test of each session at the
highest loss against its round's session at 0 %. Pure logic on made-up sessions."""

from __future__ import annotations

import re

import pandas as pd

from quicbed.analysis import decisions
from quicbed.analysis.claims import (
    FAILS,
    HOLDS,
    NO_DATA,
    NOT_DECIDED,
    startup_no_loss,
    startup_with_loss,
    switches_rise,
)

ROUNDS = 10


def session(protocol: str, server: str, rep: int, loss: float, **values: object) -> dict:
    """One streaming session of a round: its condition is its loss rate's."""
    return {
        "run_id": "r1",
        "condition": f"c{loss:g}",
        "profile": "india",
        "server": server,
        "object": "dash",
        "repetition": rep,
        "protocol": protocol,
        "client": f"chromium-{protocol}",
        "error": "",
        "workload": "streaming",
        "loss_pct": loss,
        "facet": f"india loss_pct={loss:g} · {server}",
        **values,
    }


def started(first: dict[str, list[str]], server: str, loss: float = 0.0) -> list[dict]:
    """Each protocol's sessions of one server, round r starting at first[protocol][r]; the
    startup delays alike, so only the renditions tell the protocols apart."""
    return [
        session(p, server, rep, loss, startup_delay_ms=1000.0 + rep, first_rendition=rendition)
        for p, renditions in first.items()
        for rep, rendition in enumerate(renditions)
    ]


def rendition_lines(found: tuple[str, ...]) -> list[str]:
    return [line for line in found if "started at" in line]


def test_first_renditions_that_differ_are_named_per_server_and_alike_ones_are_not() -> None:
    """Caddy's TLS sessions started lower in 4 of 10 rounds: its line says so; nginx's
    sessions all started alike, and it has no line."""
    caddy = started({"quic": ["480p"] * ROUNDS, "tls1.3": ["360p"] * 4 + ["480p"] * 6}, "caddy")
    nginx = started({"quic": ["480p"] * ROUNDS, "tls1.3": ["480p"] * ROUNDS}, "nginx")
    verdict = startup_no_loss(pd.DataFrame(caddy + nginx))
    apart = "caddy: QUIC started at 480p, TLS 1.3 at 360p in 4 of 10 sessions"
    assert rendition_lines(verdict.found) == [apart], verdict.found
    alike = startup_no_loss(pd.DataFrame(nginx))
    assert alike.found and not rendition_lines(alike.found), alike.found


def test_renditions_are_compared_round_by_round_and_each_way_apart_is_counted() -> None:
    """The same renditions in another order are apart in every round, both ways; with
    several loss rates the line names the cell's loss too."""
    quic = ["480p", "360p"] * 5
    rows = started({"quic": quic, "tls1.3": quic[::-1]}, "caddy", loss=10.0)
    rows += started({"quic": ["360p"] * ROUNDS, "tls1.3": ["360p"] * ROUNDS}, "caddy", loss=5.0)
    verdict = startup_with_loss(pd.DataFrame(rows))
    assert rendition_lines(verdict.found) == [
        "10% loss · caddy: QUIC started at 360p, TLS 1.3 at 480p in 5 of 10 sessions; "
        "QUIC started at 480p, TLS 1.3 at 360p in 5 of 10 sessions"
    ]
    assert verdict.found[-1] == "judged at 5/10% loss, where the paper states 5%"


def test_rows_without_first_renditions_add_no_line() -> None:
    rows = started({"quic": ["480p"] * ROUNDS, "tls1.3": ["360p"] * ROUNDS}, "caddy")
    verdict = startup_no_loss(pd.DataFrame(rows).drop(columns="first_rendition"))
    assert not rendition_lines(verdict.found)


def switching(switches: dict[float, list[int]], servers: tuple[str, ...] = ("caddy", "nginx")) -> list[dict]:
    """QUIC's and TLS 1.3's sessions alike: round r at each loss rate switched switches[loss][r]
    times, one in three of them up."""
    return [
        session(p, server, rep, loss, quality_switches=n, switches_up=n // 3, switches_down=n - n // 3)
        for p in ("quic", "tls1.3")
        for server in servers
        for loss, counts in switches.items()
        for rep, n in enumerate(counts)
    ]


MORE = "more switches at 10% than at 0% loss in"  # how a protocol's test line begins, after its name


def test_switches_that_rise_in_every_pair_hold_with_down_and_up_beside_them() -> None:
    """Six rounds on two servers: 12 pairs a protocol, each with more switches at 10 % than
    at 0 %, decide the one-sided test (10 rising pairs reach 1/α)."""
    verdict = switches_rise(pd.DataFrame(switching({0.0: [0] * 6, 10.0: [3] * 6})))
    assert verdict.status == HOLDS, verdict.found
    floor = decisions.fewest_rounds(2 * 0.01)  # each side at α: `direction` at 2α
    assert floor == 10
    for name in ("QUIC", "TLS 1.3"):
        assert f"{name}: {MORE} 12 of 12 pairs, decided at pair {floor}" in verdict.found
        assert (
            f"{name}: switches a session 0.00 → 3.00 from 0% to 10% loss (means; n=12/12), "
            "down 0.00 → 2.00, up 0.00 → 1.00"
        ) in verdict.found


def test_switches_that_fall_do_not_hold() -> None:
    verdict = switches_rise(pd.DataFrame(switching({0.0: [2] * 6, 10.0: [0] * 6})))
    assert verdict.status == FAILS, verdict.found
    assert f"QUIC: {MORE} 0 of 12 pairs: decided fewer switches at 10% at pair 10" in verdict.found


def test_pairs_join_the_same_round_server_and_protocol_only() -> None:
    """Round r switched r times at 0 % and r + 1 at 10 %: paired by round, every pair rises
    (paired across rounds, many would fall). Rounds that ran at one rate only (the 0 %
    condition ran four more), and a server without lossy sessions, give no pair."""
    rows = switching({0.0: list(range(10)), 10.0: [r + 1 for r in range(6)]}, servers=("caddy",))
    rows += switching({0.0: [5] * 6}, servers=("nginx",))
    verdict = switches_rise(pd.DataFrame(rows[::-1]))  # rows in any order
    assert verdict.status == NOT_DECIDED, verdict.found
    (line,) = [line for line in verdict.found if line.startswith(f"QUIC: {MORE}")]
    assert line.startswith(f"QUIC: {MORE} 6 of 6 pairs: not decided after 6 pairs"), line


def test_no_difference_is_not_decided_with_the_pairs_a_decision_would_need() -> None:
    """Sessions that switched as often at both rates tie: not decided, with the floor of
    pairs that differ; a weak rise is not decided either, with the pairs it would need."""
    tied = switches_rise(pd.DataFrame(switching({0.0: [1] * 6, 10.0: [1] * 6})))
    assert tied.status == NOT_DECIDED, tied.found
    assert (
        "QUIC: as many switches at 10% as at 0% loss in all 12 pairs: not decided; at least 10 pairs "
        "that differ would decide"
    ) in tied.found
    weak = switches_rise(pd.DataFrame(switching({0.0: [1] * 6, 10.0: [2, 0, 2, 2, 1, 1]})))
    assert weak.status == NOT_DECIDED, weak.found
    (line,) = [line for line in weak.found if line.startswith(f"QUIC: {MORE}")]
    # 6 rises, 2 falls and 4 ties: more pairs than these 12 would decide at this effect.
    told = rf"QUIC: {MORE} 6 of 8 pairs: not decided after 12 pairs; about (\d+) pairs would decide"
    need = re.fullmatch(told + " at this effect", line)
    assert need and int(need.group(1)) > 12, line


def test_switches_without_a_split_or_a_lossless_rate_say_so() -> None:
    rows = pd.DataFrame(switching({0.0: [0] * 6, 10.0: [3] * 6}))
    verdict = switches_rise(rows.drop(columns=["switches_up", "switches_down"]))
    assert verdict.status == HOLDS
    total = "total switches only: the rows do not split them into down and up"
    assert sum(line.endswith(total) for line in verdict.found) == 2, verdict.found  # one a protocol
    lossy_only = pd.DataFrame(switching({5.0: [0] * 6, 10.0: [3] * 6}))
    assert switches_rise(lossy_only).status == NO_DATA
