"""Where things live: the checkout, the cache that survives runs, and per-run state."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# One folder per QUIC stack (its client and server descriptors, Dockerfile and source):
# stacks/README.md. The client and server registries read it beside clients/ and servers/.
STACKS_DIR = REPO / "stacks"
# Slow-to-build artefacts (content, compiled tools) are cached here so a second run is fast.
CACHE = Path(os.environ.get("QUICBED_CACHE", "/var/cache/quicbed"))
# Per-run scratch state (UML configs, PKI, logs). Not under /tmp: the UML router mounts its own /tmp.
STATE = Path(os.environ.get("QUICBED_STATE", "/var/lib/quicbed"))
RESULTS = Path(os.environ.get("QUICBED_RESULTS", REPO / "results"))


def read_versions() -> dict[str, str]:
    """The pinned versions (versions.env), for manifests and image build args."""
    versions: dict[str, str] = {}
    for line in (REPO / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            versions[key] = value
    return versions
