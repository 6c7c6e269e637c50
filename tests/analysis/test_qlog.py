"""The qlog validator (analysis/qlog.py) on good and broken records. The headers are the
stacks' own (ngtcp2 1.11, OpenSSL 3.5.9, quic-go v0.63), shortened; the path test
(tests/experiments/test_capture_path.py) applies the validator to real files."""

from __future__ import annotations

import json

import pytest

from quicbed.analysis.qlog import check_qlog, main

NGTCP2 = {
    "qlog_format": "JSON-SEQ",
    "qlog_version": "0.3",
    "trace": {
        "vantage_point": {"name": "ngtcp2", "type": "client"},
        "common_fields": {"protocol_type": ["QUIC"], "time_format": "relative", "reference_time": 0},
    },
}
OPENSSL = {
    "qlog_version": "0.3",
    "qlog_format": "JSON-SEQ",
    "trace": {
        "common_fields": {"time_format": "delta", "protocol_type": ["QUIC"]},
        "vantage_point": {"type": "client", "name": "OpenSSL/3.5.9 (debian-amd64)"},
    },
}
QUIC_GO = {
    "file_schema": "urn:ietf:params:qlog:file:sequential",
    "serialization_format": "application/qlog+json-seq",
    "title": "quic-go qlog",
    "trace": {"vantage_point": {"type": "server"}, "common_fields": {"group_id": "0a98"}},
    "qlog_format": "JSON-SEQ",
    "qlog_version": "0.3",
}
EVENT = {"time": 0.082124, "name": "recovery:congestion_state_updated", "data": {"new": "slow_start"}}


def seq(*records: object) -> bytes:
    return b"".join(b"\x1e" + json.dumps(r).encode() + b"\n" for r in records)


@pytest.mark.parametrize("header", [NGTCP2, OPENSSL, QUIC_GO], ids=["ngtcp2", "openssl", "quic-go"])
def test_each_stacks_format_passes(header: dict) -> None:
    result = check_qlog(seq(header, EVENT, {**EVENT, "time": 3}))
    assert result.ok, result.problems
    assert (result.traces, result.events) == (1, 2)


def test_concatenated_connections_are_separate_traces() -> None:
    result = check_qlog(seq(NGTCP2, EVENT, OPENSSL, EVENT))
    assert result.ok and result.traces == 2 and result.vantage_points == ["client", "client"]


BROKEN = [
    (json.dumps(NGTCP2).encode(), "does not start with a record separator"),
    (seq(EVENT), "an event before any header record"),
    (seq({**NGTCP2, "qlog_format": "JSON"}), "qlog_format is 'JSON'"),
    (seq({**NGTCP2, "qlog_version": "draft-02"}), "qlog_version 'draft-02'"),
    (seq({k: v for k, v in NGTCP2.items() if k != "trace"}), "no trace object"),
    (seq({**NGTCP2, "trace": {"title": "x"}}), "neither vantage_point nor common_fields"),
    (seq({**NGTCP2, "trace": {"vantage_point": {"type": "router"}}}), "vantage_point type 'router'"),
    (seq(NGTCP2, {"name": "transport:packet_sent"}), "event time None"),
    (seq(NGTCP2, {**EVENT, "time": "0.1"}), "event time '0.1'"),
    (seq(NGTCP2, {"time": 1}), "event name None"),
    (seq(NGTCP2, {**EVENT, "name": "packet_sent"}), "is not category:event"),
    (seq(NGTCP2) + b"\x1e{not json\n", "record 2: not JSON"),
    (seq(NGTCP2, [1, 2]), "record 2: not a JSON object"),
]


@pytest.mark.parametrize(("data", "problem"), BROKEN, ids=[problem for _, problem in BROKEN])
def test_broken_records_are_named(data: bytes, problem: str) -> None:
    result = check_qlog(data)
    assert not result.ok
    assert any(problem in p for p in result.problems), result.problems


def test_cli_exit_codes(tmp_path, capsys) -> None:
    good, bad = tmp_path / "good.sqlog", tmp_path / "bad.sqlog"
    good.write_bytes(seq(QUIC_GO, EVENT))
    bad.write_bytes(seq(EVENT))
    assert main([str(good)]) == 0
    assert main([str(good), str(bad)]) == 1
    assert "INVALID" in capsys.readouterr().out
