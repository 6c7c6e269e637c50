"""A stack that turns on the host (issue 46), on the real path: a client and a server plugged in
as a user's own (tests/fixtures/hostile/), run with every capture, then reported and cleaned.

The client plants links to canaries where root removes, appends to and reads capture files,
sets keys only quicbed writes, prints without end, and replaces its trial's directory with a
link; the server's qlog directory fills with links, a FIFO and a 300 MB file. Root must
follow none of it: the canaries are untouched, the hostile trials
are error rows saying why, the others measure, and nothing is left behind.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from cli_process import quicbed

from quicbed.paths import REPO

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

FIXTURES = REPO / "tests" / "fixtures" / "hostile"
CLIENT_IMAGE = "quicbed-test/hostile-client:1.0"
SERVER_IMAGE = "quicbed-test/hostile-caddy:1.0"
SECRET = b"CANARY-hostile-stack-5c1e\n"
REPETITIONS = 6

CLIENT_YAML = """\
image: quicbed-test/hostile-client
version: "1.0"
description: quic_perf (ngtcp2) wrapped by a client that turns on the host
command: [hostile_perf, {canary}]
label: "hostile"
protocol: quic
workloads: [web]
options: {{}}
capture:
  keylog: --keylog
  qlog: --qlog
reports: [tool_version, library]
"""
EXPERIMENT = f"""\
name: hostile
profiles: [india]
servers: [hostile-caddy]
clients: [hostile]
workload: {{kind: web, objects: [index.html]}}
repetitions: {REPETITIONS}
"""


def _server_yaml(canary: Path) -> str:
    text = (REPO / "servers" / "caddy" / "server.yaml").read_text()
    text = text.replace("image: quicbed/caddy\n", "image: quicbed-test/hostile-caddy\n")
    text = text.replace("version_key: CADDY_VERSION\n", 'version: "1.0"\n')
    text = text.replace("dockerfile: images/caddy/Dockerfile\n", "")
    text = text.replace("compose_port: 8443", "# no compose port")
    return text.replace(
        "command: [caddy, run, --config, /etc/quicbed/Caddyfile, --adapter, caddyfile]",
        f"command: [hostile_serve, {canary}]",
    )


def _state(canary: Path) -> dict[str, tuple[str, int]]:
    """Every entry under the canary directory: its content hash (or 'dir') and its mode."""
    out = {}
    for path in sorted(canary.rglob("*")):
        st = path.lstat()
        digest = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        out[str(path.relative_to(canary))] = (digest, st.st_mode)
    return out


@pytest.fixture(scope="module")
def images() -> None:
    for image, folder in ((CLIENT_IMAGE, "client"), (SERVER_IMAGE, "server")):
        built = subprocess.run(
            ["docker", "build", "-q", "--pull=false", "-t", image, str(FIXTURES / folder)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert built.returncode == 0, built.stderr


def test_a_hostile_stack_reaches_nothing_of_the_host(images: None, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    (canary / "dir").mkdir(parents=True)
    (canary / "file").write_bytes(SECRET)
    (canary / "dir" / "keep").write_bytes(SECRET)
    before = _state(canary)
    clients, servers = tmp_path / "clients" / "hostile", tmp_path / "servers" / "hostile-caddy"
    clients.mkdir(parents=True)
    servers.mkdir(parents=True)
    (clients / "client.yaml").write_text(CLIENT_YAML.format(canary=canary))
    (servers / "server.yaml").write_text(_server_yaml(canary))
    experiment = tmp_path / "hostile.yaml"
    experiment.write_text(EXPERIMENT)
    results = tmp_path / "results"
    env = {
        "QUICBED_RESULTS": str(results),
        "QUICBED_CLIENT_DIRS": str(tmp_path / "clients"),
        "QUICBED_SERVER_DIRS": str(tmp_path / "servers"),
    }

    run = quicbed("run", str(experiment), "--capture", "qlog,pcap,keys", "--no-progress", env=env)
    output = run.stdout + run.stderr
    assert "Traceback" not in output and results.is_dir(), output[-3000:]
    # Nothing of the host was removed, appended to or re-moded by the run.
    assert _state(canary) == before
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines() if line]
    assert len(rows) == REPETITIONS, output[-3000:]
    errors = [r["error"] for r in rows if r["error"]]
    # The row that named the run and its trace file, and the output without end: error rows.
    assert any("tool row: sets run_id, trace_file" in e for e in errors), errors
    assert any("printed over 64 MiB; stopped there" in e for e in errors), errors
    # The others measured, on the path: one RTT of QUIC handshake, not a loopback's.
    measured = [r for r in rows if not r["error"]]
    assert len(measured) >= REPETITIONS - 2, errors
    assert all(r["connection_time_ms"] > 0.9 * r["calib_rtt_ms"] for r in measured), measured
    assert all(r.get("trace_file") is None for r in rows)

    report = quicbed("report", str(run_dir), env=env)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stdout + report.stderr
    clean = quicbed("clean", env=env, timeout=120)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    # Nor by report and clean; and nothing of it was read into the results.
    assert _state(canary) == before
    for path in run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert SECRET.strip() not in path.read_bytes(), path
            if path.name == "keys.log":
                assert (path.stat().st_mode & 0o777) == 0o600, path
    # Nothing left: no container of either image.
    for image in (CLIENT_IMAGE, SERVER_IMAGE):
        left = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"ancestor={image}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert left.returncode == 0 and left.stdout.strip() == "", (image, left.stdout)
