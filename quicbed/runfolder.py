"""The one reader of a run folder's files: the runner's store (resume, retry), the analysis
(report, figures) and `quicbed explain` read rows.jsonl and manifest.json here, by the same
rules; each then says what it needs of them (the store: a trial_id on every row and a manifest
it can resume; the report: a manifest it can read, with notes where it lacks parts).

rows.jsonl:

- Only "\\n" ends a row (splitlines would also split at U+2028 inside a string).
- A line is one JSON object; blank lines are skipped.
- The runner appends each row with one write, so a crash can only tear the last line, cut
  before its newline: it is counted as torn and left out.
- Damage anywhere else (a hand edit, another tool's file) is refused, naming the file and
  line: guessing past it would silently lose or invent trials.
- The file is opened without following a link, regular files only, each line bounded
  (limits.py): a results folder may come from anyone.

manifest.json (and any run JSON): bounded, not followed, and a parse error names its line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed import limits
from quicbed.errors import QuicbedError


class RunFolderError(QuicbedError):
    """A run folder's file cannot be read as what it should be: the message names the file
    (and line)."""


@dataclass
class RowLines:
    """The rows of a rows.jsonl in file order, each with its line number, and how many lines
    a crash tore (0 or 1)."""

    numbered: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    torn: int = 0

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [row for _, row in self.numbered]


def read_rows_file(path: Path | str) -> RowLines:
    """Every row of `path` (rules above); an empty RowLines when there is no such file."""
    path = Path(path)
    read = RowLines()
    try:
        with limits.open_regular(path, follow=False) as f:
            for number, raw in limits.bounded_lines(f, limits.ROW_LINE_MAX_BYTES):
                line = raw.removesuffix(b"\n").decode(errors="replace")
                if not line.strip():
                    continue
                row, problem = _parse_row(line)
                if row is not None:
                    read.numbered.append((number, row))
                elif not raw.endswith(b"\n"):  # no newline after it: a crash cut it short
                    read.torn += 1
                else:
                    raise RunFolderError(f"{path}:{number}: {problem}")
    except FileNotFoundError:
        return RowLines()
    except limits.TooBig as exc:
        raise RunFolderError(f"{path}: {exc}") from None
    except OSError as exc:
        raise RunFolderError(f"cannot read {path}: {exc.strerror or exc}") from None
    return read


def _parse_row(line: str) -> tuple[dict[str, Any] | None, str]:
    """One line as a row, or None and why it is not one."""
    try:
        row = json.loads(line)
    except ValueError as exc:
        return None, f"not a JSON row ({getattr(exc, 'msg', exc)})"
    except RecursionError:  # thousands of nested brackets
        return None, "not a JSON row (nested too deeply)"
    if not isinstance(row, dict):
        return None, f"a row must be a JSON object, not {type(row).__name__}"
    return row, ""


def read_json(path: Path | str) -> Any:
    """A run folder's JSON file (manifest.json), bounded and not followed; FileNotFoundError
    passes through (a caller says what a missing file means)."""
    path = Path(path)
    try:
        return json.loads(limits.read_bounded(path, limits.RUN_JSON_MAX_BYTES, follow=False).decode())
    except FileNotFoundError:
        raise
    except limits.TooBig as exc:
        raise RunFolderError(f"{path}: {exc}") from None
    except OSError as exc:
        raise RunFolderError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly nested JSON
        where = f"{path}:{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else str(path)
        raise RunFolderError(f"{where}: not valid JSON ({getattr(exc, 'msg', exc)})") from None
