"""The run manifest's one schema and its version (quicbed/runmanifest.py): written by the
runner, an older run's manifest still loads and resumes, a newer one is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quicbed import runmanifest
from quicbed.analysis import load_runs
from quicbed.experiments.runner import run_experiment
from quicbed.experiments.schema import parse_experiment
from quicbed.experiments.store import StoreError, read_manifest
from quicbed.experiments.synthetic import SyntheticExecutor

EXPERIMENT = """
name: versioned
profiles: [india]
servers: [nginx]
clients: [{tool: tls_perf, tls: ["1.3"]}, {tool: quic_perf}]
workload: {kind: web, objects: [index.html]}
repetitions: 3
"""


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def test_the_runner_writes_the_version_and_the_calibration_one_level_down(tmp_path):
    run_dir = tmp_path / "r"
    run_experiment(parse_experiment(EXPERIMENT), SyntheticExecutor(), run_dir, progress=False)
    manifest = _manifest(run_dir)
    assert manifest["manifest_version"] == runmanifest.MANIFEST_VERSION
    (summary,) = [c["calibration"] for c in manifest["conditions"].values()]
    assert runmanifest.calibration_record(summary)["backend"] == "synthetic"
    assert runmanifest.calibration_record(summary) is not summary  # read one level down


def test_an_older_run_without_a_version_loads_and_resumes_at_this_version(tmp_path):
    run_dir = tmp_path / "old"
    exp = parse_experiment(EXPERIMENT)
    run_experiment(exp, SyntheticExecutor(), run_dir, progress=False)
    older = _manifest(run_dir)
    del older["manifest_version"]
    (run_dir / "manifest.json").write_text(json.dumps(older))
    df, manifests = load_runs([str(run_dir)])
    assert len(df) == 6 and manifests[0]["manifest_version"] == runmanifest.MANIFEST_VERSION
    assert read_manifest(run_dir)["manifest_version"] == runmanifest.MANIFEST_VERSION
    run_experiment(exp, SyntheticExecutor(), run_dir, resume=True, progress=False)
    resumed = _manifest(run_dir)
    assert resumed["manifest_version"] == runmanifest.MANIFEST_VERSION and len(resumed["sessions"]) == 2


@pytest.mark.parametrize("version", [99, "2", 0, True])
def test_a_manifest_of_a_newer_or_unknown_version_is_refused_in_one_line(tmp_path, version):
    run_dir = tmp_path / "new"
    run_experiment(parse_experiment(EXPERIMENT), SyntheticExecutor(), run_dir, progress=False)
    (run_dir / "manifest.json").write_text(json.dumps({**_manifest(run_dir), "manifest_version": version}))
    with pytest.raises(StoreError) as caught:
        read_manifest(run_dir)
    message = str(caught.value)
    assert message.startswith(f"{run_dir}/manifest.json: ") and "\n" not in message
    assert ("newer quicbed" in message) == (version == 99), message


def test_calibration_record_takes_a_summary_or_a_record():
    record = {"backend": "delayline", "checks": []}
    assert runmanifest.calibration_record({"rtt_ms": 80.0, "calibration": record}) is record
    assert runmanifest.calibration_record(record) is record
    assert runmanifest.calibration_record(None) == {} and runmanifest.calibration_record("x") == {}  # type: ignore[arg-type]
