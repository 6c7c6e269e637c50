"""A validator for the qlog files a run's capture holds (trials/<trial>/client.sqlog and
server.sqlog): the main schema's required fields of the format every stack here writes.

What the stacks write (tried: ngtcp2 1.11, OpenSSL 3.5.9 through libcurl, quic-go v0.63 in
Caddy v2.11.9): JSON-SEQ (RFC 7464: each record is 0x1E, a JSON text, a line feed), a header
record with `qlog_format: "JSON-SEQ"` and `qlog_version: "0.3"` (quic-go adds the newer
`file_schema` and `serialization_format` beside them) and a `trace` with `vantage_point` and/or
`common_fields`, then one record per event with `time` (a number) and `name` (`category:event`).
A file may hold several connections one after the other (a --resume trial, a server's
connections): each starts with its own header record.

    python -m quicbed.analysis.qlog FILE...   # prints the problems, exit 1 if any
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

RS = b"\x1e"
FORMAT = "JSON-SEQ"
VERSIONS = ("0.3", "0.4")
VANTAGE_TYPES = ("client", "server", "network", "unknown")


@dataclass
class QlogCheck:
    traces: int = 0
    events: int = 0
    vantage_points: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.traces > 0


def check_qlog(data: bytes) -> QlogCheck:
    """Every record of a JSON-SEQ qlog file checked; problems name the record (1-based)."""
    out = QlogCheck()
    if not data.startswith(RS):
        out.problems.append("not JSON-SEQ: the file does not start with a record separator (0x1E)")
        return out
    for number, chunk in enumerate(data.split(RS)[1:], start=1):
        record = _parse(chunk, number, out)
        if record is None:
            continue
        if "qlog_format" in record or "qlog_version" in record:
            _check_header(record, number, out)
        elif out.traces == 0:
            out.problems.append(f"record {number}: an event before any header record")
        else:
            _check_event(record, number, out)
    if out.traces == 0 and not out.problems:
        out.problems.append("no header record")
    return out


def _parse(chunk: bytes, number: int, out: QlogCheck) -> dict[str, Any] | None:
    try:
        record = json.loads(chunk)
    except ValueError as exc:  # json.JSONDecodeError and bad UTF-8 alike
        out.problems.append(f"record {number}: not JSON ({exc})")
        return None
    if not isinstance(record, dict):
        out.problems.append(f"record {number}: not a JSON object")
        return None
    return record


def _check_header(record: dict[str, Any], number: int, out: QlogCheck) -> None:
    out.traces += 1
    where = f"record {number} (header)"
    if record.get("qlog_format") != FORMAT:
        out.problems.append(f"{where}: qlog_format is {record.get('qlog_format')!r}, not {FORMAT!r}")
    if record.get("qlog_version") not in VERSIONS:
        out.problems.append(
            f"{where}: qlog_version {record.get('qlog_version')!r} (known: {', '.join(VERSIONS)})"
        )
    trace = record.get("trace")
    if not isinstance(trace, dict):
        out.problems.append(f"{where}: no trace object")
        return
    vantage, common = trace.get("vantage_point"), trace.get("common_fields")
    if vantage is None and not isinstance(common, dict):
        out.problems.append(f"{where}: trace has neither vantage_point nor common_fields")
    if vantage is not None:
        kind = vantage.get("type") if isinstance(vantage, dict) else None
        if kind not in VANTAGE_TYPES:
            out.problems.append(f"{where}: vantage_point type {kind!r} (known: {', '.join(VANTAGE_TYPES)})")
        else:
            out.vantage_points.append(kind)


def _check_event(record: dict[str, Any], number: int, out: QlogCheck) -> None:
    out.events += 1
    time, name = record.get("time"), record.get("name")
    if isinstance(time, bool) or not isinstance(time, int | float):
        out.problems.append(f"record {number}: event time {time!r} is not a number")
    if not isinstance(name, str) or ":" not in name.strip(":"):
        out.problems.append(f"record {number}: event name {name!r} is not category:event")


def main(argv: list[str] | None = None) -> int:
    failed = 0
    for path in argv if argv is not None else sys.argv[1:]:
        with open(path, "rb") as f:
            result = check_qlog(f.read())
        state = "ok" if result.ok else "INVALID"
        print(f"{path}: {state}: {result.traces} trace(s), {result.events} events, {result.vantage_points}")
        for problem in result.problems[:20]:
            print(f"  {problem}")
        failed += not result.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
