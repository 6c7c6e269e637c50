"""`python -m quicbed.clients list [--json]`: the described clients (quicbed/fields.py list_main)."""

from __future__ import annotations

import sys

from quicbed.fields import list_main

from .tools import TOOLS


def entries() -> list[dict[str, object]]:
    return [
        {
            "name": t.name,
            "image": t.image,
            "dockerfile": t.dockerfile,
            "on_demand": t.on_demand,
            "command": list(t.command),
            "workloads": list(t.workloads),
            "labels": t.labels(),
            "reports": list(t.reports),
            "unavailable": t.unavailable,
            "description": t.description,
            "file": t.file,
        }
        for t in TOOLS.values()
    ]


if __name__ == "__main__":
    sys.exit(list_main("quicbed.clients", entries()))
