"""The stacks' measured initial windows (analysis/stacks.py) and the explanation of "the gain
shrinks" built from them. The decoding of a capture is explain's (tests/analysis/test_explain.py
on recorded tshark output, test_explain_path.py on the real path); here the evidence of each
trial is given, so the choice of trials, the medians and the sentences are what is tested."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from quicbed.analysis import report
from quicbed.analysis.claims import FAILS, HOLDS, Direction, Verdict, gain_shrinks
from quicbed.analysis.explain import ExplainError
from quicbed.analysis.stacks import (
    StackWindow,
    explain_gain_shrinks,
    measured_windows,
    windows_table,
)

MSS = 1448


def _row(trial: str, server: str, protocol: str, tool: str, size: int, captured: bool = True) -> dict:
    cap = f"trials/{trial.replace('/', '~')}"
    return {
        "run_dir": "/runs/r1",
        "trial_id": trial,
        "server": server,
        "protocol": protocol,
        "tool": tool,
        "workload": "web",
        "bytes": size,
        "capture_files": [f"{cap}/client.pcap", f"{cap}/keys.log"] if captured else None,
    }


ROWS = pd.DataFrame(
    [
        _row("c0/caddy/quic/big/r0", "caddy", "quic", "quic_perf", 60_000),
        _row("c0/caddy/quic/small/r0", "caddy", "quic", "quic_perf", 20_000),
        _row("c0/caddy/chromium-quic/big/r0", "caddy", "quic", "chromium", 90_000),
        _row("c0/caddy/tls13/big/r0", "caddy", "tls1.3", "tls_perf", 60_000),
        _row("c0/caddy/tls12/big/r0", "caddy", "tls1.2", "tls_perf", 60_000),
        _row("c0/nginx/quic/big/r0", "nginx", "quic", "quic_perf", 60_000, captured=False),
    ]
)
WINDOWS = {  # trial -> (packets, bytes, reached, the flights' bytes)
    "c0/caddy/quic/big/r0": (32, 32 * 1200, True, [32 * 1200, 22_000]),
    "c0/caddy/quic/small/r0": (17, 20_000, False, [20_000]),
    "c0/caddy/chromium-quic/big/r0": (99, 99 * 1200, True, [99 * 1200, 1]),
    "c0/caddy/tls13/big/r0": (10, 10 * MSS, True, [10 * MSS, 20 * MSS, 15_000]),
    "c0/caddy/tls12/big/r0": (10, 10 * MSS, True, [10 * MSS, 20 * MSS, 15_000]),
}


def _evidence(asked: list[str]) -> Any:
    def evidence(run_dir: Path, trial_id: str) -> dict[str, Any]:
        assert run_dir == Path("/runs/r1")
        asked.append(trial_id)
        packets, size, reached, flights = WINDOWS[trial_id]
        return {
            "initial_window_packets": packets,
            "initial_window_bytes": size,
            "initial_window_reached": reached,
            "rounds": [{"round": i, "bytes": b} for i, b in enumerate(flights)],
        }

    return evidence


def test_windows_per_server_and_transport_from_the_perf_tools_largest_trials() -> None:
    asked: list[str] = []
    windows = measured_windows(ROWS, _evidence(asked))
    assert [(w.server, w.transport) for w in windows] == [("caddy", "QUIC"), ("caddy", "TCP")]
    quic, tcp = windows
    # Perf tools first (one connection), the largest response first; at most two per stack.
    assert quic.trials == ("c0/caddy/quic/big/r0", "c0/caddy/quic/small/r0")
    assert "c0/caddy/chromium-quic/big/r0" not in asked and "c0/nginx/quic/big/r0" not in asked
    assert (quic.packets, quic.bytes) == (24, (32 * 1200 + 20_000) // 2)
    assert not quic.reached  # one trial's response fit in its first flight: a lower bound
    assert quic.size().startswith("≥ ")
    assert (quic.flights, quic.response_bytes) == (2, (32 * 1200 + 22_000 + 20_000) // 2)
    assert (tcp.packets, tcp.bytes, tcp.reached, tcp.flights) == (10, 10 * MSS, True, 3)
    assert list(windows_table(windows)["stack"]) == ["caddy's QUIC", "TCP (kernel) under caddy"]


def test_a_trial_whose_capture_has_no_evidence_is_skipped() -> None:
    def failing(run_dir: Path, trial_id: str) -> dict[str, Any]:
        if "tls" in trial_id:
            raise ExplainError(f"{trial_id}: client.pcap holds no packets of the trial's connection")
        return _evidence([])(run_dir, trial_id)

    assert [w.transport for w in measured_windows(ROWS, failing)] == ["QUIC"]
    uncaptured = ROWS.assign(capture_files=None)
    assert measured_windows(uncaptured, failing) == []
    assert measured_windows(ROWS.drop(columns="capture_files"), failing) == []


def _w(server: str, kind: str, packets: int, size: int, flights: int, response: int = 10_400) -> StackWindow:
    return StackWindow(
        server, kind, packets, size, flights > 1, (f"c0/{server}/{kind}/r0",), flights, response
    )


def test_the_explanation_names_the_extra_flight() -> None:
    """As measured on india (paper-web quick): TCP's 10 packets held 9.4 of a 10.4 KB response
    (a second flight: one more round trip after the first byte); caddy's QUIC sent it in one."""
    windows = [
        _w("caddy", "QUIC", 13, 13_200, 1),
        _w("caddy", "TCP", 10, 9_400, 2),
        _w("haproxy", "QUIC", 10, 9_000, 2),
    ]
    text = explain_gain_shrinks(windows)
    assert text.startswith("Explained by the measured flights")
    assert (
        "TCP's initial window of 10 packets (9.4 KB) held part of a 10.4 KB response, which took 2 flights"
        in text
    )
    assert "caddy's QUIC (≥ 13 packets (13.2 KB)) took 1" in text
    assert "haproxy" not in text  # as many flights as TCP


def test_the_explanation_says_when_the_flights_do_not_explain_it() -> None:
    same = explain_gain_shrinks([_w("nginx", "QUIC", 10, 12_000, 2), _w("nginx", "TCP", 10, 14_480, 2)])
    assert same.startswith("The measured flights do not explain it") and "nginx's QUIC: 2" in same
    for missing in ([], [_w("nginx", "TCP", 10, 14_480, 2)]):
        assert explain_gain_shrinks(missing).startswith("No captured trial measured both")


def test_the_report_adds_it_to_the_failed_finding_only() -> None:
    windows = [_w("caddy", "QUIC", 13, 13_200, 1), _w("caddy", "TCP", 10, 9_400, 2)]
    shrinks = Direction("gain shrinks", gain_shrinks)
    failed = report.explained(shrinks, Verdict(FAILS, ("india: 66% → 50% → 59%",)), windows)
    assert failed.found[0] == "india: 66% → 50% → 59%"
    assert failed.found[1].startswith("Explained by the measured flights")
    held = Verdict(HOLDS, ("india: 50% → 40% → 30%",))
    assert report.explained(shrinks, held, windows) == held
    other = Direction("something else", lambda df: held)
    assert report.explained(other, Verdict(FAILS, ()), windows) == Verdict(FAILS, ())


@pytest.mark.parametrize("kind", ["QUIC", "TCP"])
def test_the_table_says_what_was_not_measured(kind: str) -> None:
    (row,) = windows_table([_w("caddy", kind, 10, 14_480, 2)]).to_dict("records")
    assert row["initial window"] == "10 packets (14.5 KB)" and row["response"] == "10.4 KB in 2 flight(s)"
    assert ("not measured" in row["congestion control"]) == (kind == "QUIC")


def test_the_perf_tools_are_read_from_the_client_descriptors() -> None:
    """One GET on one connection per trial: every client that can fetch a cloud file."""
    from quicbed.analysis.stacks import PERF_TOOLS

    assert PERF_TOOLS == ("tls_perf", "quic_perf", "aioquic", "quicgo", "quiche", "quinn")
