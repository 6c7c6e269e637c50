"""Root never follows a link a container put in a directory it can write (issue 46): the run's
trials/ (the client's) and a server's log directory. Each test puts symbolic links to a canary
file and a canary directory outside the run where a hostile client or server could, drives
the capture through its public calls, and proves nothing outside was read, appended, changed
or deleted. Against the earlier path-following code each of them fails."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest

from quicbed import rowschema, safefs
from quicbed.clients.tools import TOOLS
from quicbed.experiments.capture import CLIENT_TRIALS, ServerQlog, TrialCapture
from quicbed.servers import get_server

TRIAL = "c0/caddy/x/index.html/r0"
SECRET = b"canary: never in the results\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A canary directory (with a canary file) beside the run: nothing may touch it."""
    canary = tmp_path / "outside"
    canary.mkdir()
    for name in ("canary", *rowschema.CAPTURE_FILES.values()):
        (canary / name).write_bytes(SECRET)
        (canary / name).chmod(0o644)
    return canary


def _untouched(canary: Path) -> None:
    assert sorted(p.name for p in canary.iterdir()) == sorted(["canary", *rowschema.CAPTURE_FILES.values()])
    for path in canary.iterdir():
        assert path.read_bytes() == SECRET, path
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def _capture(run: Path, kinds: tuple[str, ...] = ("keys", "qlog")) -> TrialCapture:
    return TrialCapture(
        kinds=kinds,
        run_dir=run,
        trial_id=TRIAL,
        tool=TOOLS["quic_perf"],
        quic=True,
        server=get_server("caddy"),  # writes qlog into /var/log/quicbed/qlog (logs/caddy/qlog)
        server_log_dir=run / "logs" / "caddy",
        client_root=CLIENT_TRIALS,
    )


def _trial_dir(run: Path) -> Path:
    return run / rowschema.capture_dir(TRIAL)


def test_a_stray_qlog_directory_made_a_link_deletes_nothing_outside(tmp_path: Path, outside: Path) -> None:
    run = tmp_path / "run"
    capture = _capture(run)
    capture.start(pid=0, intf_names=["lo", "eth0"])
    (_trial_dir(run) / "client.sqlog.d").symlink_to(outside)  # the client's doing
    capture.finish()
    _untouched(outside)
    assert not (_trial_dir(run) / "client.sqlog.d").exists()  # the link itself is gone


def test_server_sqlog_made_a_link_appends_nothing_outside(tmp_path: Path, outside: Path) -> None:
    run = tmp_path / "run"
    capture = _capture(run)
    capture.start(pid=0, intf_names=["lo", "eth0"])
    qlog = run / "logs" / "caddy" / "qlog"
    qlog.mkdir(parents=True)
    (qlog / "conn_server.sqlog").write_bytes(b"\x1e{}\n")
    (_trial_dir(run) / "server.sqlog").symlink_to(outside / "canary")
    columns = capture.finish()
    _untouched(outside)
    assert f"{rowschema.capture_dir(TRIAL)}/server.sqlog" not in columns["capture_files"]


def test_a_servers_qlog_directory_made_a_link_is_neither_emptied_nor_copied(
    tmp_path: Path, outside: Path
) -> None:
    run = tmp_path / "run"
    (run / "logs" / "caddy").mkdir(parents=True)
    (run / "logs" / "caddy" / "qlog").symlink_to(outside)  # the server's doing
    capture = _capture(run, ("qlog",))
    capture.start(pid=0, intf_names=["lo", "eth0"])  # forget_earlier
    columns = capture.finish()  # collect
    _untouched(outside)
    assert not (_trial_dir(run) / "server.sqlog").exists()
    assert "wrote no qlog" in columns["capture_missing"]["qlog/server"]


def test_a_qlog_file_that_links_out_is_not_copied(tmp_path: Path, outside: Path) -> None:
    qlog = ServerQlog(tmp_path / "logs", get_server("caddy"), anchor=tmp_path)
    qlog.dir.mkdir(parents=True)
    (qlog.dir / "a_server.sqlog").write_bytes(b"\x1eA\n")
    (qlog.dir / "b_server.sqlog").symlink_to(outside / "canary")
    os.mkfifo(qlog.dir / "c_server.sqlog")  # a FIFO must not hang the copy either
    with safefs.open_dir(tmp_path) as dest:
        assert qlog.collect(dest, "server.sqlog")
    assert (tmp_path / "server.sqlog").read_bytes() == b"\x1eA\n"
    assert sorted(p.name for p in qlog.dir.iterdir()) == ["b_server.sqlog", "c_server.sqlog"]
    qlog.forget_earlier()  # the next trial's start: the link and the FIFO go, as themselves
    assert list(qlog.dir.iterdir()) == []
    _untouched(outside)


def test_a_trial_directory_made_a_link_is_not_written_through(tmp_path: Path, outside: Path) -> None:
    run = tmp_path / "run"
    _trial_dir(run).parent.mkdir(parents=True)
    _trial_dir(run).symlink_to(outside)
    capture = _capture(run, ("keys", "pcap", "qlog"))
    capture.start(pid=0, intf_names=["lo", "eth0"])  # would unlink the canary's keys.log etc.
    columns = capture.finish()
    _untouched(outside)
    assert columns["capture_files"] == []
    assert "trial directory unusable" in columns["capture_missing"]["keys"]


def test_trials_made_a_link_is_not_followed_either(tmp_path: Path, outside: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / rowschema.TRIALS_DIR).symlink_to(outside)
    capture = _capture(run)
    capture.start(pid=0, intf_names=["lo", "eth0"])
    capture.finish()
    _untouched(outside)


def test_key_logs_are_0600_and_a_key_log_link_changes_nothing(tmp_path: Path, outside: Path) -> None:
    run = tmp_path / "run"
    capture = _capture(run, ("keys",))
    capture.start(pid=0, intf_names=["lo", "eth0"])
    keys = _trial_dir(run) / "keys.log"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600  # before the tool writes a secret
    keys.unlink()
    keys.write_bytes(b"CLIENT_RANDOM 00 11\n")  # a tool that makes its own file
    keys.chmod(0o644)
    assert capture.finish()["capture_files"] == [f"{rowschema.capture_dir(TRIAL)}/keys.log"]
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    again = _capture(run, ("keys",))
    again.start(pid=0, intf_names=["lo", "eth0"])
    keys.unlink()
    keys.symlink_to(outside / "keys.log")
    again.finish()
    _untouched(outside)


def test_open_dir_refuses_a_link_at_any_component(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").symlink_to(outside)
    with pytest.raises(OSError) as err:
        safefs.open_dir(tmp_path, "a/b")
    assert err.value.errno in (errno.ELOOP, errno.ENOTDIR)
    with pytest.raises(OSError):
        safefs.open_dir(tmp_path / "a" / "b")  # the anchor itself is not followed either
    with safefs.opened_dir(tmp_path, "a/b") as directory:
        assert directory is None
    with pytest.raises(safefs.UnsafeFile), safefs.open_dir(tmp_path) as top:
        top.subdir("..")


def test_names_are_one_component(tmp_path: Path) -> None:
    with safefs.open_dir(tmp_path) as directory:
        for name in ("../x", "a/b", "..", ".", ""):
            with pytest.raises(safefs.UnsafeFile):
                directory.open_file(name, os.O_RDONLY)


def test_copy_out_refuses_a_file_over_its_bound(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 100)
    (tmp_path / "small").write_bytes(b"y" * 10)
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with safefs.open_dir(tmp_path) as directory:
            with pytest.raises(safefs.UnsafeFile, match="larger than"):
                directory.copy_out("big", out, limit=50)
            assert directory.copy_out("small", out, limit=50) == 10
    finally:
        os.close(out)
    assert (tmp_path / "out").read_bytes() == b"y" * 10
    assert safefs.MAX_FILE_BYTES == 256 * 1024 * 1024


def test_a_fifo_in_a_files_place_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "keys.log")
    done = threading.Event()

    def attempt() -> None:
        with safefs.open_dir(tmp_path) as directory:
            with pytest.raises(safefs.UnsafeFile):
                directory.open_file("keys.log", os.O_RDONLY)
            with pytest.raises(safefs.UnsafeFile):
                directory.open_file("keys.log", os.O_WRONLY | os.O_APPEND)
            directory.make_private("keys.log")  # quietly nothing
        done.set()

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done.is_set()
    assert stat.S_ISFIFO((tmp_path / "keys.log").lstat().st_mode)
