"""`quicbed export RUN DEST [--no-secrets]`: a run copied to share, without its TLS key logs,
never through a link a container planted."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from analysis_synthetic import Model, write_run

from quicbed import cli
from quicbed.analysis import write_report

CANARY = "CANARY-export-9f1c"


def _run_with_capture(root: Path) -> Path:
    run = write_run(root, "shared", Model(repetitions=3, workloads=("web",)), parquet=False)
    capture = run / "trials" / "c0" / "capture"
    capture.mkdir(parents=True)
    (capture / "client.pcap").write_bytes(b"\xd4\xc3\xb2\xa1pcap")
    fd = os.open(capture / "keys.log", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"CLIENT_TRAFFIC_SECRET_0 00 11\n")
    os.close(fd)
    canary = root / "canary.txt"
    canary.write_text(CANARY)
    (capture / "server.sqlog").symlink_to(canary)  # planted by a container
    (run / "trials" / "outside").symlink_to(root)  # a link to a directory
    os.mkfifo(capture / "fifo")
    return run


def test_export_without_secrets_leaves_key_logs_and_links_out(tmp_path: Path, capsys) -> None:
    run = _run_with_capture(tmp_path / "results")
    dest = tmp_path / "share" / "shared"
    assert cli.main(["export", str(run), str(dest), "--no-secrets"]) == 0
    out = capsys.readouterr().out
    assert "left out 1 secret file(s)" in out and "left out 3 link(s) or non-regular file(s)" in out, out
    capture = dest / "trials" / "c0" / "capture"
    assert sorted(p.name for p in capture.iterdir()) == ["client.pcap"]
    assert not (dest / "trials" / "outside").exists()
    assert not any(CANARY in p.read_text(errors="replace") for p in dest.rglob("*") if p.is_file())
    assert (dest / "rows.jsonl").read_bytes() == (run / "rows.jsonl").read_bytes()
    modes = {stat.S_IMODE(p.stat().st_mode) for p in dest.rglob("*") if p.is_file()}
    assert modes <= {0o644, 0o600}, modes
    assert write_report([str(dest)], tmp_path / "report").is_file()  # still a run to report on


def test_export_with_secrets_keeps_them_private_and_says_so(tmp_path: Path, capsys) -> None:
    run = _run_with_capture(tmp_path / "results")
    dest = tmp_path / "copy"
    assert cli.main(["export", str(run), str(dest)]) == 0
    assert "warning: 1 TLS key log(s) copied" in capsys.readouterr().out
    keys = dest / "trials" / "c0" / "capture" / "keys.log"
    assert keys.read_text().startswith("CLIENT_TRAFFIC_SECRET_0")
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600


def test_export_refuses_an_existing_destination_and_a_non_run(tmp_path: Path, capsys) -> None:
    run = _run_with_capture(tmp_path / "results")
    (tmp_path / "taken").mkdir()
    assert cli.main(["export", str(run), str(tmp_path / "taken")]) == 2
    assert "exists; export writes a new directory" in capsys.readouterr().out
    assert cli.main(["export", str(tmp_path / "taken"), str(tmp_path / "x")]) == 2
    assert "not a run directory" in capsys.readouterr().out
    assert cli.main(["export", "../etc", str(tmp_path / "y")]) == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
