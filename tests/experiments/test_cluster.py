"""`quicbed run --ray` (experiments/cluster.py) on a real local Ray cluster: a head and a worker
node started here by `ray start`, one CPU each. The synthetic executor's runs need no network;
the `path` test runs the handshake experiment in two conditions on a worker offering two paths,
both at once. Without a cluster: the plans for workers of K paths, and the scope that keeps two
units of one condition apart on one worker."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from quicbed.errors import InputError
from quicbed.experiments import cluster, plan
from quicbed.experiments.commands import cmd_run
from quicbed.experiments.matrix import conditions, trials
from quicbed.experiments.options import RunOptions
from quicbed.experiments.parallel import own_log_scope
from quicbed.experiments.plan import PARALLEL_WALL_K2
from quicbed.experiments.schema import load_experiment, parse_experiment
from quicbed.experiments.shard import condition_units, ray_wall, unit_seconds, units, worker_paths
from quicbed.experiments.store import load_history, read_manifest
from quicbed.experiments.synthetic import SyntheticExecutor

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
# Two conditions of two units each (a server each: 100 MB files make each condition's trials
# more than two units' worth, shard.UNIT_MIN_S), so Ray runs units, not conditions.
SYNTHETIC = """
name: ray-synthetic
profiles: [india]
sweep: {rate_mbit: [20, 10]}
servers: [caddy, nginx]
clients: [{tool: tls_perf, tls: ["1.3"]}, quic_perf]
workload: {kind: cloud, files: [100MB]}
repetitions: 8
"""
# Loopback only: a test cluster (no authentication, root) must face nothing outside this host.
NODE = [
    "--num-cpus",
    "1",
    "--object-store-memory",
    str(80 * 2**20),
    "--disable-usage-stats",
    "--node-ip-address",
    "127.0.0.1",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_TEMP_DIRS: dict[str, str] = {}  # a cluster's address -> its temp dir, which its processes name


def _session_pids(temp_dir: str) -> set[int]:
    """Every process of this cluster: those naming its temp dir, and their descendants (the
    workers and agents rename themselves `ray::...`). Not `ray stop`: that ends every Ray
    process on the host, not only this test's."""
    parents: dict[int, int] = {}
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if temp_dir.encode() in (entry / "cmdline").read_bytes():
                pids.add(int(entry.name))
    pids.discard(os.getpid())  # this test names the directory too
    grew = True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in pids} - pids
        pids |= more
        grew = bool(more)
    return pids


def _stop(temp_dir: str) -> None:
    """SIGTERM, then after a short grace SIGKILL: a throwaway cluster has nothing to save."""
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 10.0)):
        for pid in _session_pids(temp_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while _session_pids(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.1)


_NETNS: dict[str, str] = {}  # a cluster's address -> the network namespace it runs in


@contextlib.contextmanager
def ray_cluster(env: dict[str, str], head_paths: int, worker_paths: int = 1) -> Iterator[str]:
    """A head (offering `head_paths` paths) and one worker node offering `worker_paths`, in a
    network namespace of their own that has only loopback: Ray binds every interface it sees
    (`::` and the host's address, whatever --node-ip-address says), and a test cluster, with
    no authentication and root's rights, must face nothing outside this host. Whatever talks
    to it runs in the same namespace (in_cluster). Stopped after."""
    pytest.importorskip("ray", reason="the cluster extra is not installed (pip install -e .[cluster])")
    port, temp_dir = _free_port(), tempfile.mkdtemp(prefix="qbray-")
    netns = f"qbray-{uuid.uuid4().hex[:8]}"
    address = f"127.0.0.1:{port}"
    _TEMP_DIRS[address], _NETNS[address] = temp_dir, netns
    ray = str(VENV_BIN / "ray")
    env = {**env, "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run(["ip", "netns", "add", netns], check=True, timeout=30)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True, timeout=30)
        for args, paths in (
            (
                ["--head", "--port", str(port), "--include-dashboard=false", "--temp-dir", temp_dir],
                head_paths,
            ),
            (["--address", address], worker_paths),
        ):
            offers = ["--resources", json.dumps({cluster.RESOURCE: paths})] if paths else []
            subprocess.run(
                in_cluster(address, [ray, "start", *args, *NODE, *offers]),
                env=env,
                check=True,
                capture_output=True,
                timeout=120,
            )
        yield address
    finally:
        _stop(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", netns], check=False, timeout=30)


def in_cluster(address: str, argv: list[str]) -> list[str]:
    """argv run in the cluster's network namespace (the only place its ports can be reached)."""
    return ["ip", "netns", "exec", _NETNS[address], *argv]


@pytest.fixture(scope="module")
def synthetic_cluster() -> Iterator[str]:
    """Two nodes offering a path each, shared by the synthetic tests (a killed worker process
    leaves its node running)."""
    with ray_cluster(dict(os.environ), head_paths=1) as address:
        yield address


def _env(results: Path) -> dict[str, str]:
    return {**os.environ, "QUICBED_RESULTS": str(results), "PYTHONUNBUFFERED": "1"}


def _synthetic(file: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    address = args[args.index("--ray") + 1]
    return subprocess.Popen(
        in_cluster(
            address,
            [sys.executable, "-m", "quicbed.experiments.synthetic", str(file), "--no-progress", *args],
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _kill_a_running_unit(rows: Path, at_least: int, address: str) -> None:
    """Once `at_least` rows have landed (they stream in mid-run), SIGKILL a worker process
    of this test's cluster that is measuring a unit (never another session's: under
    pytest-xdist, or beside another suite, other clusters run on the host too)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        landed = len(rows.read_text().splitlines()) if rows.exists() else 0
        busy = [
            pid
            for pid in sorted(_session_pids(_TEMP_DIRS[address]))
            if _cmdline(Path(f"/proc/{pid}")).startswith(b"ray::unit_task")
        ]
        if landed >= at_least and busy:
            os.kill(busy[0], signal.SIGKILL)
            return
        time.sleep(0.05)
    pytest.fail("no unit was running after the first rows landed")


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _every_trial(file: Path) -> list[str]:
    exp = load_experiment(file)
    return sorted(t.trial_id for c in conditions(exp) for t in trials(exp, c))


def _wait_for_run(results: Path) -> Path:
    deadline = time.monotonic() + 60
    while not (results.exists() and any(results.iterdir())):
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    return _run_dir(results)


def _run_dir(results: Path) -> Path:
    (run,) = results.iterdir()
    return run


def test_a_killed_worker_costs_only_its_unfinished_trials(tmp_path, synthetic_cluster):
    file, results = tmp_path / "synthetic.yaml", tmp_path / "results"
    file.write_text(SYNTHETIC)
    env, address = _env(results), synthetic_cluster
    # No Ray retry: the lost condition stays lost until --resume.
    run = _synthetic(file, env, "--ray", address, "--ray-retries", "0", "--delay", "0.25")
    run_dir = _wait_for_run(results)
    _kill_a_running_unit(run_dir / "rows.jsonl", at_least=2, address=address)
    out = run.communicate(timeout=120)[0]
    assert run.returncode == 1 and "worker lost mid-unit" in out, out
    before = [r["trial_id"] for r in load_history(run_dir)[0]]
    assert 0 < len(before) < len(_every_trial(file))
    resumed = _synthetic(file, env, "--ray", address, "--resume", run_dir.name)
    out = resumed.communicate(timeout=120)[0]
    assert resumed.returncode == 0, out
    ids = [r["trial_id"] for r in load_history(run_dir)[0]]
    assert sorted(ids) == _every_trial(file)  # every trial exactly once
    assert ids[: len(before)] == before  # the resume appended only the missing ones
    manifest = read_manifest(run_dir)
    hosts = {c["ran_on"]["hostname"] for c in manifest["conditions"].values()}
    assert hosts == {socket.gethostname()} and manifest["status"] == "complete"
    # Each unit calibrated on its own path, and each row names its unit.
    assert sorted(manifest["units"]) == ["c0u0", "c0u1", "c1u0", "c1u1"]
    assert all(u["calibration"] and u["ran_on"] for u in manifest["units"].values())
    rows = load_history(run_dir)[0]
    assert {(r["unit"], r["server"]) for r in rows} == {
        (f"c{c}u{i}", server) for c in (0, 1) for i, server in enumerate(["caddy", "nginx"])
    }
    assert manifest["executor"]["ray"]["path_slots"] == 2


def _listening(pids: set[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket these processes listen on, read from their own
    network namespace's tables (/proc/PID/net/tcp{,6})."""
    inodes: dict[str, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:["):
                        inodes[link[8:-1]] = pid
    # One reader per network namespace: every process in it sees the same tables.
    readers: dict[str, int] = {}
    for pid in set(inodes.values()):
        with contextlib.suppress(OSError):
            readers.setdefault(os.readlink(f"/proc/{pid}/ns/net"), pid)
    found = set()
    for pid in readers.values():
        for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
            with contextlib.suppress(OSError):
                for line in Path(table).read_text().splitlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                        found.add(_address(fields[1]))
    return found


def _address(hex_address: str) -> tuple[str, int]:
    address, port = hex_address.split(":")
    raw = bytes.fromhex(address)
    # /proc/net/tcp writes each 32-bit word in host (little-endian) order
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words), int(port, 16)


def test_the_test_cluster_faces_nothing_but_loopback(synthetic_cluster):
    """Ray listens on every address it sees; the test cluster's namespace has only loopback,
    so every socket it listens on is reachable from this host alone."""
    pids = _session_pids(_TEMP_DIRS[synthetic_cluster])
    listening = _listening(pids)
    port = int(synthetic_cluster.rsplit(":", 1)[1])
    assert any(p == port for _, p in listening) and len(listening) > 3, listening
    links = subprocess.run(
        ["ip", "-n", _NETNS[synthetic_cluster], "-o", "link", "show"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"], links.stdout
    host_netns = os.stat("/proc/self/ns/net").st_ino
    namespaces = _netns_of(pids)
    assert namespaces and host_netns not in namespaces, (pids, namespaces)


def _netns_of(pids: set[int]) -> set[int]:
    """The network namespaces (inodes) of these processes; one that has ended, or is a zombie
    (a worker the test before killed, not reaped yet), has none to read."""
    found = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            found.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
    return found


def test_ray_retries_a_lost_unit_skipping_its_stored_trials(tmp_path, synthetic_cluster):
    file, results = tmp_path / "synthetic.yaml", tmp_path / "results"
    file.write_text(SYNTHETIC)
    env, address = _env(results), synthetic_cluster
    run = _synthetic(file, env, "--ray", address, "--delay", "0.25")
    run_dir = _wait_for_run(results)
    _kill_a_running_unit(run_dir / "rows.jsonl", at_least=3, address=address)
    out = run.communicate(timeout=120)[0]
    assert run.returncode == 0, out
    assert out.count("calibrated on") == 5, out  # four units, the lost one twice
    ids = [r["trial_id"] for r in load_history(run_dir)[0]]
    assert sorted(ids) == _every_trial(file)  # the retry skipped the trials already home


def test_a_dry_run_asks_the_cluster_how_many_paths_it_runs(tmp_path, synthetic_cluster):
    file = tmp_path / "synthetic.yaml"
    file.write_text(SYNTHETIC)
    proc = subprocess.run(
        in_cluster(
            synthetic_cluster,
            [sys.executable, "-m", "quicbed.cli", "run", str(file), "--dry-run", "--ray", synthetic_cluster],
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "plan for 2 worker(s)" in proc.stdout and "expected wall time" in proc.stdout


def test_without_ray_the_cli_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as on a plain install
    with pytest.raises(InputError, match=r"pip install -e '\.\[cluster\]'"):
        cluster.import_ray()
    file = tmp_path / "synthetic.yaml"
    file.write_text(SYNTHETIC)
    code = cmd_run(
        file,
        lambda exp, run_dir: SyntheticExecutor(),
        RunOptions(ray="127.0.0.1:1", results=tmp_path / "results", progress=False),
    )
    out = capsys.readouterr().out
    assert code == 2 and out.count("\n") == 1 and "cluster extra" in out, out


def test_a_dry_run_plans_for_n_workers_without_a_cluster(tmp_path, capsys):
    file = tmp_path / "synthetic.yaml"
    file.write_text(SYNTHETIC)
    assert cmd_run(file, lambda exp, run_dir: SyntheticExecutor(), RunOptions(dry=True, ray_workers=3)) == 0
    out = capsys.readouterr().out
    assert "plan for 3 worker(s)" in out and "expected wall time" in out
    assert (
        cmd_run(file, lambda exp, run_dir: SyntheticExecutor(), RunOptions(shard="1/2", ray="127.0.0.1:1"))
        == 2
    )
    assert "choose one" in capsys.readouterr().out


# experiments/ci/handshake.yaml in two conditions (one unit each): a worker offering two paths
# measures both at once, and the handshakes still take their RTTs on each.
HANDSHAKE = REPO / "experiments" / "ci" / "handshake.yaml"
TWO_CONDITIONS = {"sweep": "sweep: {rate_mbit: [20, 10]}\nservers: [caddy]", "name": "ray-two-paths"}


def _two_conditions_file(tmp: Path) -> Path:
    text = HANDSHAKE.read_text().replace("name: ci-handshake", f"name: {TWO_CONDITIONS['name']}")
    text = text.replace("servers: [caddy]", TWO_CONDITIONS["sweep"])
    file = tmp / "handshake2.yaml"
    file.write_text(text)
    return file


def _span(rows: list[dict]) -> tuple[float, float]:
    from datetime import datetime

    starts = [datetime.fromisoformat(r["started_at"]).timestamp() for r in rows]
    ends = [s + r["wall_s"] for s, r in zip(starts, rows, strict=True)]
    return min(starts), max(ends)


@pytest.mark.path
@pytest.mark.usefixtures("clean_slate")
def test_a_worker_offering_two_paths_measures_two_units_at_once_and_leaves_nothing(tmp_path):
    from quicbed.topology.clean import leftovers

    file, results = _two_conditions_file(tmp_path), tmp_path / "results"
    env = _env(results)
    # The head offers no path: the one worker node measures both units, as a cloud worker would.
    with ray_cluster(env, head_paths=0, worker_paths=2) as address:
        proc = subprocess.run(
            in_cluster(
                address,
                # The delay line: a UML router's boot writes the host's socket buffer defaults,
                # which a network namespace other than the host's cannot.
                [str(VENV_BIN / "quicbed"), "run", str(file), "--ray", address, "--no-progress", "--check"]
                + ["--backend", "delayline"],
            ),
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = _run_dir(results)
    rows = load_history(run_dir)[0]
    ray_ids = [r["trial_id"] for r in rows]
    # The local side: the same file through the runner here (network-free executor).
    local = tmp_path / "local"
    assert (
        cmd_run(file, lambda exp, run_dir: SyntheticExecutor(), RunOptions(results=local, progress=False))
        == 0
    )
    local_ids = [r["trial_id"] for r in load_history(_run_dir(local))[0]]
    assert sorted(ray_ids) == sorted(local_ids) and len(ray_ids) == len(set(ray_ids)) == 40
    manifest = read_manifest(run_dir)
    assert manifest["executor"]["ray"]["paths_per_node"] == [2]
    assert sorted(manifest["units"]) == ["c0u0", "c1u0"]
    for entry in manifest["units"].values():
        assert entry["calibration"]["passed"] and entry["ran_on"]["link_backend"]
        assert entry["ran_on"]["images"]["client"].startswith("sha256:")
    # Both units' rows merged, each saying two paths ran, and both paths were up at once: each
    # unit's life, from its calibration's start to its last trial's end, overlapped the
    # other's. (Their trials alone need not: 20 handshakes take 7 s, a calibration 30.)
    by_unit = {u: [r for r in rows if r["unit"] == u] for u in ("c0u0", "c1u0")}
    assert all(len(r) == 20 and {x["parallel"] for x in r} == {2} for r in by_unit.values())
    (a0, a1), (b0, b1) = (
        (manifest["units"][u]["calibration"]["calibration"]["started_at"], _span(r)[1])
        for u, r in by_unit.items()
    )
    assert a0 < b1 and b0 < a1, "the two units did not run at once"
    assert not leftovers()  # the worker's teardowns left nothing behind


def test_the_ray_launcher_sets_nodes_up_by_the_readme_commands():
    import re

    import yaml

    launcher = yaml.safe_load((REPO / "docs" / "cluster" / "ray-cluster.yaml").read_text())
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Several machines") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block and launcher["setup_commands"] == block.group(1).splitlines()
    nodes = launcher["available_node_types"]
    head, worker = nodes[launcher["head_node_type"]], nodes["worker"]
    # Two paths a 2-vCPU worker: what the plans assume (plan.WORKER_CORES, --paths-per-worker 2).
    assert cluster.RESOURCE not in head["resources"] and worker["resources"] == {cluster.RESOURCE: 2}
    start = " ".join(launcher["worker_start_ray_commands"])
    assert json.dumps({cluster.RESOURCE: 2}) in start and "--num-cpus=1" in start
    # Ray from the venv the setup made, at the version versions.env pins
    assert all("quicbed/.venv/bin/ray " in c for c in launcher["head_start_ray_commands"])
    assert "cluster" in launcher["setup_commands"][-1]


# -- workers of K paths, without a cluster --------------------------------------------------

PAPER = REPO / "experiments" / "paper"


def test_a_worker_of_two_paths_plans_each_unit_at_the_measured_slowdown_not_half(tmp_path):
    exp = parse_experiment(SYNTHETIC)
    # Four units: the 10 Mbit/s condition's two twice the 20's; two paths get one of each.
    (worker,) = worker_paths(exp, 1, 2)
    assert [sorted(u.id for u in p) for p in worker] == [["c0u0", "c1u0"], ["c0u1", "c1u1"]]
    one, two = ray_wall(exp, 1, 1), ray_wall(exp, 1, 2)
    assert two / one == pytest.approx(PARALLEL_WALL_K2)  # 0.59, not a perfect 0.5
    path = sum(unit_seconds(exp, u) for u in worker[0])
    assert two == pytest.approx(path * 2 * PARALLEL_WALL_K2)
    # Sixteen workers' first paths fill before any second one (Ray's SPREAD): four units, four
    # workers, none doubled up, and the plan is the longest unit alone... stretched as an upper
    # bound, since a worker of two paths may get a neighbour.
    spread = worker_paths(exp, 16, 2)
    assert [len(w[0]) for w in spread[:4]] == [1, 1, 1, 1] and not any(w[1] for w in spread)
    longest = max(unit_seconds(exp, u) for u in units(exp))
    assert ray_wall(exp, 16, 2) == pytest.approx(longest * 2 * PARALLEL_WALL_K2)


def test_auto_paths_per_worker_follow_the_workloads_cpu_and_heavy_units_hold_the_worker():
    web, cloud, video = (load_experiment(PAPER / f"{x}.yaml") for x in ("web", "cloud", "video"))
    assert [plan.paths_per_worker(e, None)[0] for e in (web, cloud, video)] == [1, 2, 2]
    # Asked for 2, web's Chromium (1.65 cores a path) still runs one a worker, and says why.
    k, why = plan.paths_per_worker(web, 2)
    assert k == 1 and "hold all 2" in why
    # At run time a web unit's task holds every path of the most a worker offers; video's one.
    assert [cluster.task_paths(web, n) for n in (1, 2)] == [1, 2]
    assert [cluster.task_paths(video, n) for n in (1, 2)] == [1, 1]


def test_the_whole_paper_plans_on_16_workers_of_auto_paths_faster_than_one_path_each(capsys):
    """Issue 34: the paper's experiments one after another on 16 workers, the second path a
    worker saving time. Issue 34 planned <= 2 h while video_download's trials were planned as
    paced playout; under loss they take the path's loss-bound rate (12 s of media took 61 s
    at 10 %, 2026-11-29), and the plan is 2 h 16 min."""
    exps = [load_experiment(f) for f in sorted(PAPER.glob("*.yaml"))]
    walls = [ray_wall(e, 16, plan.paths_per_worker(e, None)[0]) for e in exps]
    assert sum(walls) <= 2.5 * 3600
    assert sum(ray_wall(e, 16, 1) for e in exps) > sum(walls) + 0.25 * 3600  # one path a worker
    video = PAPER / "video.yaml"
    opts = RunOptions(dry=True, ray_workers=16, paths_per_worker="auto")
    assert cmd_run(video, lambda exp, run_dir: SyntheticExecutor(), opts) == 0
    out = capsys.readouterr().out
    assert "plan for 16 worker(s), 2 emulated paths each at a time: 32 unit(s)" in out
    assert "each unit 1.18x as long as alone" in out and "bound: the longest unit" in out
    streaming = walls[[e.name for e in exps].index("paper-video")]
    assert f"expected wall time: {_hms(streaming)}" in out


def _hms(seconds: float) -> str:
    from quicbed.experiments.plan import hms

    return hms(seconds)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            {"dry": True, "ray_workers": 4, "paths_per_worker": "3"},
            "--paths-per-worker '3': expected auto or",
        ),
        ({"dry": True, "shard": "1/2", "paths_per_worker": "2"}, "is for Ray workers"),
        ({"dry": True, "paths_per_worker": "2"}, "plans for --ray-workers N"),
        ({"paths_per_worker": "2"}, "plans (with --dry-run)"),
    ],
)
def test_paths_per_worker_outside_a_ray_plan_is_refused_in_one_line(tmp_path, capsys, args, says):
    file = tmp_path / "synthetic.yaml"
    file.write_text(SYNTHETIC)
    code = cmd_run(file, lambda exp, run_dir: SyntheticExecutor(), RunOptions(results=tmp_path / "r", **args))
    out = capsys.readouterr().out
    assert code == 2 and says in out and out.count("\n") == 1, out
    assert not (tmp_path / "r").exists()


class _LogNames:
    """An executor's set_log_name alone: what own_log_scope asks of it."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def set_log_name(self, name: str) -> None:
        self.names.append(name)


def test_units_of_one_condition_side_by_side_log_apart_and_a_whole_condition_as_before():
    exp = parse_experiment(SYNTHETIC)
    cond = conditions(exp)[0]
    u0, u1 = condition_units(exp, cond)
    # A Ray task holds one unit: a condition of two logs under the unit's id (logs/c0u1/).
    for unit in (u0, u1):
        executor = _LogNames()
        own_log_scope(executor, [(unit, [])], len(condition_units(exp, cond)))
        assert executor.names == [unit.id]
    # A path holding the whole condition (a local run, a shard) keeps logs/<condition>/.
    executor = _LogNames()
    own_log_scope(executor, [(u0, []), (u1, [])], 2)
    assert executor.names == []
    own_log_scope(object(), [(u0, [])], 2)  # an executor that keeps no logs: nothing to scope
