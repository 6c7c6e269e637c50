"""The corpus of refused experiment files (tests/data/bad_experiments/) and, per file, the one
line it must be refused with (expected.txt). A line naming the registries' servers or clients
says `<servers>` or `<clients>`: the names are the registries' (shipped ones and stack folders,
in listing order), so adding a server or a stack changes no line here."""

from __future__ import annotations

from pathlib import Path

from quicbed.clients.tools import TOOLS
from quicbed.servers import SERVERS

BAD = Path(__file__).resolve().parent / "data" / "bad_experiments"


def expected_lines() -> dict[str, str]:
    """file name -> the line `quicbed run` prints for it."""
    known = {"<servers>": ", ".join(SERVERS), "<clients>": ", ".join(TOOLS)}
    out = {}
    for line in (BAD / "expected.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            for mark, names in known.items():
                line = line.replace(mark, names)
            out[line.split(":", 1)[0]] = line
    return out
