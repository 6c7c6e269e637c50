"""The client x server matrix (analysis/stack_matrix.py): each cell judged by the handshake's
RTT count and the download against the TCP model, drawn and reported."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from quicbed.analysis import stack_matrix
from quicbed.analysis.figures import stack_matrix as draw
from quicbed.analysis.physics import tcp_download_s
from quicbed.analysis.report import matrix_section

RTT, RATE, SIZE = 80.0, 20.0, 10 * 2**20


def trial(client: str, server: str, protocol: str, rtts: float, model_share: float) -> dict:
    setup = {"quic": 1, "tls1.3": 2}[protocol]
    took = tcp_download_s(SIZE, RATE, RTT, setup) * 1000 / model_share
    return {
        "profile": "india",
        "client": client,
        "server": server,
        "protocol": protocol,
        "object": "10MB",
        "calib_rtt_ms": RTT,
        "rate_down_mbit": RATE,
        "connection_time_ms": rtts * RTT + 0.4,  # 0.4 ms of the client's own CPU
        "client_cpu_ms": 0.4,
        "download_time_ms": took,
    }


def rows(quic_nginx_rtts: float = 1.0, tls_caddy_share: float = 0.99) -> pd.DataFrame:
    cells = [
        ("quic-h3", "caddy", "quic", 1.0, 1.0),
        ("quic-h3", "nginx", "quic", quic_nginx_rtts, 1.0),
        ("tls1.3-h2", "caddy", "tls1.3", 2.0, tls_caddy_share),
        ("tls1.3-h2", "nginx", "tls1.3", 2.01, 0.98),
    ]
    return pd.DataFrame([trial(*cell) for cell in cells for _ in range(5)])


def verdicts(found: list[stack_matrix.Cell]) -> dict[tuple[str, str], str]:
    return {(c.client, c.server): c.verdict for c in found}


def test_every_cell_passes_on_the_physics() -> None:
    found = stack_matrix.cells(rows())
    assert stack_matrix.is_matrix(found)
    assert set(verdicts(found).values()) == {"pass"}
    quic = next(c for c in found if (c.client, c.server) == ("quic-h3", "caddy"))
    assert quic.handshake and quic.handshake.value == pytest.approx(1.0)
    assert quic.goodput and quic.goodput.value == pytest.approx(1.0)


@pytest.mark.parametrize(
    "change, failing, check",
    [
        ({"quic_nginx_rtts": 2.0}, ("quic-h3", "nginx"), "handshake"),  # a QUIC that took 2 RTT
        ({"quic_nginx_rtts": 1.05}, ("quic-h3", "nginx"), "handshake"),  # 4 ms over at 80 ms
        ({"tls_caddy_share": 0.9}, ("tls1.3-h2", "caddy"), "goodput"),  # 10 % slower than TCP's model
    ],
)
def test_a_cell_that_breaks_the_physics_fails_alone(change: dict, failing: tuple, check: str) -> None:
    found = stack_matrix.cells(rows(**change))
    assert [k for k, v in verdicts(found).items() if v == "fail"] == [failing]
    cell = next(c for c in found if (c.client, c.server) == failing)
    assert cell.checks[check] == "fail"


def test_page_loads_and_small_objects_are_left_out() -> None:
    data = rows()
    browser = data.assign(client="chromium-quic", page_load_time_ms=900.0)
    small = data.assign(object="1KB")
    assert {c.client for c in stack_matrix.cells(pd.concat([data, browser]))} == {"quic-h3", "tls1.3-h2"}
    assert all(c.goodput is None for c in stack_matrix.cells(small))


def test_one_server_is_no_matrix_and_the_report_says_what_fails(tmp_path: Path) -> None:
    data = rows(quic_nginx_rtts=2.0)
    assert matrix_section(data[data["server"] == "caddy"], []) is None
    (figure,) = draw(stack_matrix.cells(data), tmp_path)
    assert figure.png.stat().st_size > 1000
    section = matrix_section(data, [figure])
    assert section is not None
    texts = [getattr(b, "items", None) for b in section.blocks]
    assert ["fails a check: india: quic-h3 × nginx"] in texts


def test_a_swept_condition_is_a_matrix_of_its_own_and_loss_has_no_goodput_model() -> None:
    clean = rows().assign(condition_label="india", loss_pct=0.0)
    lossy = rows(tls_caddy_share=0.5).assign(condition_label="india loss_pct=1", loss_pct=1.0)
    found = stack_matrix.cells(pd.concat([clean, lossy]))
    assert {c.profile for c in found} == {"india", "india loss_pct=1"}
    assert all(c.goodput is None for c in found if c.profile != "india")
    assert {c.verdict for c in found} == {"pass"}
