"""Fixtures the browser clients' unit tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def ca(tmp_path: Path) -> str:
    """A CA file that exists: browser_perf checks --cacert before it starts a browser."""
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return str(path)
