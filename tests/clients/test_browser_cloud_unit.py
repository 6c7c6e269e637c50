"""The browser's cloud download (clients/browser/cloud_fetch.py, `browser_perf --workload
cloud`): the row from the fetch's Resource Timing entry and DevTools' response, its errors, and
how the runner asks for it (the cloud workload's --workload, which only the browser takes).
Pure logic, loaded by path as test_browser_unit does; the path test is
test_browser_path.py::test_a_cloud_download_crosses_the_link_at_its_rate."""

from __future__ import annotations

from typing import Any

import pytest
from browser_module import browser_argv, load_browser_perf

from quicbed.clients.tools import TOOLS
from quicbed.workloads import WORKLOADS

bp = load_browser_perf()
import cloud_fetch  # noqa: E402 - beside browser_perf.py, on the path it put first

FILE = "https://server.quicbed/cloud/10MB"
SIZE = 10_000_000
ORIGIN_MS = 1_700_000_000_000.0


def _entry(hop: str = "h3", **over: Any) -> dict[str, Any]:
    """A fetch's Resource Timing entry (ms from the blank page's timeOrigin)."""
    secure = 0 if hop == "h3" else 120.0
    entry = {
        "name": FILE,
        "nextHopProtocol": hop,
        "startTime": 100.0,
        "connectStart": 101.0,
        "secureConnectionStart": secure or 101.0,
        "connectEnd": 181.5 if hop == "h3" else 261.5,
        "responseStart": 262.0 if hop == "h3" else 342.0,
        "responseEnd": 4100.0,
        "encodedBodySize": SIZE,
        "responseStatus": 200,
    }
    return {**entry, **over}


def _result(entry: dict[str, Any] | None = None, **over: Any) -> dict[str, Any]:
    return {
        "timeOrigin": ORIGIN_MS,
        "status": 200,
        "bodyBytes": SIZE,
        "error": "",
        "entry": entry or _entry(),
        **over,
    }


def _net(hop: str = "h3", security: str = "QUIC", **over: Any) -> dict[str, Any]:
    response = {
        "url": FILE,
        "protocol": hop,
        "status": 200,
        "remoteIPAddress": "10.77.2.10",
        "remotePort": 443,
        "connectionId": 7,
        "securityDetails": {
            "protocol": security,
            "cipher": "AES_128_GCM",
            "keyExchangeGroup": "X25519MLKEM768",
        },
    }
    return {"requests": [FILE], "responses": [response], "failures": [], "document": None, **over}


def _row(protocol: str = "quic") -> dict[str, Any]:
    return bp.empty_row(protocol, FILE, 0)


# ------------------------------------------------------------------------------ the row


def test_the_row_counts_from_the_fetch_start_like_a_perf_tool() -> None:
    row = cloud_fetch.build_cloud_row(_row(), _result(), _net())
    # Every *_ms from the fetch's start (startTime 100 ms after the blank page's origin).
    assert (row["ttfb_ms"], row["download_time_ms"], row["connection_time_ms"]) == (162.0, 4000.0, 80.5)
    assert row["t_start"] == pytest.approx((ORIGIN_MS + 100.0) / 1e3)
    assert row["t_done"] - row["t_start"] == pytest.approx(4.0)
    assert row["throughput_mbps"] == pytest.approx(SIZE * 8 / 4.0 / 1e6)  # 20 Mbit/s
    assert (row["bytes"], row["http_status"], row["http_version"], row["tls_version"]) == (
        SIZE,
        200,
        "3",
        "TLSv1.3",
    )
    assert (row["resources"], row["resource_protocols"], row["connections"]) == (1, {"h3": 1}, 1)
    assert (row["remote_ip"], row["tls_group"]) == ("10.77.2.10", "X25519MLKEM768")
    # QUIC connects at the handshake's end (no transport handshake of its own).
    assert row["t_connect"] == row["t_handshake"] == pytest.approx((ORIGIN_MS + 181.5) / 1e3)


def test_a_tcp_row_connects_when_tls_starts() -> None:
    row = cloud_fetch.build_cloud_row(_row("tls1.3"), _result(_entry("h2")), _net("h2", "TLS 1.3"))
    assert row["t_connect"] == pytest.approx((ORIGIN_MS + 120.0) / 1e3)
    assert (row["connection_time_ms"], row["http_version"]) == (160.5, "2")


def test_a_download_is_no_page_load() -> None:
    """The page columns stay null: a browser's row with page_load_time_ms is analysed as a
    `pageload`, never beside the perf tools' cloud rows (analysis/load.py)."""
    row = _row()
    row.update(page_load_time_ms=1.0, dom_content_loaded_ms=1.0, fcp_ms=1.0, lcp_ms=1.0)
    cloud_fetch.build_cloud_row(row, _result(), _net())
    assert [row[k] for k in ("page_load_time_ms", "dom_content_loaded_ms", "fcp_ms", "lcp_ms")] == [None] * 4
    assert set(row) == set(bp.ROW_KEYS)


def test_the_blank_page_is_not_the_files_evidence() -> None:
    blank = cloud_fetch.blank_url(FILE)
    assert blank == "https://server.quicbed" + cloud_fetch.BLANK_PATH
    net = _net()
    net["requests"].insert(0, blank)
    net["responses"].insert(0, {"url": blank, "protocol": "http/1.1"})
    kept = cloud_fetch.file_only(net, FILE)
    assert kept["requests"] == [FILE] and [r["url"] for r in kept["responses"]] == [FILE]
    assert cloud_fetch.cloud_error("quic", FILE, _result(), kept) == ""


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("protocol", "result", "net", "start"),
    [
        ("quic", _result(error="timeout", bodyBytes=1234), _net(), "timeout: 1234 bytes"),
        (
            "quic",
            _result(error="TypeError: Failed to fetch", status=0, entry={}),
            _net(responses=[], failures=[{"url": FILE, "errorText": "net::ERR_CONNECTION_REFUSED"}]),
            "connect: ERR_CONNECTION_REFUSED",
        ),
        (
            "quic",
            _result(error="TypeError: Failed to fetch", status=0, entry={}),
            _net(responses=[], failures=[{"url": FILE, "errorText": "net::ERR_CERT_AUTHORITY_INVALID"}]),
            "tls: ERR_CERT_AUTHORITY_INVALID",
        ),
        ("quic", _result(status=404), _net(), "http: status 404"),
        ("quic", _result(bodyBytes=SIZE - 1), _net(), "http: read 9999999 bytes"),
        ("quic", {**_result(), "entry": None}, _net(), "browser: no Resource Timing entry"),
        # Over TCP when QUIC was asked: the entry and DevTools both say so.
        ("quic", _result(_entry("h2")), _net("h2", "TLS 1.3"), "protocol: asked quic (h3): /cloud/10MB"),
        # TLS 1.2 when TLS 1.3 was asked: DevTools' security details say so.
        ("tls1.3", _result(_entry("h2")), _net("h2", "TLS 1.2"), "protocol: asked tls1.3 (h2):"),
        ("quic", _result(), _net(requests=[FILE, "https://server.quicbed/x"]), "protocol: asked only"),
        ("quic", _result(), _net(responses=[]), "protocol: no DevTools response"),
    ],
)
def test_what_is_not_a_whole_file_over_the_asked_protocol_is_an_error(
    protocol: str, result: dict[str, Any], net: dict[str, Any], start: str
) -> None:
    assert cloud_fetch.cloud_error(protocol, FILE, result, net).startswith(start)


@pytest.mark.parametrize(
    ("protocol", "hop", "security"), [("quic", "h3", "QUIC"), ("tls1.3", "h2", "TLS 1.3")]
)
def test_the_whole_file_over_the_asked_protocol_passes(protocol: str, hop: str, security: str) -> None:
    assert cloud_fetch.cloud_error(protocol, FILE, _result(_entry(hop)), _net(hop, security)) == ""


# ------------------------------------------------------------------------------ how it is asked for


def _argv(ca: str, *extra: str) -> list[str]:
    return browser_argv(FILE, ca, *extra)


def test_the_workload_flag_parses_and_a_download_has_no_duration(ca: str) -> None:
    assert bp.parse_args(_argv(ca)).workload == "web"
    assert bp.parse_args(_argv(ca, "--workload", "cloud")).workload == "cloud"
    with pytest.raises(bp.UsageError):
        bp.parse_args(_argv(ca, "--workload", "cloud", "--duration", "5"))
    with pytest.raises(bp.UsageError):
        bp.parse_args(_argv(ca, "--workload", "video"))


def test_firefox_refuses_the_download_with_exit_3(ca: str, capsys: pytest.CaptureFixture) -> None:
    assert bp.main(_argv(ca, "--workload", "cloud", "--browser", "firefox")) == bp.EXIT_UNSUPPORTED
    out, err = capsys.readouterr()
    assert out == "" and "cloud download runs in Chromium" in err and err.count("\n") == 1


def test_the_runner_tells_only_the_browser_that_the_url_is_a_file() -> None:
    cloud = WORKLOADS["cloud"].tool_args(None, {})
    argv = dict(
        chromium=TOOLS["chromium"].argv(FILE, "r", "ca", 30, {"protocol": "quic"}, cloud),
        tls_perf=TOOLS["tls_perf"].argv(FILE, "r", "ca", 30, {}, cloud),
        quic_perf=TOOLS["quic_perf"].argv(FILE, "r", "ca", 30, {}, cloud),
    )
    assert argv["chromium"][-2:] == ["--workload", "cloud"]
    assert "--workload" not in argv["tls_perf"] + argv["quic_perf"]
    assert "cloud" in TOOLS["chromium"].workloads and "cloud" not in TOOLS["firefox"].workloads
