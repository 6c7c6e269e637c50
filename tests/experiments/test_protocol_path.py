"""experiments/ci/protocol.yaml on the real path: every protocol check holds on the three
shipped QUIC stacks, and the rows carry what the server itself saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import xmlschema
import yaml

from quicbed.paths import REPO

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

EXPERIMENT = REPO / "experiments" / "ci" / "protocol.yaml"
SCHEMA = REPO / "tests" / "data" / "junit.xsd"


def test_protocol_checks_hold_on_every_server(tmp_path: Path) -> None:
    junit = tmp_path / "checks.xml"
    env = {**os.environ, "QUICBED_RESULTS": str(tmp_path / "results")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "quicbed.cli",
            "run",
            str(EXPERIMENT),
            "--check",
            "--junit",
            str(junit),
            "--no-progress",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    checks = len(yaml.safe_load(EXPERIMENT.read_text())["expect"])
    assert f"{checks}/{checks} expectations passed" in out, out[-4000:]
    xmlschema.XMLSchema(SCHEMA).validate(str(junit))
    (run_dir,) = (tmp_path / "results").iterdir()
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 45 and all(r["error"] is None for r in rows)
    for row in rows:
        # The client's and the server's word on the protocol agree, trial by trial.
        assert row["server_http"] == (3 if row["protocol"] == "quic" else 2), row
        assert row["server_tcp_retrans"] == 0, row
        assert row["resumed"] == row["client"].endswith("-resume"), row
