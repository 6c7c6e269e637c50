"""`quicbed compare` on real runs: experiments/ci/regression.yaml twice on one server image
(no change, exit 0) and once on a deliberately slowed one (a regression, exit 1, JUnit valid).

The server is a team's own, plugged in as data (tests/fixtures/ci/{base,slow}/team-nginx, one
server name, two images) as servers/README.md describes for CI. The slowed image is nginx with
http3_stream_buffer_size at its 64k default: HTTP/3 downloads slow down, HTTP/2 does not.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import xmlschema
from cli_process import quicbed

from quicbed.paths import REPO

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

FIXTURES = REPO / "tests" / "fixtures" / "ci"
EXPERIMENT = REPO / "experiments" / "ci" / "regression.yaml"
SCHEMA = REPO / "tests" / "data" / "junit.xsd"
SLOW_IMAGE = "quicbed-test/team-nginx:slow"


def _quicbed(
    *args: str, results: Path | None = None, dirs: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"QUICBED_RESULTS": str(results)} if results else {}
    if dirs:
        env["QUICBED_SERVER_DIRS"] = str(dirs)
    return quicbed(*args, env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """base, again (the same image) and slow, each one run of the experiment."""
    built = subprocess.run(
        ["docker", "build", "-q", "-t", SLOW_IMAGE, str(FIXTURES / "slow" / "team-nginx")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    tmp = tmp_path_factory.mktemp("compare")
    # The team's server under its own name: the same experiment text for every run.
    experiment = tmp / "regression.yaml"
    experiment.write_text(EXPERIMENT.read_text().replace("servers: [nginx]", "servers: [team-nginx]"))
    out: dict[str, Path] = {}
    for name, side in (("base", "base"), ("again", "base"), ("slow", "slow")):
        results = tmp / name
        proc = _quicbed(
            "run", str(experiment), "--check", "--no-progress", results=results, dirs=FIXTURES / side
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        (out[name],) = [p for p in results.iterdir() if p.is_dir()]
    return out


def test_later_runs_prove_route_and_rtt_and_reuse_the_rest(runs: dict[str, Path]) -> None:
    """The suite's calibration reuse (topology/calibration_reuse.py) on the same path: each
    later run measured route and RTT itself and says which checks it took from the record."""
    for name in ("again", "slow"):
        manifest = json.loads((runs[name] / "manifest.json").read_text())
        (condition,) = manifest["conditions"].values()
        cal = condition["calibration"]["calibration"]
        assert cal["reused_from"] and cal["passed"], cal
        fresh = {c["metric"] for c in cal["checks"] if not c["detail"].startswith("recorded ")}
        assert fresh == {"client_interfaces", "route_via_router", "rtt_median_ms"}, cal
        assert {"goodput_mbit", "loss_pct"} <= {c["metric"] for c in cal["checks"]}, cal


def _compare(runs: dict[str, Path], new: str, tmp: Path) -> tuple[subprocess.CompletedProcess, dict, Path]:
    junit, report = tmp / f"{new}.xml", tmp / f"{new}.json"
    proc = _quicbed(
        "compare", str(runs["base"]), str(runs[new]), "--json", str(report), "--junit", str(junit)
    )
    return proc, json.loads(report.read_text()), junit


def test_same_server_twice_is_no_change(runs: dict[str, Path], tmp_path: Path) -> None:
    proc, report, junit = _compare(runs, "again", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = {(c["client"], c["metric"]): c["verdict"] for c in report["cells"]}
    assert len(verdicts) == 8 and report["regressed"] == 0, verdicts
    # "no change" means something: the repetitions could have seen a 5 % change.
    assert set(verdicts.values()) == {"no change"}, proc.stdout
    xmlschema.XMLSchema(SCHEMA).validate(str(junit))


def test_slowed_server_is_a_regression(runs: dict[str, Path], tmp_path: Path) -> None:
    proc, report, junit = _compare(runs, "slow", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cells = {(c["client"], c["metric"]): c for c in report["cells"]}
    quic = cells[("quic-h3-ngtcp2", "download_time")]
    assert quic["verdict"] == "regressed" and quic["change_pct"] > 50, quic
    assert cells[("quic-h3-ngtcp2", "throughput")]["verdict"] == "regressed"
    # The handshake and HTTP/2 over TCP are untouched by an HTTP/3 stream buffer.
    assert cells[("quic-h3-ngtcp2", "connection_time")]["verdict"] == "no change"
    assert cells[("tls1.3-h2", "download_time")]["verdict"] == "no change"
    assert "❌ regressed" in proc.stdout
    xmlschema.XMLSchema(SCHEMA).validate(str(junit))
    text = junit.read_text()
    assert text.count("<failure") == report["regressed"] >= 2, text
    assert "download_time" in text


def test_runs_of_another_experiment_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    # The same cells, but the runs measured different matrices: never compared.
    manifest = json.loads((runs["slow"] / "manifest.json").read_text())
    other = tmp_path / runs["slow"].name
    subprocess.run(["cp", "-r", str(runs["slow"]), str(other)], check=True)
    manifest["matrix_hash"] = "another matrix"
    (other / "manifest.json").write_text(json.dumps(manifest))
    proc = _quicbed("compare", str(runs["base"]), str(other))
    assert proc.returncode == 2 and "not comparable" in proc.stderr, proc.stderr
