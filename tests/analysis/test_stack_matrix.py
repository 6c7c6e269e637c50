"""The client x server matrix (analysis/stack_matrix.py): each cell judged by the handshake's
RTT count, the download against the TCP model, a resumed session's first byte, 30 streams on
one connection and a transfer at 5 % loss, drawn and reported; each check can fail alone."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from quicbed.analysis import stack_matrix
from quicbed.analysis.figures import stack_matrix as draw
from quicbed.analysis.physics import tcp_download_s
from quicbed.analysis.report import matrix_section

RTT, RATE, SIZE = 80.0, 20.0, 10 * 2**20
TOOL = {"quic-h3": "quic_perf", "tls1.3-h2": "tls_perf", "video-quic": "video_download", "quicgo": "quicgo"}
PROTOCOL = {"quic-h3": "quic", "tls1.3-h2": "tls1.3", "video-quic": "quic"}


def trial(client: str, server: str, protocol: str, rtts: float, model_share: float) -> dict:
    setup = {"quic": 1, "tls1.3": 2}[protocol]
    took = tcp_download_s(SIZE, RATE, RTT, setup) * 1000 / model_share
    return {
        "profile": "india",
        "condition_label": "india",
        "client": client,
        "tool": TOOL[client],
        "server": server,
        "protocol": protocol,
        "object": "10MB",
        "calib_rtt_ms": RTT,
        "rate_down_mbit": RATE,
        "loss_pct": 0.0,
        "connection_time_ms": rtts * RTT + 0.4,  # 0.4 ms of the client's own CPU
        "client_cpu_ms": 0.4,
        "ttfb_ms": (setup + 1) * RTT + 0.4,
        "download_time_ms": took,
        "bytes": SIZE,
        "error": None,
    }


def rows(quic_nginx_rtts: float = 1.0, tls_caddy_share: float = 0.99) -> pd.DataFrame:
    cells = [
        ("quic-h3", "caddy", "quic", 1.0, 1.0),
        ("quic-h3", "nginx", "quic", quic_nginx_rtts, 1.0),
        ("tls1.3-h2", "caddy", "tls1.3", 2.0, tls_caddy_share),
        ("tls1.3-h2", "nginx", "tls1.3", 2.01, 0.98),
    ]
    return pd.DataFrame([trial(*cell) for cell in cells for _ in range(5)])


def resumed(client: str, server: str, ttfb_rtts: float, early: float | None, ok: bool = True) -> pd.DataFrame:
    """Five trials of the client's "-resume" variant; early=None: the tool does not report it."""
    row = trial(client, server, PROTOCOL[client], 1.0 if client == "quic-h3" else 2.0, 1.0)
    row.update(client=f"{client}-resume", ttfb_ms=ttfb_rtts * RTT + 0.4, resumed=True)
    if early is not None:
        row["early_data_bytes"] = early
    out = pd.DataFrame([row] * 5)
    if not ok:
        out.loc[4, "resumed"] = False
    return out


def with_resumption(quic_caddy: float = 1.0, tls_nginx: float = 3.0, quic_ok: bool = True) -> pd.DataFrame:
    return pd.concat(
        [
            rows(),
            resumed("quic-h3", "caddy", quic_caddy, early=1200.0, ok=quic_ok),  # 0-RTT: 1 RTT
            resumed("quic-h3", "nginx", 2.0, early=0.0),  # resumed, no early data: 2 RTT
            resumed("tls1.3-h2", "caddy", 3.01, early=0.0),  # TCP 1, TLS 1, request 1
            resumed("tls1.3-h2", "nginx", tls_nginx, early=None),  # not reported: nearest count
        ]
    )


def lossy(failed: int = 0) -> pd.DataFrame:
    """1 MB at 5 % loss, a condition of its own (a sweep's label), 3 trials a cell."""
    out = rows().assign(condition_label="india loss_pct=5", loss_pct=5.0, object="1MB", bytes=2**20)
    out = out.assign(download_time_ms=2**20 * 8 / 1.6e3)  # 1.6 Mbit/s
    out = out.groupby(["client", "server"]).head(3).reset_index(drop=True)
    out.loc[: failed - 1, ["error", "connection_time_ms", "download_time_ms"]] = ["timeout: 60 s", None, None]
    return out


def verdicts(found: list[stack_matrix.Cell], check: str | None = None) -> dict[tuple[str, str], str]:
    return {(c.client, c.server): c.checks.get(check, "–") if check else c.verdict for c in found}


def cell(found: list[stack_matrix.Cell], client: str, server: str) -> stack_matrix.Cell:
    return next(c for c in found if (c.client, c.server) == (client, server))


def test_every_cell_passes_on_the_physics() -> None:
    found = stack_matrix.cells(rows())
    assert stack_matrix.is_matrix(found)
    assert set(verdicts(found).values()) == {"pass"}
    quic = cell(found, "quic-h3", "caddy")
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
    assert cell(found, *failing).checks[check] == "fail"


def test_resumption_is_a_column_of_the_client_without_it() -> None:
    found = stack_matrix.cells(with_resumption())
    assert {c.client for c in found} == {"quic-h3", "tls1.3-h2"}  # no "-resume" rows of their own
    assert set(verdicts(found, "resumption").values()) == {"pass"}
    assert set(verdicts(found).values()) == {"pass"}
    assert cell(found, "quic-h3", "caddy").text("resumption") == "1.00 RTT [1.00, 1.00], 0-RTT"
    assert cell(found, "quic-h3", "nginx").text("resumption").endswith(", resumed")
    assert cell(found, "tls1.3-h2", "nginx").text("resumption").endswith(", resumed")  # 3 RTT: no early data


@pytest.mark.parametrize(
    "change, failing",
    [
        ({"quic_caddy": 2.0}, ("quic-h3", "caddy")),  # 0-RTT bytes went, yet the first byte took 2 RTT
        ({"quic_ok": False}, ("quic-h3", "caddy")),  # one trial of five did not resume
        ({"tls_nginx": 2.5}, ("tls1.3-h2", "nginx")),  # unreported early data, 2.5 RTT: neither count
        ({"tls_nginx": 3.1}, ("tls1.3-h2", "nginx")),  # 8 ms over resumption's 3 RTT
    ],
)
def test_a_resumption_that_breaks_the_physics_fails_alone(change: dict, failing: tuple) -> None:
    found = stack_matrix.cells(with_resumption(**change))
    assert [k for k, v in verdicts(found).items() if v == "fail"] == [failing]
    assert cell(found, *failing).checks == {"handshake": "pass", "goodput": "pass", "resumption": "fail"} | {
        "streams": "unsupported"
    }


def test_a_client_that_exits_3_is_unsupported_not_failed() -> None:
    """A client without the option (video_download has no resume: its descriptor does not
    offer it, so no experiment may ask) and a client that answers exit 3 on this host both
    read "unsupported"; neither is a failure, nor a measurement."""
    video = pd.DataFrame([trial("video-quic", server, "quic", 1.0, 1.0) for server in ("caddy", "nginx")] * 3)
    cannot = rows().query("client == 'quic-h3'")
    cannot = cannot.assign(
        client="quic-h3-resume", connection_time_ms=math.nan, error="unsupported: --resume"
    )
    found = stack_matrix.cells(pd.concat([rows(), video, cannot]))
    for client in ("video-quic", "quic-h3"):
        mine = cell(found, client, "caddy")
        assert mine.checks == {
            "handshake": "pass",
            "goodput": "pass",
            "resumption": "unsupported",
            "streams": "unsupported",
        }, client
        assert mine.verdict == "pass" and mine.text("resumption") == "unsupported"
    assert cell(found, "quic-h3", "caddy").n == 5  # the unsupported trials are not measurements
    # tls_perf offers resume and this run has no resumed rows: no data, not "unsupported".
    assert "resumption" not in cell(found, "tls1.3-h2", "caddy").checks


def test_a_client_without_the_streams_option_is_unsupported_and_a_streams_row_is_judged() -> None:
    found = stack_matrix.cells(rows())
    assert set(verdicts(found, "streams").values()) == {"unsupported"}
    # A client of QUICBED_CLIENT_DIRS reporting 30 streams: 30 x 100 KB against the TCP model.
    streams = rows().assign(tool="own-streams", client="own", streams=30, streams_completed=30, connections=1)
    size = 30 * 100 * 1024
    streams = streams.assign(bytes=size, download_time_ms=tcp_download_s(size, RATE, RTT, 1) * 1000 / 0.99)
    streams = streams[streams["protocol"] == "quic"]
    broken = streams.copy()
    broken.loc[broken.index[0], "connections"] = 2
    good = cell(stack_matrix.cells(pd.concat([rows(), streams])), "own", "caddy")
    assert good.checks == {"streams": "pass"}, good.text("streams")
    bad = stack_matrix.cells(pd.concat([rows(), broken]))
    assert verdicts(bad)[("own", "caddy")] == "fail" and verdicts(bad)[("own", "nginx")] == "pass"
    assert "more than one connection" in cell(bad, "own", "caddy").text("streams")


def test_quicgos_streams_variant_sits_in_quicgos_cell_and_a_server_ignoring_range_fails_it() -> None:
    """quicgo's `streams: "30"` variant (label quicgo-s30) is the streams check of the quicgo
    cell, not a row of its own; a server that answers a Range request with the whole object
    gives error rows (no `streams` column in them), which fail the check and say why."""
    fresh = pd.DataFrame([trial("quicgo", server, "quic", 1.0, 1.0) for server in ("caddy", "nginx")] * 5)
    streams = fresh.assign(client="quicgo-s30", streams=30, streams_completed=30, connections=1)
    ignored = "http: stream 0: status 200 to a Range request (the server ignores Range)"
    measured = ("download_time_ms", "streams", "streams_completed", "connections")
    refused = streams[streams["server"] == "nginx"].assign(error=ignored, **dict.fromkeys(measured, math.nan))
    streams = pd.concat([streams[streams["server"] == "caddy"], refused])
    found = stack_matrix.cells(pd.concat([rows(), fresh, streams]))
    assert {c.client for c in found} == {"quic-h3", "tls1.3-h2", "quicgo"}
    assert cell(found, "quicgo", "caddy").checks["streams"] == "pass"
    nginx = cell(found, "quicgo", "nginx")
    assert nginx.checks["streams"] == "fail" and nginx.checks["goodput"] == "pass"
    assert nginx.text("streams") == f"30 streams: 5 failed: {ignored}"


def test_a_lossy_condition_is_its_profiles_loss_column_and_fails_on_a_timeout() -> None:
    found = stack_matrix.cells(pd.concat([rows(), lossy()]))
    assert {c.profile for c in found} == {"india"}
    assert set(verdicts(found, "loss").values()) == {"pass"}
    assert cell(found, "quic-h3", "caddy").text("loss") == "5 %: 1.60 Mbit/s [1.60, 1.60]"
    late = stack_matrix.cells(pd.concat([rows(), lossy(failed=1)]))
    assert [k for k, v in verdicts(late).items() if v == "fail"] == [("quic-h3", "caddy")]
    assert cell(late, "quic-h3", "caddy").text("loss").endswith("1 of 3 did not complete")


def test_page_loads_and_small_objects_are_left_out() -> None:
    data = rows()
    browser = data.assign(client="chromium-quic", tool="chromium", page_load_time_ms=900.0)
    failed_browser = data.assign(
        client="chromium-quic", tool="chromium", error="timeout", connection_time_ms=math.nan
    )
    small = data.assign(object="1KB")
    found = stack_matrix.cells(pd.concat([data, browser, failed_browser]))
    assert {c.client for c in found} == {"quic-h3", "tls1.3-h2"}
    assert all(c.goodput is None for c in stack_matrix.cells(small))


def test_one_server_is_no_matrix_and_the_report_says_what_fails(tmp_path: Path) -> None:
    data = pd.concat([with_resumption(quic_caddy=2.0), lossy()])
    data.loc[data["client"] == "quic-h3", "connection_time_ms"] = 2 * RTT  # every QUIC handshake 2 RTT
    assert matrix_section(data[data["server"] == "caddy"], []) is None
    found = stack_matrix.cells(data)
    assert stack_matrix.checks_shown(found) == ["handshake", "goodput", "resumption", "streams", "loss"]
    (figure,) = draw(found, tmp_path)
    assert figure.png.stat().st_size > 1000
    section = matrix_section(data, [figure])
    assert section is not None
    texts = [getattr(b, "items", None) for b in section.blocks]
    assert [
        "fails handshake, resumption: india: quic-h3 × caddy",
        "fails handshake: india: quic-h3 × nginx",
    ] in texts
    assert ["quic-h3 cannot do: streams", "tls1.3-h2 cannot do: streams"] in texts
    (table,) = [b.frame for b in section.blocks if hasattr(b, "frame")]
    assert list(table.columns[4:]) == [*stack_matrix.CHECK_TITLES.values(), "verdict"]


def test_a_swept_condition_is_a_matrix_of_its_own() -> None:
    clean = rows()
    other = rows(tls_caddy_share=0.5).assign(condition_label="india aqm=fq_codel")
    found = stack_matrix.cells(pd.concat([clean, other]))
    assert {c.profile for c in found} == {"india", "india aqm=fq_codel"}
    assert verdicts([c for c in found if c.profile != "india"])[("tls1.3-h2", "caddy")] == "fail"


def test_a_pair_the_server_does_not_speak_is_not_spoken_not_a_failure(tmp_path: Path) -> None:
    # aioquic serves HTTP/3 only (stacks/aioquic/server.yaml): the runner made no TLS-over-TCP
    # trial for it, and its cell says so rather than "n/a" or "fail".
    data = pd.concat([rows(), pd.DataFrame([trial("quic-h3", "aioquic", "quic", 1.0, 1.0)] * 5)])
    found = stack_matrix.cells(data)
    quiet = cell(found, "tls1.3-h2", "aioquic")
    assert (quiet.verdict, quiet.n, quiet.text("handshake")) == ("not spoken", 0, "not spoken")
    assert set(quiet.checks.values()) == {"not spoken"}
    assert cell(found, "quic-h3", "aioquic").verdict == "pass"
    assert {v for k, v in verdicts(found).items() if k != ("tls1.3-h2", "aioquic")} == {"pass"}
    # "not spoken" adds no column of its own
    assert stack_matrix.checks_shown(found) == stack_matrix.checks_shown(stack_matrix.cells(rows()))
    table = stack_matrix.matrix_table(found).set_index(["client", "server"])
    assert table.loc[("tls1.3-h2", "aioquic"), "verdict"] == "not spoken"
    assert table.loc[("tls1.3-h2", "aioquic"), stack_matrix.CHECK_TITLES["handshake"]] == "not spoken"
    section = matrix_section(data, [])
    assert section is not None
    warned = [b for b in section.blocks if getattr(b, "warn", False)]
    assert not any("aioquic" in str(b) for b in warned)  # not among the failing cells
    (figure,) = draw(found, tmp_path)  # its own colour, and the caption says what it means
    assert "not spoken" in figure.caption


def test_a_spoken_pair_without_rows_stays_absent() -> None:
    # nginx speaks both: a pair with no rows (not run) gets no "not spoken" cell.
    data = rows()
    data = data[~((data["client"] == "tls1.3-h2") & (data["server"] == "nginx"))]
    assert ("tls1.3-h2", "nginx") not in verdicts(stack_matrix.cells(data))
