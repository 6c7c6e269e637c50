"""A run's manifest (results/<run>/manifest.json): its one schema, with a version.

The runner writes it (experiments/runner.py), merge and the cluster extend it, and the
analysis reads it (analysis/manifest.py, load.py, compare.py, loss_response.py). Each of them
names the fields through these types, and reads a condition's or unit's calibration through
`calibration_record`: the executor's summary keeps the whole calibration one level down, and a
reader that took the summary for the record read a backend that is never there (compare's
"link backend A against B" could not fire).

Versions: 1 is every manifest written before the field (the runner's shape, as 2); 2 adds
`manifest_version`. `upgrade` brings an older manifest to this version when it is read, and
refuses a newer one: its fields may mean what this code does not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

MANIFEST_VERSION = 2
VERSION_KEY = "manifest_version"


class CalibrationCheck(TypedDict, total=False):
    """One calibration check (topology/calibrate.py's Check.as dict)."""

    metric: str
    direction: str
    configured: float | None
    measured: float | None
    passed: bool
    tolerance: str


class CalibrationRecord(TypedDict, total=False):
    """topology/calibrate.py's Calibration.to_dict(): the checks, the backend and why."""

    profile: str
    checks: list[CalibrationCheck]
    backend: str
    backend_reason: str
    link: dict[str, Any]
    passed: bool
    forced: bool


class CalibrationSummary(TypedDict, total=False):
    """What the executor records of a condition's (or unit's) bring-up."""

    rtt_ms: float | None  # the calibrated median RTT
    passed: bool
    forced: bool
    calibration: CalibrationRecord  # the whole record, one level down
    ca_sha256: str
    servers: dict[str, Any]
    timing: dict[str, float]


class ConditionEntry(TypedDict, total=False):
    label: str
    profile: str
    link: dict[str, Any]  # LinkSpec pair (topology/linkspec.py to_dict)
    overrides: dict[str, Any]
    params: dict[str, Any]
    calibration: CalibrationSummary | None
    ran_on: dict[str, Any]  # the host, backend and images that measured it
    error: str


class UnitEntry(TypedDict, total=False):
    condition: str
    cells: list[Any]
    label: str
    calibration: CalibrationSummary | None
    error: str


class Session(TypedDict, total=False):
    started_at: str
    ended_at: str
    pid: int
    status: str
    git: dict[str, Any]
    capture: list[str]
    retry_failed: bool
    ran: int


class Manifest(TypedDict, total=False):
    manifest_version: int
    run_id: str
    experiment: str
    file: str
    file_sha256: str
    experiment_text: str
    matrix_hash: str
    quick: bool
    capture: list[str]
    seed: int
    order: str
    trials_total: int
    git: dict[str, Any]
    host: dict[str, Any]
    versions: dict[str, Any]
    executor: dict[str, Any]
    started_at: str
    ended_at: str
    status: str
    stopped: str
    sessions: list[Session]
    conditions: dict[str, ConditionEntry]
    units: dict[str, UnitEntry]
    units_earlier: dict[str, UnitEntry]
    shard: dict[str, Any]
    decisions: list[dict[str, Any]]
    merged_from: list[str]


class ManifestVersionError(ValueError):
    """A manifest of a newer quicbed than this one."""


def upgrade(raw: dict[str, Any]) -> Manifest:
    """The manifest at this version (in place: the caller's dict is the one it returns)."""
    version = raw.get(VERSION_KEY, 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ManifestVersionError(f"{VERSION_KEY} is {version!r}, not a version number")
    if version > MANIFEST_VERSION:
        raise ManifestVersionError(
            f"written by a newer quicbed (manifest version {version}; this one reads up to "
            f"{MANIFEST_VERSION}): read it with the version that wrote it"
        )
    # 1 -> 2: the field itself; the shape did not change.
    raw[VERSION_KEY] = MANIFEST_VERSION
    return raw  # type: ignore[return-value]


def calibration_record(summary: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The whole calibration record of a condition's or unit's `calibration` (the executor's
    summary, which keeps it one level down); a record passed as it is stays itself; {} for
    none."""
    if not isinstance(summary, Mapping):
        return {}
    inner = summary.get("calibration")
    return inner if isinstance(inner, Mapping) else summary
