"""The host's own settings (/proc/sys) that the testbed changes, put back.

Two kinds:
- kept while testbeds run (`change`): net.ipv4.tcp_allowed_congestion_control gains the
  algorithms the namespaces pick (a namespace may only pick an allowed one). Many testbeds and
  runs share it, so none restores it when it stops: the first change records the host's value
  in STATE/host-settings.json, each run's manifest names what is changed (`changed`), and
  `quicbed clean` writes the recorded values back (`restore_all`).
- held for a moment (`held`): the socket buffer defaults a UML router's boot needs. They are
  restored as it ends; a lock keeps two boots from restoring each other's value, and a boot
  killed in the middle leaves its record for `clean`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from quicbed.paths import STATE

SYSCTL_ROOT = Path("/proc/sys")


def _record_path() -> Path:
    return STATE / "host-settings.json"


@contextlib.contextmanager
def _locked() -> Iterator[dict[str, str]]:
    """The record (setting path -> the host's own value), under an exclusive lock; written
    back as the block leaves it."""
    record = _record_path()
    record.parent.mkdir(parents=True, exist_ok=True)
    with open(record.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            values = json.loads(record.read_text()) if record.is_file() else {}
        except ValueError:
            values = {}
        values = {k: v for k, v in values.items() if isinstance(v, str) and _is_sysctl(k)}
        yield values
        if values:
            tmp = record.with_suffix(".tmp")
            tmp.write_text(json.dumps(values, indent=1))
            tmp.replace(record)
        else:
            record.unlink(missing_ok=True)


def _is_sysctl(path: str) -> bool:
    """Only a /proc/sys file is ever written back: the record is root's own file, but a value
    from it decides what root writes."""
    resolved = os.path.normpath(path)
    return resolved == path and Path(path).is_relative_to(SYSCTL_ROOT)


def change(path: Path, value: str) -> None:
    """Write value to a /proc/sys file, the host's own value recorded first (once)."""
    with _locked() as values:
        values.setdefault(str(path), path.read_text().strip())
        path.write_text(value)


@contextlib.contextmanager
def held(settings: dict[Path, Callable[[str], str]]) -> Iterator[None]:
    """Each setting's new value (a function of its current one) for the block's time, then the
    host's own value again. Blocks run one at a time (the lock is held throughout)."""
    record = _record_path()
    record.parent.mkdir(parents=True, exist_ok=True)
    with open(record.with_name("host-settings-held.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with _locked() as values:
            for path, new in settings.items():
                values.setdefault(str(path), path.read_text().strip())
                path.write_text(new(values[str(path)]))
        try:
            yield
        finally:
            with _locked() as values:
                for path in settings:
                    path.write_text(values.pop(str(path)))


def changed() -> dict[str, dict[str, str]]:
    """What is changed now: setting -> {"host": its own value, "now": the value in force}."""
    if not _record_path().is_file():  # nothing changed (and no lock taken where none is needed)
        return {}
    with _locked() as values:
        return {k: {"host": v, "now": _read(Path(k))} for k, v in values.items()}


def restore_all() -> list[str]:
    """Write back every recorded value (`quicbed clean`); what was restored, one line each."""
    restored = []
    with _locked() as values:
        for key in list(values):
            original = values.pop(key)
            with contextlib.suppress(OSError):
                if _read(Path(key)) != original:
                    Path(key).write_text(original)
                    restored.append(f"host setting {key.removeprefix('/proc/sys/')} = {original}")
    return restored


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
