"""A workload kind is one module (issue 47): a stand-in kind, defined in a fixture and in no
file of the tree (tests/fixtures/workloads/standin.py, one file and no client of its own), is
picked up through QUICBED_WORKLOAD_MODULES by the shipped perf tools' descriptors (they name
`get`, every kind whose trial is one GET), experiment validation, the dry run's plan (its time
and CPU), `python -m quicbed.servers.content`, a synthetic run and the report, each run as a
user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import quicbed

from quicbed.paths import REPO

FIXTURE = REPO / "tests" / "fixtures" / "workloads"
HOOKS = {"QUICBED_WORKLOAD_MODULES": str(FIXTURE / "standin.py")}
EXPERIMENT = """\
name: standin
profiles: [india]
servers: [caddy]
clients: [quic_perf]
workload: {kind: standin, blobs: [4KB, 3MB]}
repetitions: 3
"""


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "standin.yaml"
    path.write_text(EXPERIMENT)
    return path


def test_without_the_hook_the_kind_does_not_exist(experiment: Path) -> None:
    done = quicbed("run", str(experiment), "--dry-run")
    assert done.returncode == 2
    unknown = "standin.yaml:5: workload.kind: unknown workload kind 'standin' (known: web, cloud, video)"
    assert unknown in done.stdout


def test_the_perf_tools_run_it_and_the_players_do_not() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "quicbed.clients", "list", "--json"],
        env={**os.environ, **HOOKS},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    runs = {tool["name"]: tool["workloads"] for tool in json.loads(listed.stdout)}
    for perf_tool in ("quic_perf", "tls_perf", "quiche", "quinn", "quicgo", "aioquic"):
        assert runs[perf_tool] == ["web", "cloud", "standin"], perf_tool
    assert runs["video_download"] == ["video"] and runs["firefox"] == ["web"]


def test_validation_and_the_plan_ask_the_kind(experiment: Path) -> None:
    done = quicbed("run", str(experiment), "--dry-run", "--parallel", env=HOOKS)
    assert done.returncode == 0, done.stderr
    assert "workload: standin: 4KB, 3MB" in done.stdout
    # 6 trials at the kind's 30 s each, plus 42 s of set-up: 222 s.
    assert "estimated duration: 0h03m42s" in done.stdout
    # Its CPU per trial with this tool (0.9 cores) plus the path's own 0.25.
    assert "auto: 1.15 cores a path" in done.stdout
    bad = experiment.with_name("bad.yaml")
    bad.write_text(EXPERIMENT.replace("[4KB, 3MB]", "[5KB]"))
    refused = quicbed("run", str(bad), "--dry-run", env=HOOKS)
    assert refused.returncode == 2
    assert "workload.blobs[0]: unknown blob '5KB' (known: 4KB, 3MB)" in refused.stdout + refused.stderr


def test_make_content_makes_its_content(tmp_path: Path) -> None:
    root = tmp_path / "content"
    done = subprocess.run(
        [sys.executable, "-m", "quicbed.servers.content", str(root), "--workloads", "standin"],
        env={**os.environ, **HOOKS},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    files = json.loads((root / "manifest.json").read_text())["files"]
    assert {rel: entry["size"] for rel, entry in files.items()} == {
        "standin/3MB": 3 * 1024**2,
        "standin/4KB": 4096,
    }
    assert (root / "standin" / "3MB").stat().st_size == 3 * 1024**2


def test_the_report_renders_its_section_from_synthetic_rows(experiment: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    env = {**os.environ, **HOOKS, "QUICBED_RESULTS": str(results)}
    ran = subprocess.run(
        [sys.executable, "-m", "quicbed.experiments.synthetic", str(experiment), "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (run,) = results.iterdir()
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    assert {r["workload"] for r in rows} == {"standin"} and len(rows) == 6
    done = quicbed("report", str(run), "--out", str(tmp_path / "report"), env=HOOKS)
    assert done.returncode == 0, done.stderr
    report = (tmp_path / "report" / "report.md").read_text()
    section = report.split("## Stand-in blobs", 1)[1].split("\n## ", 1)[0]
    assert "A kind from a test fixture" in section
    assert "| india | 4 KB | QUIC | 3 |" in section and "| india | 3 MB | QUIC | 3 |" in section
    assert "Blob time median (ms)" in section
