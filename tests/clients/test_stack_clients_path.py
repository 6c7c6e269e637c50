"""The QUIC stacks' clients on the real emulated path (india, 80 ms), run by `quicbed run`,
each in its own image: every stack client of the registry (tests/clients/stack_registry.py; today
aioquic, quic-go, quiche and quinn), with the variants its descriptor offers.

One bring-up per client (an experiment's clients share one image): a tiny experiment names
the client against Caddy (quic-go), nginx and HAProxy (each its own QUIC stack); the tests
read its run directory. The manifest shows the executor started the client container from the
client's image (quicbed/<name>:<its version>), and each server's fresh connections take one RTT within
the project's row criterion (analysis/physics.py: net of the client's measured CPU, at most
max(+3 %, +1.5 ms) above 1 RTT).
"""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest
from cli_process import quicbed
from contention import remeasured, trial_contended, trials_steal
from stack_registry import stack_clients

from quicbed.analysis.physics import net_connection_rtts, row_connection_within
from quicbed.clients import tools

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

SERVERS = ["caddy", "nginx", "haproxy"]
REPETITIONS = 3
STACKS = stack_clients()


def offers(name: str, option: str, value: str) -> bool:
    return value in tools.get_tool(name).options.get(option, ())


RESUMING = [name for name in STACKS if offers(name, "resume", "yes")]
STREAMING = [name for name in STACKS if offers(name, "streams", "30")]


def clients_of(name: str) -> list[str]:
    """The experiment's client entries: fresh connections, and each variant the descriptor
    offers: a warm-up's session resumed, with the request in 0-RTT ("resume"); the object as
    30 ranges on 30 streams of one connection ("streams", so a 1 MB object)."""
    entries = [f"{{tool: {name}}}"]
    entries += [f'{{tool: {name}, resume: "yes"}}'] if name in RESUMING else []
    entries += [f'{{tool: {name}, streams: "30"}}'] if name in STREAMING else []
    return entries


def workload_of(name: str) -> str:
    """30 streams need an object to split: 1 MB; the others a landing page."""
    if name in STREAMING:
        return "{kind: cloud, files: [1MB]}"
    return "{kind: web, objects: [index.html]}"


EXPERIMENT = """name: {client}-path
profiles: [india]
servers: [{servers}]
clients: [{clients}]
workload: {workload}
repetitions: {repetitions}
"""


@pytest.fixture(scope="module", params=list(STACKS))
def run_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    client = request.param
    tmp = tmp_path_factory.mktemp(f"{client}-path")
    build = subprocess.run(
        [str(Path(tools.SHIPPED_DIR).parent / "images" / "build.sh"), client],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    experiment = tmp / f"{client}.yaml"
    experiment.write_text(
        EXPERIMENT.format(
            client=client,
            clients=", ".join(clients_of(client)),
            servers=", ".join(SERVERS),
            workload=workload_of(client),
            repetitions=REPETITIONS,
        )
    )
    attempts = iter(range(1, 3))

    def run() -> Path:
        results = tmp / f"results-{next(attempts)}"
        proc = quicbed(
            "run", str(experiment), "--no-progress", env={"QUICBED_RESULTS": str(results)}, timeout=900
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        (found,) = results.iterdir()
        return found

    # The tests below judge this run's timings: a run on a contended host is made again, and
    # the second judged (tests/contention.py). A whole run's load averages a burst away, so a
    # trial that was CPU-bound, or that shared the host with other work, counts too. Steal is
    # the trials' own (trials_steal): the bring-up and calibration before them are not judged.
    return remeasured(
        f"{client}'s run",
        run,
        lambda _: None,
        any_trial_contended,
        steal_of=lambda found: trials_steal(_all_rows(found)),
    )


def _all_rows(found: Path) -> list[dict]:
    return [json.loads(line) for line in (found / "rows.jsonl").read_text().splitlines()]


def any_trial_contended(found: Path) -> bool:
    return any(trial_contended(r) for r in _all_rows(found))


VARIANTS = ("-resume", "-s30")


def _rows(run_dir: Path, variant: str = "") -> list[dict]:
    """The fresh connections' rows (""), or a variant's: "-resume", "-s30"."""
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    of = [r for r in rows if any(r["client"].endswith(v) for v in VARIANTS)]
    return [r for r in rows if r["client"].endswith(variant)] if variant else [r for r in rows if r not in of]


def test_the_executor_runs_the_clients_own_image(run_dir: Path) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (client,) = manifest["executor"]["client_tools"]
    tool = tools.get_tool(client)
    version = tool.image.rsplit(":", 1)[1]  # the tag: its versions.env pin
    assert manifest["executor"]["client_image"]["image"] == tool.image
    assert manifest["executor"]["client_tools"][client]["command"] == list(tool.command)
    assert version in manifest["versions"].values(), manifest["versions"]
    rows = [r for variant in ("", *VARIANTS) for r in _rows(run_dir, variant)]
    assert len(rows) == len(SERVERS) * REPETITIONS * len(clients_of(client))
    (backend,) = {r["backend"] for r in rows}
    assert backend and all(r["error"] is None for r in rows), rows
    # The version the descriptor says it reports reaches every row.
    assert all(r["library"].startswith(f"{backend}/{version} ") for r in rows), rows[0]["library"]


@pytest.mark.parametrize("server", SERVERS)
def test_a_fresh_connection_takes_one_rtt(run_dir: Path, server: str) -> None:
    rows = [r for r in _rows(run_dir) if r["server"] == server]
    assert len(rows) == REPETITIONS and all(r["error"] is None for r in rows), rows
    rtt = rows[0]["calib_rtt_ms"]
    net = statistics.median(
        net_connection_rtts(r["connection_time_ms"], r["client_cpu_ms"], rtt) for r in rows
    )
    raw = statistics.median(r["connection_time_ms"] for r in rows) / rtt
    cpu = statistics.median(r["client_cpu_ms"] for r in rows)
    print(
        f"{rows[0]['tool']} -> {server}: connection {raw:.3f} RTT raw, "
        f"{net:.3f} net of {cpu:.2f} ms client CPU"
    )
    each = [
        (
            round(net_connection_rtts(r["connection_time_ms"], r["client_cpu_ms"], rtt), 3),
            r["host_cpu_other_pct"],
        )
        for r in rows
    ]
    assert row_connection_within(
        1, net, rtt
    ), f"median {net:.3f} RTT; (net, host's other CPU % of a core) per trial: {each}"
    # The first trial to a server costs what the later ones do: no neighbour lookup across the
    # emulated delay (servers/testbed.py warm_up; it was half an RTT late before).
    first, *later = (r["connection_time_ms"] for r in sorted(rows, key=lambda r: r["repetition"]))
    assert first < statistics.median(later) + 0.25 * rtt, rows
    # The request goes after the handshake: its answer comes one RTT later.
    assert all(r["ttfb_ms"] - r["connection_time_ms"] >= 0.98 * rtt for r in rows), rows


# Whether each server takes early data: Caddy (quic-go) does, nginx 1.26 (its OpenSSL
# compatibility layer) and HAProxy resume without it (stacks/quicgo/README.md).
EARLY_DATA = {"caddy": True, "nginx": False, "haproxy": False}


@pytest.mark.parametrize("run_dir", RESUMING, indirect=True)
@pytest.mark.parametrize("server", SERVERS)
def test_a_resumed_connection_sends_its_request_in_0rtt_where_the_server_takes_it(
    run_dir: Path, server: str
) -> None:
    """With 0-RTT the request leaves with the first flight: its answer's first byte comes one
    RTT after the start; refused early data costs the 1-RTT request after the handshake."""
    rows = [r for r in _rows(run_dir, "-resume") if r["server"] == server]
    assert len(rows) == REPETITIONS and all(r["error"] is None and r["resumed"] for r in rows), rows
    rtt = rows[0]["calib_rtt_ms"]
    ttfb = statistics.median(r["ttfb_ms"] for r in rows) / rtt
    early = [r["early_data_bytes"] for r in rows]
    print(f"{rows[0]['tool']} -> {server} resumed: TTFB {ttfb:.3f} RTT, 0-RTT bytes {early}")
    if EARLY_DATA[server]:
        # Every request left in the first flight: its answer one RTT after the start, which a
        # 1-RTT request after the handshake cannot reach (2 RTT). The tool's own flag is read
        # beside it: quic-go's ConnectionState().Used0RTT said false once (CI, UML, caddy) for
        # a trial whose answer came at 1.00 RTT, so it must hold for most trials, not all.
        firsts = [r["ttfb_ms"] / rtt for r in rows]
        assert all(1.0 <= x < 1.2 for x in firsts) and 1.0 <= ttfb < 1.2, (firsts, rows)
        assert sum(b > 0 for b in early) >= REPETITIONS - 1, (early, rows)
    else:
        assert early == [0] * REPETITIONS and 2.0 <= ttfb < 2.2, (ttfb, rows)


@pytest.mark.parametrize("run_dir", STREAMING, indirect=True)
@pytest.mark.parametrize("server", SERVERS)
def test_thirty_streams_fetch_the_object_once_on_one_connection(run_dir: Path, server: str) -> None:
    """--streams 30 (quicgo_perf's today): the 1 MB object as 30 byte ranges, every one whole, on one QUIC
    connection counted on the wire; its first byte comes one RTT after the handshake."""
    rows = [r for r in _rows(run_dir, "-s30") if r["server"] == server]
    assert len(rows) == REPETITIONS and all(r["error"] is None for r in rows), rows
    assert all((r["streams"], r["streams_completed"], r["connections"]) == (30, 30, 1) for r in rows), rows
    assert all(r["bytes"] == 1 << 20 and r["http_status"] == 206 for r in rows), rows
    rtt = rows[0]["calib_rtt_ms"]
    assert all(r["ttfb_ms"] - r["connection_time_ms"] >= 0.98 * rtt for r in rows), rows
