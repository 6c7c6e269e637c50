"""A calibration recorded once and reused by later bring-ups of the same path in one session.

Set QUICBED_CALIBRATION_REUSE=DIR (the test suite sets it to a directory of its own session)
and a run's condition on a path already calibrated in DIR is proven again only where a wrong
path would show at once: the route (the client reaches the server through the router only) and
the RTT, measured afresh on every bring-up. Goodput and loss are taken from the record, which
is keyed by the link's specification, the backend, this boot of this host and the calibration
code, and marked as recorded in the calibration (`reused_from`) and its printed table.

Nothing is reused without the variable: a user's run calibrates in full, every time. With
it, full calibrations that pass are recorded, by runs and by `quicbed calibrate`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from quicbed.topology import calibrate as cal_mod
from quicbed.topology.calibrate import Calibration, Progress, calibrate
from quicbed.topology.net import Testbed

REUSE_ENV = "QUICBED_CALIBRATION_REUSE"


def calibrate_or_reuse(tb: Testbed, progress: Progress = lambda _m: None) -> Calibration:
    """calibrate(tb), or, with REUSE_ENV set and this path recorded there, the route and RTT
    proven afresh beside the recorded goodput and loss. A route or RTT that fails its proof
    fails the calibration as a full one would: the path is not the one recorded."""
    record = _record_of(tb)
    recorded = _load(record) if record else None
    cal = calibrate(tb, progress=progress, recorded=recorded)
    if record and not recorded:
        _store(record, cal)
    return cal


def remember(tb: Testbed, cal: Calibration) -> None:
    """Record a full calibration that passed, with REUSE_ENV set (`quicbed calibrate` records
    too): later bring-ups of the same path may reuse it."""
    if record := _record_of(tb):
        _store(record, cal)


def _record_of(tb: Testbed) -> Path | None:
    store = os.environ.get(REUSE_ENV)
    return Path(store) / f"{path_key(tb)}.json" if store else None


def _store(record: Path, cal: Calibration) -> None:
    if not cal.passed or cal.reused_from:
        return
    record.parent.mkdir(parents=True, exist_ok=True)
    # Processes that share the store (the suite's two workers) may record one path at once.
    partial = record.with_suffix(f".{os.getpid()}.part")
    partial.write_text(json.dumps(cal.to_dict()))
    partial.replace(record)


def path_key(tb: Testbed) -> str:
    """What makes two bring-ups the same path to calibration: the links, the backend, the
    host's boot and the code that calibrates."""
    assert tb.backend
    facts = {
        "down": tb.profile.down,
        "up": tb.profile.up,
        "backend": tb.backend.name,
        "boot": _boot_id(),
        "code": _code_digest(),
    }
    text = json.dumps(facts, default=repr, sort_keys=True)
    return f"{tb.profile.name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _load(record: Path) -> Calibration | None:
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        return Calibration.from_dict(json.loads(record.read_text()))
    return None


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def _code_digest() -> str:
    sources = [Path(cal_mod.__file__), Path(__file__)]
    return hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
