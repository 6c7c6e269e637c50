"""`quicbed ...` run as a user runs it, in a process of its own: for tests that judge exit codes,
printed lines and the results folder a whole command leaves."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path


def quicbed(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`python -m quicbed.cli ARGS` with this process's environment plus `env`, its output
    captured as text (unbuffered, so a killed run still shows what it printed)."""
    return subprocess.run(
        [sys.executable, "-m", "quicbed.cli", *args],
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_synthetic(exp_file: Path, results: Path, *args: str) -> subprocess.Popen:
    """`python -m quicbed.experiments.synthetic FILE` (no network) into `results`, running."""
    env = os.environ | {"QUICBED_RESULTS": str(results)}
    cmd = [
        sys.executable,
        "-m",
        "quicbed.experiments.synthetic",
        str(exp_file),
        "--no-progress",
        *args,
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_rows(results: Path, n: int, timeout: float = 20) -> Path:
    """The run directory under `results` once its rows file holds n lines."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rows in results.glob("*/rows.jsonl"):
            if rows.read_bytes().count(b"\n") >= n:
                return rows.parent
        time.sleep(0.02)
    raise AssertionError("runner produced no rows")
