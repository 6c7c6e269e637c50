"""Capture's pure logic: the experiment field and --capture, the tools' capture flags and the
reasons for what a stack cannot write, the server's qlog files per trial, the descriptors'
qlog: field. The real files on a real path: test_capture_path.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quicbed import rowschema, safefs
from quicbed.clients.tools import TOOLS
from quicbed.experiments.capture import CLIENT_TRIALS, ServerQlog, TrialCapture, path_interface
from quicbed.experiments.commands import cmd_run
from quicbed.experiments.matrix import conditions, trials
from quicbed.experiments.options import RunOptions
from quicbed.experiments.runner import _run_trial
from quicbed.experiments.schema import ExperimentError, parse_capture, parse_experiment
from quicbed.servers import get_server
from quicbed.servers.descriptors import load_descriptor
from quicbed.yamlio import LocatedError

BASE = """\
name: t
profiles: [india]
servers: [caddy]
clients: [quic_perf]
workload: {kind: web}
"""


def test_capture_field_is_parsed_and_left_out_of_the_matrix() -> None:
    plain = parse_experiment(BASE, "t.yaml")
    captured = parse_experiment(BASE + "capture: [qlog, pcap, keys]\n", "t.yaml")
    assert plain.capture == () and captured.capture == ("keys", "pcap", "qlog")
    assert plain.matrix_hash() == captured.matrix_hash()  # a resume may capture otherwise


def test_unknown_capture_is_one_located_line() -> None:
    with pytest.raises(ExperimentError) as err:
        parse_experiment(BASE + "capture: [qlog, x]\n", "t.yaml")
    assert str(err.value) == "t.yaml:6: capture[1]: unknown capture 'x' (known: keys, pcap, qlog)"


def test_command_line_overrides_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "t.yaml"
    file.write_text(BASE + "capture: [pcap]\n")
    assert cmd_run(file, lambda e, d: None, RunOptions(dry=True)) == 0  # type: ignore[arg-type,return-value]
    assert "capture: pcap per trial" in capsys.readouterr().out
    assert cmd_run(file, lambda e, d: None, RunOptions(dry=True, capture="qlog,keys")) == 0  # type: ignore[arg-type,return-value]
    assert "capture: keys, qlog per trial" in capsys.readouterr().out
    assert cmd_run(file, lambda e, d: None, RunOptions(dry=True, capture="none")) == 0  # type: ignore[arg-type,return-value]
    assert "capture: none" in capsys.readouterr().out
    assert cmd_run(file, lambda e, d: None, RunOptions(dry=True, capture="qlog,x")) == 2  # type: ignore[arg-type,return-value]
    assert "--capture: unknown capture 'x' (known: keys, pcap, qlog)" in capsys.readouterr().out
    assert parse_capture("pcap, keys,pcap") == ("keys", "pcap")


def _capture(tmp_path: Path, tool: str, quic: bool, server: str = "caddy") -> TrialCapture:
    return TrialCapture(
        kinds=("keys", "pcap", "qlog"),
        run_dir=tmp_path,
        trial_id="c0/caddy/x/index.html/r0",
        tool=TOOLS[tool],
        quic=quic,
        server=get_server(server),
        server_log_dir=tmp_path / "logs",
        client_root=CLIENT_TRIALS,
    )


def test_tools_get_their_flags_and_say_what_they_cannot(tmp_path: Path) -> None:
    trial = f"{CLIENT_TRIALS}/c0~caddy~x~index.html~r0"
    quic = _capture(tmp_path, "quic_perf", quic=True)
    assert quic.tool_args() == ["--keylog", f"{trial}/keys.log", "--qlog", f"{trial}/client.sqlog"]
    assert quic.missing == {}
    tcp = _capture(tmp_path, "tls_perf", quic=False)
    assert tcp.tool_args() == ["--keylog", f"{trial}/keys.log"]
    assert "TCP" in tcp.missing["qlog/client"]
    browser = _capture(tmp_path, "chromium", quic=True)
    assert browser.tool_args() == ["--keylog", f"{trial}/keys.log"]
    assert browser.missing["qlog/client"] == "chromium: NetLog not collected yet"


def test_a_server_without_qlog_says_why(tmp_path: Path) -> None:
    capture = _capture(tmp_path, "quic_perf", quic=True, server="nginx")
    capture.kinds = ("qlog",)
    capture.start(pid=0, intf_names=["lo", "client-eth0"])
    columns = capture.finish()
    assert columns["capture_missing"]["qlog/server"].startswith("nginx 1.26 writes no qlog")
    assert columns["capture_missing"]["qlog/client"] == "quic_perf wrote nothing"
    assert columns["capture_files"] == []
    assert (tmp_path / rowschema.capture_dir("c0/caddy/x/index.html/r0")).is_dir()


def test_server_qlog_takes_the_trials_files_only(tmp_path: Path) -> None:
    qlog = ServerQlog(tmp_path, get_server("caddy"))  # caddy: /var/log/quicbed/qlog -> tmp/qlog
    qlog.dir.mkdir()
    (qlog.dir / "health_server.sqlog").write_bytes(b"\x1eold\n")
    qlog.forget_earlier()
    (qlog.dir / "a_server.sqlog").write_bytes(b"\x1eA\n")
    (qlog.dir / "b_server.sqlog").write_bytes(b"\x1eB\n")
    dest = tmp_path / "server.sqlog"
    with safefs.open_dir(tmp_path) as out:
        assert qlog.collect(out, dest.name)
        assert sorted(dest.read_bytes().split(b"\x1e")[1:]) == [b"A\n", b"B\n"]
        assert list(qlog.dir.iterdir()) == []
        assert not qlog.collect(out, "none.sqlog")


def test_path_interface_is_the_only_one_besides_lo() -> None:
    assert path_interface(["lo", "client-eth0"]) == "client-eth0"
    with pytest.raises(RuntimeError, match="2 path interfaces"):
        path_interface(["lo", "a", "b"])


@pytest.mark.parametrize(
    ("qlog", "message"),
    [
        ("qlog: {env: QLOGDIR, dir: /tmp/q}", "must be under /var/log/quicbed/"),
        ("qlog: {env: QLOGDIR, dir: /var/log/quicbed/q, cannot: no}", "not both"),
        ("qlog: {env: QLOGDIR}", "give env and dir"),
        ("qlog: {cannot: ''}", "non-empty"),
    ],
)
def test_descriptor_qlog_field_is_checked(tmp_path: Path, qlog: str, message: str) -> None:
    text = get_server("caddy").file
    server = tmp_path / "caddy" / "server.yaml"
    server.parent.mkdir()
    kept = Path(text).read_text().split("\nqlog:")[0]
    server.write_text(f"{kept}\n{qlog}\n")
    with pytest.raises(LocatedError, match=message):
        load_descriptor(server)


def test_the_captures_own_time_is_left_out_of_wall_s() -> None:
    class Slow:  # an executor whose trial spends 0.3 s, 0.25 s of it capturing
        def ensure_server(self, name: str) -> None:
            pass

        def run_trial(self, trial: object) -> dict:
            time.sleep(0.3)
            return {"capture_s": 0.25}

    exp = parse_experiment(BASE, "t.yaml")
    (cond,) = conditions(exp)
    row = _run_trial(trials(exp, cond)[0], Slow(), {}, "run")  # type: ignore[arg-type]
    assert 0.04 <= row["wall_s"] < 0.2 and row["capture_s"] == 0.25


def test_parquet_holds_rows_whose_capture_missing_is_always_empty(tmp_path) -> None:
    """A run capturing every kind its stacks write has `capture_missing: {}` in every row:
    pyarrow makes that a struct without fields, which Parquet cannot hold (a quick paper-web
    run with `capture: [pcap, keys]` ended in that traceback). It is kept as JSON text."""
    import pyarrow.parquet as pq

    from quicbed.experiments.store import write_parquet

    rows = [
        {"trial_id": "c0/caddy/quic-h3/x/r0", "capture_missing": {}, "nested": [{}]},
        {"trial_id": "c0/caddy/quic-h3/x/r1", "capture_missing": {}, "nested": [{}]},
    ]
    table = pq.read_table(write_parquet(rows, tmp_path / "rows.parquet"))
    assert table.column("capture_missing").to_pylist() == ["{}", "{}"]
    assert table.column("nested").to_pylist() == ["[{}]", "[{}]"]
