"""Run bookkeeping without a network: store durability, locking, the runner, resume, check."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_process import start_synthetic, wait_for_rows

from quicbed.experiments.check import check
from quicbed.experiments.commands import cmd_check, cmd_run
from quicbed.experiments.matrix import Trial
from quicbed.experiments.options import RunOptions
from quicbed.experiments.runner import run_experiment
from quicbed.experiments.schema import parse_experiment
from quicbed.experiments.shard import unit_trials, units
from quicbed.experiments.store import RunStore, StoreError, load_rows, read_manifest
from quicbed.experiments.synthetic import SyntheticExecutor
from quicbed.servers import SERVERS

EXPERIMENT = """\
name: synth
profiles:
  - {name: lab, rtt_ms: 80, rate_mbit: 20}
sweep: {loss_pct: [0, 1]}
servers: [caddy, nginx]
clients:
  - {tool: tls_perf, tls: ["1.2", "1.3"], http: "2"}
  - {tool: quic_perf}
workload: {kind: web, objects: [index.html]}
repetitions: 5
expect:
  - "0.9 < quic.connection_time.median / rtt < 1.15"
  - "1.85 < tls1.3.connection_time.median / rtt < 2.3"
  - "2.8 < tls1.2.connection_time.median / rtt < 3.4"
"""
TOTAL = 2 * 2 * 3 * 5


@pytest.fixture
def exp_file(tmp_path):
    path = tmp_path / "synth.yaml"
    path.write_text(EXPERIMENT)
    return path


def run(exp_file: Path, run_dir: Path, executor=None, **kw):
    exp = parse_experiment(exp_file.read_text(), str(exp_file))
    return run_experiment(exp, executor or SyntheticExecutor(), run_dir, progress=False, **kw)


# --- store --------------------------------------------------------------------------------------


def test_append_and_load_ignores_torn_last_line(tmp_path):
    with RunStore(tmp_path / "r").open() as store:
        store.append({"trial_id": "a", "x": 1})
        store.append({"trial_id": "b", "x": float("nan")})
    with open(tmp_path / "r/rows.jsonl", "ab") as f:
        f.write(b'{"trial_id": "c", "x"')  # a crash mid-write
    rows, bad = load_rows(tmp_path / "r")
    assert [r["trial_id"] for r in rows] == ["a", "b"] and bad == 1
    with RunStore(tmp_path / "r").open(create=False) as store:  # reopening cuts the torn tail
        assert store.torn_lines == 1
        store.append({"trial_id": "c"})
    assert [r["trial_id"] for r in load_rows(tmp_path / "r")[0]] == ["a", "b", "c"]


def test_lock_conflict_names_the_other_pid(tmp_path):
    with RunStore(tmp_path / "r").open():
        with pytest.raises(StoreError, match=rf"in use by another quicbed run \(pid {os.getpid()}\)"):
            RunStore(tmp_path / "r").open()
    RunStore(tmp_path / "r").open().close()  # released on close


def test_unwritable_results_dir(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="is not writable"):
        RunStore(tmp_path / "file" / "run").open()


@contextlib.contextmanager
def read_only(path: Path):
    """`path` unwritable for this process: without write permission for a user; for root,
    which ignores permission bits, a read-only bind mount of it onto itself (no namespace)."""
    if os.geteuid() != 0:
        path.chmod(0o500)
        try:
            yield "permission denied"
        finally:
            path.chmod(0o700)
        return
    for argv in (["mount", "--bind", str(path), str(path)], ["mount", "-o", "remount,bind,ro", str(path)]):
        res = subprocess.run(argv, capture_output=True, text=True)
        if res.returncode:
            subprocess.run(["umount", str(path)], capture_output=True)
            pytest.fail(f"root cannot make {path} read-only: {' '.join(argv)}: {res.stderr}")
    try:
        yield "read-only file system"
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_read_only_results_dir(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    with read_only(results) as why:
        with pytest.raises(OSError):  # the set-up holds for this process, root included
            (results / "probe").write_text("")
        with pytest.raises(StoreError, match=f"(?i)is not writable: {why}"):
            RunStore(results / "run").open()
    assert not (results / "run").exists()
    RunStore(results / "run").open().close()  # and writable again afterwards


@contextlib.contextmanager
def tiny_tmpfs(path: Path, size: str = "64k"):
    path.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    ).returncode:
        pytest.fail(f"root cannot mount a tmpfs on {path}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="as non-root: mounting a tmpfs needs root")
def test_disk_full_leaves_last_row_whole_or_absent(tmp_path):
    with tiny_tmpfs(tmp_path / "mnt") as mnt, RunStore(mnt / "r").open() as store:
        row = {"trial_id": "", "pad": "x" * 3000}
        written = 0
        with pytest.raises(StoreError, match="no space left on device"):
            for i in range(1000):
                store.append(row | {"trial_id": f"t{i}"})
                written += 1
        rows, bad = load_rows(mnt / "r")
        assert bad == 0 and len(rows) == written
        assert (mnt / "r/rows.jsonl").read_bytes().endswith(b"\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="as non-root: mounting a tmpfs needs root")
def test_run_on_full_disk_is_a_clean_error(tmp_path, exp_file, capsys):
    with tiny_tmpfs(tmp_path / "mnt", "32k") as mnt:
        code = cmd_run(exp_file, lambda e, d: SyntheticExecutor(), RunOptions(results=mnt, progress=False))
        out = capsys.readouterr().out
        assert code == 1 and "no space left on device" in out and "Traceback" not in out
        assert "--resume" in out
        run_dir = next(mnt.iterdir())
        rows, bad = load_rows(run_dir)
        assert bad == 0 and 0 < len(rows) < TOTAL


# --- runner -------------------------------------------------------------------------------------


def test_run_writes_rows_manifest_and_parquet(tmp_path, exp_file):
    import pandas as pd

    summary = run(exp_file, tmp_path / "r")
    assert (summary.ran, summary.failed, summary.exit_code) == (TOTAL, 0, 0)
    rows, _ = load_rows(tmp_path / "r")
    assert len({r["trial_id"] for r in rows}) == TOTAL
    row = rows[0]
    assert row["trial_id"] == "c0/caddy/tls1.2-h2/index.html/r0"
    assert (row["protocol"], row["client"], row["rtt_ms"], row["calib_rtt_ms"]) == (
        "tls1.2",
        "tls1.2-h2",
        80,
        80,
    )
    assert row["error"] is None and row["cpu_bound"] is False and row["cpu_client_pct"] is None
    manifest = read_manifest(tmp_path / "r")
    assert manifest["status"] == "complete" and manifest["experiment_text"] == EXPERIMENT
    assert manifest["conditions"]["c1"]["calibration"]["rtt_ms"] == 80
    assert manifest["executor"] == {"backend": "synthetic", "delay_s": 0.0}
    assert set(manifest["git"]) == {"commit", "dirty"} and manifest["host"]["kernel"]
    assert manifest["file_sha256"] and manifest["seed"] == 1 and manifest["ended_at"]
    assert len(pd.read_parquet(tmp_path / "r/rows.parquet")) == TOTAL


class Flaky(SyntheticExecutor):
    """Calibration fails on c1; one trial fails; one server dies."""

    def __init__(self):
        super().__init__(fail={"c0/nginx/quic-h3/index.html/r2"})
        self.starts: list[str] = []

    @contextlib.contextmanager
    def condition(self, cond):
        if cond.id == "c1":
            raise RuntimeError("calibration: rtt 95 ms, expected 80 ms")
        with super().condition(cond) as calib:
            yield calib

    def ensure_server(self, name):
        if name not in self.servers:
            self.starts.append(name)
        super().ensure_server(name)

    def run_trial(self, trial: Trial):
        if trial.trial_id == "c0/caddy/quic-h3/index.html/r1":
            self.servers.discard("caddy")  # it crashed; the next ensure_server restarts it
            raise ValueError("connection refused")
        return super().run_trial(trial)


def test_failures_are_recorded_and_the_run_goes_on(tmp_path, exp_file):
    ex = Flaky()
    summary = run(exp_file, tmp_path / "r", ex)
    assert summary.skipped == ["c1u0"] and summary.failed == 2 and summary.exit_code == 1
    rows = {r["trial_id"]: r for r in load_rows(tmp_path / "r")[0]}
    assert len(rows) == TOTAL // 2
    assert rows["c0/nginx/quic-h3/index.html/r2"]["error"] == "synthetic failure"
    assert rows["c0/caddy/quic-h3/index.html/r1"]["error"] == "ValueError: connection refused"
    assert ex.starts == ["caddy", "nginx", "caddy"]
    manifest = read_manifest(tmp_path / "r")
    assert "calibration" in manifest["conditions"]["c1"]["error"]
    assert manifest["status"] == "incomplete"
    # Resuming retries only the skipped condition.
    summary = run(exp_file, tmp_path / "r", SyntheticExecutor(), resume=True)
    assert summary.ran == TOTAL // 2 and len(load_rows(tmp_path / "r")[0]) == TOTAL


def test_resume_refuses_a_changed_matrix(tmp_path, exp_file):
    run(exp_file, tmp_path / "r")
    exp_file.write_text(EXPERIMENT.replace("repetitions: 5", "repetitions: 6"))
    with pytest.raises(StoreError, match="different experiment"):
        run(exp_file, tmp_path / "r", resume=True)


def unit_of(exp, trial_id: str) -> str:
    (unit,) = [u.id for u in units(exp) if trial_id in {t.trial_id for t in unit_trials(exp, u)}]
    return unit


# The same matrix with 100 MB files: each condition's trials fill two units or more
# (experiments/shard.py), so the kill lands in a condition split into units.
IN_UNITS = EXPERIMENT.replace("{kind: web, objects: [index.html]}", "{kind: cloud, files: [100MB]}")


@pytest.mark.parametrize("text", [EXPERIMENT, IN_UNITS], ids=["one-unit-each", "in-units"])
def test_sigkill_then_resume_gives_every_trial_exactly_once(tmp_path, exp_file, text):
    exp_file.write_text(text)
    results = tmp_path / "results"
    proc = start_synthetic(exp_file, results, "--delay", "0.02")
    run_dir = wait_for_rows(results, 15)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = len(load_rows(run_dir)[0])
    assert 15 <= before < TOTAL
    with open(run_dir / "rows.jsonl", "ab") as f:  # as if killed mid-write
        f.write(b'{"trial_id": "c1/nginx/qu')
    proc = start_synthetic(exp_file, results, "--resume", run_dir.name)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    ids = [r["trial_id"] for r in load_rows(run_dir)[0]]
    assert len(ids) == TOTAL and len(set(ids)) == TOTAL
    assert load_rows(run_dir)[1] == 0
    manifest = read_manifest(run_dir)
    assert [s["status"] for s in manifest["sessions"]] == ["running", "complete"]
    exp = parse_experiment(text)
    assert sorted(manifest["units"]) == sorted(u.id for u in units(exp))
    assert all(u["calibration"] for u in manifest["units"].values())
    assert all(r["unit"] == unit_of(exp, r["trial_id"]) for r in load_rows(run_dir)[0])


def test_sigterm_stops_cleanly_with_resume_hint(tmp_path, exp_file):
    results = tmp_path / "results"
    proc = start_synthetic(exp_file, results, "--delay", "0.02")
    run_dir = wait_for_rows(results, 5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 130, out
    assert f"interrupted: resume with quicbed run {exp_file} --resume {run_dir.name}" in out
    assert "Traceback" not in out
    assert read_manifest(run_dir)["status"] == "interrupted"


def test_second_run_on_same_dir_is_refused(tmp_path, exp_file):
    with RunStore(tmp_path / "r").open():
        with pytest.raises(StoreError, match="in use"):
            run(exp_file, tmp_path / "r", resume=False)


# --- check and commands -------------------------------------------------------------------------


def test_check_passes_then_fails_when_an_expectation_is_false(tmp_path, exp_file, capsys):
    assert (
        cmd_run(exp_file, lambda e, d: SyntheticExecutor(), RunOptions(results=tmp_path, progress=False)) == 0
    )
    run_id = next(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert cmd_check(exp_file, run_id, results=tmp_path) == 0
    assert "6/6 expectations passed" in capsys.readouterr().out
    exp_file.write_text(EXPERIMENT.replace("rtt < 1.15", "rtt < 0.95"))
    assert cmd_check(exp_file, run_id, results=tmp_path) == 1
    out = capsys.readouterr().out
    assert "FAIL c0 lab loss_pct=0: 0.9 < quic.connection_time.median / rtt < 0.95" in out


def test_check_bad_input_is_exit_2(tmp_path, exp_file, capsys):
    assert cmd_check(exp_file, "no-such-run", results=tmp_path) == 2
    exp = parse_experiment(EXPERIMENT.split("expect:")[0])
    (tmp_path / "r").mkdir()
    assert check(exp, tmp_path / "r") == 2
    assert "no expect: section" in capsys.readouterr().out


def test_github_annotation_on_failure(tmp_path, exp_file, monkeypatch, capsys):
    run(exp_file, tmp_path / "r")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    exp = parse_experiment(EXPERIMENT.replace("< 3.4", "< 2.9"), str(exp_file))
    assert check(exp, tmp_path / "r") == 1
    assert f"::error file={exp_file},line=14::" in capsys.readouterr().out


def test_cmd_run_bad_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXPERIMENT.replace("servers: [caddy, nginx]", "servers: [caddy, iis]"))
    assert cmd_run(bad, lambda e, d: SyntheticExecutor(), RunOptions(results=tmp_path)) == 2
    out = capsys.readouterr().out
    known = ", ".join(SERVERS)  # the shipped servers, in their descriptors' order
    assert out == f"{bad}:5: servers[1]: unknown server 'iis' (known: {known})\n"


def test_cmd_run_dry_run_touches_nothing(tmp_path, exp_file, capsys):
    def no_executor(exp, run_dir):
        raise AssertionError("dry run must not build an executor")

    assert cmd_run(exp_file, no_executor, RunOptions(dry=True, results=tmp_path)) == 0
    assert f"= {TOTAL} trials" in capsys.readouterr().out and not any(tmp_path.glob("synth-*"))


def test_rows_are_single_json_lines(tmp_path, exp_file):
    run(exp_file, tmp_path / "r")
    for line in (tmp_path / "r/rows.jsonl").read_text().splitlines():
        assert isinstance(json.loads(line), dict)


def test_ci_handshake_experiment_passes_on_synthetic_physics(tmp_path):
    ci = Path(__file__).resolve().parents[2] / "experiments/ci/handshake.yaml"
    code = cmd_run(
        ci, lambda e, d: SyntheticExecutor(), RunOptions(check_after=True, results=tmp_path, progress=False)
    )
    assert code == 0


def test_two_runs_in_the_same_second_get_distinct_ids(tmp_path, exp_file):
    for _ in range(2):
        assert (
            cmd_run(exp_file, lambda e, d: SyntheticExecutor(), RunOptions(results=tmp_path, progress=False))
            == 0
        )
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


# --- interruption -------------------------------------------------------------------------------


class SignalAt(SyntheticExecutor):
    """Sends itself `sig` during calibration (phase "condition") or after `after` trials, and
    records whether the condition was torn down."""

    def __init__(self, sig: int, phase: str = "trials", after: int = 5):
        super().__init__()
        self.sig, self.phase, self.after = sig, phase, after
        self.trials_run, self.torn_down = 0, 0

    @contextlib.contextmanager
    def condition(self, cond):
        try:
            if self.phase == "condition":
                os.kill(os.getpid(), self.sig)  # arrives mid bring-up/calibration
                time.sleep(1)  # the handler raises here; never slept through
            with super().condition(cond) as calib:
                yield calib
        finally:
            # A second signal (Ctrl-C twice) must not cut the teardown short.
            os.kill(os.getpid(), signal.SIGINT)
            self.torn_down += 1

    def run_trial(self, trial: Trial):
        self.trials_run += 1
        if self.phase == "trials" and self.trials_run == self.after:
            os.kill(os.getpid(), self.sig)
        return super().run_trial(trial)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("phase", ["condition", "trials"])
def test_one_signal_interrupts_the_run_and_the_teardown_completes(tmp_path, exp_file, sig, phase):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    ex = SignalAt(sig, phase)
    summary = run(exp_file, tmp_path / "r", ex)
    assert summary.interrupted and summary.exit_code == 130 and not summary.skipped
    assert ex.torn_down == 1  # torn down once, and nothing after the first condition began
    # The signal lands in the `after`th trial, which leaves no row (resume reruns it).
    assert summary.ran == (0 if phase == "condition" else ex.after - 1)
    assert read_manifest(tmp_path / "r")["status"] == "interrupted"
    assert {s: signal.getsignal(s) for s in before} == before  # the handlers are restored


# --- retrying failed trials ---------------------------------------------------------------------

FAILING = {"c0/caddy/quic-h3/index.html/r1", "c1/nginx/tls1.2-h2/index.html/r4"}


def test_retry_failed_supersedes_failed_rows_and_every_trial_counts_once(tmp_path, exp_file):
    import pandas as pd

    from quicbed.analysis import load_runs
    from quicbed.experiments.store import load_history

    run_dir = tmp_path / "r"
    assert run(exp_file, run_dir, SyntheticExecutor(fail=FAILING)).failed == 2
    # A plain resume counts failed trials as done.
    assert run(exp_file, run_dir, SyntheticExecutor(), resume=True).ran == 0
    summary = run(exp_file, run_dir, SyntheticExecutor(), resume=True, retry_failed=True)
    assert (summary.ran, summary.failed, summary.done_before, summary.exit_code) == (2, 0, TOTAL - 2, 0)
    history = load_history(run_dir)[0]
    assert len(history) == TOTAL + 2  # append-only: the failed rows stay in rows.jsonl
    old = [r for r in history if r["trial_id"] in FAILING and r["error"] is not None]
    assert [r["attempt"] for r in old] == [1, 1]
    rows = load_rows(run_dir)[0]
    assert len(rows) == len({r["trial_id"] for r in rows}) == TOTAL
    assert all(r["error"] is None for r in rows)
    assert {r["attempt"] for r in rows if r["trial_id"] in FAILING} == {2}
    assert rows[0]["trial_id"] == "c0/caddy/tls1.2-h2/index.html/r0"  # matrix order kept
    assert len(pd.read_parquet(run_dir / "rows.parquet")) == TOTAL
    for source in ("parquet", "jsonl"):  # the analysis counts each trial once from either
        if source == "jsonl":
            (run_dir / "rows.parquet").unlink()
        df, _ = load_runs([str(run_dir)])
        assert len(df) == df["trial_id"].nunique() == TOTAL and not df["failed"].any()
        assert any("2 trial(s) retried" in note for note in df.attrs["notes"])
    assert read_manifest(run_dir)["sessions"][-1]["retry_failed"] is True
    exp = parse_experiment(exp_file.read_text(), str(exp_file))
    assert check(exp, run_dir) == 0


def test_a_trial_failing_again_gets_the_next_attempt(tmp_path, exp_file):
    run_dir = tmp_path / "r"
    trial = "c0/caddy/quic-h3/index.html/r1"
    run(exp_file, run_dir, SyntheticExecutor(fail={trial}))
    for attempt in (2, 3):
        summary = run(exp_file, run_dir, SyntheticExecutor(fail={trial}), resume=True, retry_failed=True)
        assert (summary.ran, summary.failed) == (1, 1)
        (row,) = [r for r in load_rows(run_dir)[0] if r["trial_id"] == trial]
        assert row["attempt"] == attempt and row["error"] == "synthetic failure"
    run(exp_file, run_dir, SyntheticExecutor(), resume=True, retry_failed=True)
    assert all(r["error"] is None for r in load_rows(run_dir)[0])


def test_cmd_run_hints_retry_and_needs_resume_for_it(tmp_path, exp_file, capsys):
    results = tmp_path / "results"
    assert (
        cmd_run(exp_file, lambda e, d: SyntheticExecutor(), RunOptions(retry_failed=True, results=results))
        == 2
    )
    assert "--retry-failed needs --resume RUN_ID" in capsys.readouterr().out
    assert not results.exists()
    seen: list[Path] = []
    code = cmd_run(
        exp_file,
        lambda e, d: SyntheticExecutor(fail=FAILING),
        RunOptions(results=results, progress=False),
        on_run_dir=seen.append,
    )
    (run_dir,) = seen
    assert code == 1 and run_dir.parent == results
    assert (
        f"2 trial(s) failed: retry them with quicbed run {exp_file} --resume "
        f"{run_dir.name} --retry-failed"
    ) in capsys.readouterr().out
    # Interrupted while retrying: the hint keeps --retry-failed, or the rest would count as done.
    code = cmd_run(
        exp_file,
        lambda e, d: SignalAt(signal.SIGTERM, after=1),
        RunOptions(resume=run_dir.name, retry_failed=True, results=results, progress=False),
    )
    assert code == 130
    assert (
        f"interrupted: resume with quicbed run {exp_file} --resume {run_dir.name} " "--retry-failed"
    ) in capsys.readouterr().out


# --- on the real path (root, Docker; unrun by the unit suite) -----------------------------------

KILL_EXPERIMENT = """\
# 10 MB at 20 Mbit/s: a trial lasts about 4 s, long enough to kill its server mid-transfer.
name: retry-path
profiles: [india]
servers: [caddy]
clients: [{tool: tls_perf, tls: ["1.3"], http: "2"}, quic_perf]
workload: {kind: cloud, files: [10MB]}
repetitions: 3
timeout_s: 60
"""
KILL_TRIALS = 2 * 3


def _containers() -> dict[str, str]:
    """This session's testbed containers by node (client, server): quicbed-<run>-<node>. Only
    its scope's: under pytest-xdist another worker's testbed has a client and a server too."""
    from quicbed.topology.marker import scope

    names = subprocess.run(
        ["docker", "ps", "--filter", f"label=quicbed.scope={scope()}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    return {name.rsplit("-", 1)[1]: name for name in names}


def _host_pids(container: str, command: str) -> list[int]:
    top = subprocess.run(
        ["docker", "top", container, "-eo", "pid,comm"], capture_output=True, text=True
    ).stdout.splitlines()[1:]
    return [int(line.split()[0]) for line in top if line.split()[1:] == [command]]


def _kill_servers_mid_trial(results: Path, kills: list[int], times: int = 2) -> None:
    """After 2 rows, `times` times: wait for a client tool to be fetching, SIGKILL caddy."""
    wait_for_rows(results, 2, timeout=600)
    deadline = time.monotonic() + 300
    while len(kills) < times and time.monotonic() < deadline:
        nodes = _containers()
        fetching = "client" in nodes and any(
            _host_pids(nodes["client"], tool) for tool in ("tls_perf", "quic_perf")
        )
        servers = _host_pids(nodes["server"], "caddy") if fetching and "server" in nodes else []
        if servers:
            time.sleep(1)  # well into the transfer
            for pid in servers:
                os.kill(pid, signal.SIGKILL)
            kills.append(servers[0])
            time.sleep(6)  # the next trial restarts it
        time.sleep(0.05)


@pytest.mark.path
@pytest.mark.usefixtures("clean_slate")
def test_real_server_killed_mid_run_then_retry_failed_completes_it(tmp_path):
    import threading

    from quicbed.analysis import load_runs
    from quicbed.experiments.store import load_history

    exp_file, results = tmp_path / "retry.yaml", tmp_path / "results"
    exp_file.write_text(KILL_EXPERIMENT)
    env = {**os.environ, "QUICBED_RESULTS": str(results), "PYTHONUNBUFFERED": "1"}
    quicbed = [sys.executable, "-m", "quicbed.cli", "run", str(exp_file), "--no-progress"]
    kills: list[int] = []
    killer = threading.Thread(target=_kill_servers_mid_trial, args=(results, kills), daemon=True)
    killer.start()
    first = subprocess.run(quicbed, env=env, capture_output=True, text=True, timeout=900)
    killer.join(timeout=10)
    assert kills, "no trial was running when the killer looked"
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    failed = {r["trial_id"] for r in load_rows(run_dir)[0] if r["error"] is not None}
    assert failed and first.returncode == 1, first.stdout[-3000:]
    assert "--retry-failed" in first.stdout
    retry = subprocess.run(
        [*quicbed, "--resume", run_dir.name, "--retry-failed"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert retry.returncode == 0, retry.stdout[-3000:]
    history = load_history(run_dir)[0]
    assert len(history) == KILL_TRIALS + len(failed)  # the failed rows are still in the file
    df, _ = load_runs([str(run_dir)])
    assert len(df) == df["trial_id"].nunique() == KILL_TRIALS and not df["failed"].any()
    assert set(df.loc[df["attempt"] == 2, "trial_id"]) == failed


def test_report_and_check_judge_expect_lines_alike(tmp_path, exp_file, capsys):
    """One engine: the report's Expectations section and `quicbed check` agree, per
    condition, on a line that holds and on one that fails."""
    from quicbed.analysis.report import write_report

    exp_file.write_text(EXPERIMENT.replace("rtt < 1.15", "rtt < 0.95"))
    assert (
        cmd_run(exp_file, lambda e, d: SyntheticExecutor(), RunOptions(results=tmp_path, progress=False)) == 0
    )
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert cmd_check(exp_file, run_dir.name, results=tmp_path) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL") == 2 and "4/6 expectations passed" in out
    report = (write_report([str(run_dir)]).parent / "report.md").read_text()
    section = report.split("## Expectations", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| expect:")}
    failing = rows["expect: 0.9 < quic.connection_time.median / rtt < 0.95"]
    assert "does not hold" in failing and failing.count("(fails)") == 2
    for text in (
        "1.85 < tls1.3.connection_time.median / rtt < 2.3",
        "2.8 < tls1.2.connection_time.median / rtt < 3.4",
    ):
        assert "| holds |" in rows[f"expect: {text}"] and "c1 " in rows[f"expect: {text}"]
