"""`python -m quicbed.servers list [--json]`: the described servers (quicbed/fields.py list_main)."""

from __future__ import annotations

import sys

from quicbed.fields import list_main

from .descriptors import SERVERS


def entries() -> list[dict[str, object]]:
    return [
        {
            "name": s.name,
            "image": s.image,
            "version": s.version,
            "version_key": s.version_key,
            "dockerfile": s.dockerfile,
            "on_demand": s.on_demand,
            "description": s.description,
            "file": s.file,
        }
        for s in SERVERS.values()
    ]


if __name__ == "__main__":
    sys.exit(list_main("quicbed.servers", entries()))
