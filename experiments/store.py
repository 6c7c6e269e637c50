"""A run directory: results/<run-id>/{rows.jsonl, manifest.json, rows.parquet, .lock}.

rows.jsonl is the source of truth and is crash-safe: each trial's row is one `os.write` of one
complete line followed by fsync. A crash can at worst leave a torn last line, which loading
ignores (that trial counts as missing) and reopening for append cuts off. A failed write (disk
full) is rolled back by truncation, so the last row is either whole or absent.

A trial retried (`--resume RUN_ID --retry-failed`) gets a second row with `attempt` one higher;
the failed row stays, so the file is never rewritten. The last row of a trial supersedes the
earlier ones: `load_rows` and rows.parquet hold one row per trial, `load_history` all of them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quicbed import limits, rowschema, runfolder, runmanifest
from quicbed.errors import QuicbedError

ROWS, MANIFEST = rowschema.ROWS_FILE, rowschema.MANIFEST_FILE
PARQUET, LOCK = rowschema.PARQUET_FILE, rowschema.LOCK_FILE


class StoreError(QuicbedError):
    """A run-directory problem worth one clear line to the user (no traceback)."""


def new_run_id(name: str, results: Path) -> str:
    """`<name>-<UTC time>`, with a -2, -3... suffix if a run started in the same second."""
    base = f"{name}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    run_id, n = base, 1
    while (results / run_id).exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


class RunStore:
    """Exclusive, append-only access to one run directory; use as a context manager."""

    def __init__(self, run_dir: Path | str):
        self.dir = Path(run_dir)
        self.rows_path = self.dir / ROWS
        self._lock_fd: int | None = None
        self._rows_fd: int | None = None
        self.torn_lines = 0  # torn tail lines cut off when opening

    def open(self, create: bool = True) -> RunStore:
        """Lock the directory and prepare for appending; fails before any trial runs."""
        if not create and not self.dir.is_dir():
            raise StoreError(f"no run directory {self.dir}")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            # O_NOFOLLOW: a results folder's .lock or rows.jsonl linked elsewhere (/etc/passwd)
            # must not be truncated or appended to as root.
            self._lock_fd = os.open(self.dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise StoreError(f"results directory {self.dir} is not writable: {_why(exc)}") from None
        self._lock()
        self.torn_lines = self._cut_torn_tail()
        try:
            self._rows_fd = os.open(
                self.rows_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644
            )
        except OSError as exc:
            self.close()
            raise StoreError(f"cannot write {self.rows_path}: {_why(exc)}") from None
        return self

    def _lock(self) -> None:
        assert self._lock_fd is not None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(self._lock_fd, 32, 0).decode(errors="replace").strip() or "?"
            self.close()
            raise StoreError(f"{self.dir} is in use by another quicbed run (pid {pid})") from None
        # The pid is only for that message; the flock itself dies with the process.
        with contextlib.suppress(OSError):
            os.ftruncate(self._lock_fd, 0)
            os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)

    def _cut_torn_tail(self) -> int:
        """Truncate an incomplete last line (a crash mid-write) so appends start on a fresh line."""
        try:
            with limits.open_regular(self.rows_path, follow=False) as f:
                # Only the tail is read: a row line is at most ROW_LINE_MAX_BYTES.
                size = os.fstat(f.fileno()).st_size
                start = max(0, size - limits.ROW_LINE_MAX_BYTES - 1)
                f.seek(start)
                tail = f.read(size - start)
        except FileNotFoundError:
            return 0
        except limits.TooBig as exc:
            raise StoreError(f"{self.rows_path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot read {self.rows_path}: {_why(exc)}") from None
        if not tail or tail.endswith(b"\n"):
            return 0
        if b"\n" not in tail and start > 0:
            raise StoreError(f"{self.rows_path}: its last line is longer than a row may be")
        try:
            os.truncate(self.rows_path, start + tail.rfind(b"\n") + 1)
        except OSError as exc:
            raise StoreError(f"cannot repair {self.rows_path}: {_why(exc)}") from None
        return 1

    def close(self) -> None:
        for fd in (self._rows_fd, self._lock_fd):
            if fd is not None:
                os.close(fd)
        self._rows_fd = self._lock_fd = None

    def __enter__(self) -> RunStore:
        return self if self._lock_fd is not None else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(self, row: dict[str, Any]) -> None:
        """Write one row durably, or raise StoreError with the file unchanged."""
        assert self._rows_fd is not None, "open() first"
        line = (json.dumps(row, default=_jsonable, separators=(",", ":")) + "\n").encode()
        size = os.fstat(self._rows_fd).st_size
        try:
            written = os.write(self._rows_fd, line)
            if written != len(line):  # a short write means the disk filled up mid-line
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(self._rows_fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._rows_fd, size)
            raise StoreError(f"cannot save a row to {self.rows_path}: {_why(exc)}") from None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json_atomic(self.dir / MANIFEST, manifest)

    def write_parquet(self) -> Path:
        return write_parquet(load_rows(self.dir)[0], self.dir / PARQUET)


def load_rows(run_dir: Path | str) -> tuple[list[dict[str, Any]], int]:
    """The current row of each trial (its last attempt), and how many lines were torn by a
    crash (see load_history)."""
    rows, bad = load_history(run_dir)
    return latest_attempts(rows), bad


def latest_attempts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per trial_id, the last written; in the order trials first appeared."""
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        latest[row["trial_id"]] = row  # a re-assigned key keeps its first position
    return list(latest.values())


def load_history(run_dir: Path | str) -> tuple[list[dict[str, Any]], int]:
    """Every complete row in file order, superseded attempts included, and how many lines
    were torn by a crash (0 or 1: only the last line, cut before its newline, can be).

    Any other unreadable line (hand-edited, not JSON, not a row object, no trial_id) raises
    StoreError naming the file and line (quicbed/runfolder.py, the one reader of the file):
    guessing past damage would silently lose or invent trials."""
    path = Path(run_dir) / ROWS
    try:
        read = runfolder.read_rows_file(path)
    except runfolder.RunFolderError as exc:
        raise StoreError(str(exc)) from None
    for number, row in read.numbered:
        if not isinstance(row.get("trial_id"), str):
            raise StoreError(f"{path}:{number}: the row has no trial_id")
    return read.rows, read.torn


# What resuming and checking a run rely on; a manifest without them is not one this version
# of quicbed wrote (or it was edited), and would fail later with a KeyError.
_MANIFEST_KEYS: dict[str, type] = {"run_id": str, "matrix_hash": str, "sessions": list, "conditions": dict}


def read_manifest(run_dir: Path | str) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    try:
        manifest = runfolder.read_json(path)
    except FileNotFoundError:
        raise StoreError(f"no run at {run_dir} ({MANIFEST} is missing)") from None
    except runfolder.RunFolderError as exc:
        raise StoreError(str(exc)) from None
    if not isinstance(manifest, dict):
        raise StoreError(f"{path} is not a run manifest (a JSON {type(manifest).__name__}, " "not an object)")
    bad = [key for key, kind in _MANIFEST_KEYS.items() if not isinstance(manifest.get(key), kind)]
    if bad:
        raise StoreError(
            f"{path} has no usable {', '.join(bad)} (written by another version " "of quicbed, or edited?)"
        )
    problem = rowschema.run_id_problem(manifest["run_id"])
    if problem:  # it names directories (merge, reports) and every resumed row
        raise StoreError(f"{path}: {problem}")
    try:
        runmanifest.upgrade(manifest)  # in place: an older run resumes at this version
    except runmanifest.ManifestVersionError as exc:
        raise StoreError(f"{path}: {exc}") from None
    return manifest


def write_json_atomic(path: Path, data: Any) -> None:
    """tmp + fsync + rename: readers see the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, default=_jsonable)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StoreError(f"cannot write {path}: {_why(exc)}") from None


def _has_empty_struct(kind: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_struct(kind):
        fields = [kind.field(i).type for i in range(kind.num_fields)]
        return not fields or any(_has_empty_struct(f) for f in fields)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return bool(_has_empty_struct(kind.value_type))
    return False


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = pd.DataFrame.from_records(rows)
    columns = {}
    for name in frame.columns:
        try:
            columns[name] = pa.array(frame[name].tolist(), from_pandas=True)
            if _has_empty_struct(columns[name].type):
                raise pa.ArrowInvalid("Parquet cannot hold a struct without fields")
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            # Mixed shapes (e.g. a tool row with a dict here, a number there), or only empty
            # dicts (capture_missing when every kind was written): keep as JSON text.
            columns[name] = pa.array(
                [None if _missing(v) else json.dumps(v, default=_jsonable) for v in frame[name]]
            )
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        pq.write_table(pa.table(columns), tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {_why(exc)}") from None
    return path


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    return exc.strerror or str(exc)
