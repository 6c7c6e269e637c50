"""`quicbed ...` run as a user runs it, in a process of its own: for tests that judge exit codes,
printed lines and the results folder a whole command leaves."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping


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
