"""Load one or more run directories (manifest.json + rows) into one frame.

A run directory is written by the experiment runner while it runs: rows.jsonl grows one
line per trial (its last line may be torn if the run was interrupted) and rows.parquet
appears only when the run ends. So Parquet is preferred and JSON lines are the fallback.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from quicbed import paths, rowschema, runfolder, runmanifest
from quicbed.errors import QuicbedError
from quicbed.workloads import derived_kinds
from quicbed.workloads.web import PAGELOAD

from . import loss_response
from .manifest import calibrated_rtt, calibration_entries, manifest_differences
from .model import (
    OPTIONAL_COLUMNS,
    is_failed,
    object_size_bytes,
    truthy,
)


class AnalysisError(QuicbedError):
    """A problem the user can fix (unknown run, no rows...); one line, no traceback."""

    exit_code = 2


MIN_RTT_MS = 1.0
# Without these a row cannot be placed in any comparison; every other column is optional.
REQUIRED_COLUMNS = ["protocol"]


def results_root() -> Path:
    # Read the environment at call time so tests (and users) can point elsewhere.
    return Path(os.environ.get("QUICBED_RESULTS", paths.RESULTS))


def available_runs(root: Path | None = None) -> list[str]:
    root = root or results_root()
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if (p / rowschema.MANIFEST_FILE).is_file() or (p / rowschema.ROWS_FILE).is_file()
    )


def resolve_run_dir(run: str | Path) -> Path:
    """A run id (under the results root) or a path to a run directory."""
    candidate = Path(run)
    if candidate.is_dir():
        return candidate
    problem = rowschema.run_id_problem(str(run))
    if problem:  # never joined to the results root: `../x` names no run
        raise AnalysisError(problem)
    root = results_root()
    if (root / str(run)).is_dir():
        return root / str(run)
    runs = available_runs(root)
    listing = ", ".join(runs) if runs else "none"
    raise AnalysisError(f"unknown run '{run}' (looked in {root}; available runs: {listing})")


def read_manifest(run_dir: Path, notes: list[str]) -> dict[str, Any]:
    path = run_dir / rowschema.MANIFEST_FILE
    if not path.is_file():
        notes.append(f"run {run_dir.name}: no manifest.json; versions and calibration unknown")
        return {"run_id": run_dir.name}
    try:
        manifest = runfolder.read_json(path)
    except runfolder.RunFolderError as exc:  # it names the file (and line)
        raise AnalysisError(str(exc)) from None
    problem = manifest_problem(manifest)
    if problem:
        raise AnalysisError(f"{path}: {problem} (written by another version of quicbed, " "or edited?)")
    manifest.setdefault("run_id", run_dir.name)
    problem = rowschema.run_id_problem(manifest["run_id"])
    if problem:  # it names the report's directory of several runs and the rows' run_id
        raise AnalysisError(f"{path}: {problem}")
    try:
        runmanifest.upgrade(manifest)
    except runmanifest.ManifestVersionError as exc:
        raise AnalysisError(f"{path}: {exc}") from None
    if not manifest.get("conditions"):
        # Another version's (or a hand-written) manifest: usable, but say what it lacks.
        notes.append(
            f"run {run_dir.name}: manifest.json records no calibration (no conditions); "
            "configured RTTs are used"
        )
    status = manifest.get("status", "complete")
    if status != "complete":
        notes.append(
            f"run {run_dir.name} has status '{status}' (not complete): "
            "this report covers the rows written so far"
        )
    return manifest


# The manifest's parts the report reads as mappings or lists (.manifest, .overhead): missing
# or empty is fine (older runs have less), another shape would end in an AttributeError deep
# in the report. An entry (`*`) must be there as the container itself.
_MANIFEST_SHAPES: tuple[tuple[str, type], ...] = (
    ("conditions", dict),
    ("conditions.*", dict),
    ("conditions.*.link", dict),
    ("conditions.*.link.down", dict),
    ("conditions.*.link.up", dict),
    ("conditions.*.calibration", dict),
    ("conditions.*.calibration.calibration", dict),
    ("conditions.*.calibration.calibration.checks", list),
    ("conditions.*.calibration.calibration.checks.*", dict),
    ("conditions.*.calibration.timing", dict),
    ("units", dict),
    ("units.*", dict),
    ("units.*.calibration", dict),
    ("units.*.calibration.calibration", dict),
    ("units.*.calibration.calibration.checks", list),
    ("units.*.calibration.calibration.checks.*", dict),
)


def manifest_problem(manifest: Any) -> str | None:
    """Why `manifest` is not a manifest the report can read, or None."""
    if not isinstance(manifest, dict):
        return f"a JSON {type(manifest).__name__}, not an object"
    for pattern, kind in _MANIFEST_SHAPES:
        for where, value in _values_at(manifest, pattern.split("."), ""):
            if not isinstance(value, kind) and (value or pattern.endswith("*")):
                expected = "an object" if kind is dict else "a list"
                return f"'{where}' should be {expected}, not {type(value).__name__}"
    return None


def _values_at(data: Any, parts: list[str], where: str) -> Iterable[tuple[str, Any]]:
    """(dotted path, value) for each value at `parts`; `*` is every entry of an object or
    list. Missing keys and non-containers on the way yield nothing (shorter paths check those)."""
    if not parts:
        yield where, data
        return
    head, rest = parts[0], parts[1:]
    if head != "*":
        children = [(head, data[head])] if isinstance(data, dict) and head in data else []
    elif isinstance(data, dict):
        children = [(str(k), v) for k, v in data.items()]
    else:
        children = [(str(i), v) for i, v in enumerate(data)] if isinstance(data, list) else []
    for name, child in children:
        yield from _values_at(child, rest, f"{where}.{name}" if where else name)


def read_jsonl(path: Path, notes: list[str]) -> pd.DataFrame:
    """rows.jsonl's rows (quicbed/runfolder.py, the one reader of the file): a line torn by a
    crash is left out with a note; damage anywhere else is an edit, which the report must not
    silently paper over: refused, naming the file and line."""
    try:
        read = runfolder.read_rows_file(path)
    except runfolder.RunFolderError as exc:
        raise AnalysisError(str(exc)) from None
    if read.torn:
        notes.append(f"{path.parent.name}/rows.jsonl: last line torn (a crash while writing it), ignored")
    return pd.DataFrame.from_records(read.rows)


def read_rows(run_dir: Path, notes: list[str]) -> pd.DataFrame:
    parquet, jsonl = run_dir / rowschema.PARQUET_FILE, run_dir / rowschema.ROWS_FILE
    if parquet.is_file():
        try:
            return pd.read_parquet(parquet)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            if not jsonl.is_file():
                raise AnalysisError(
                    f"run {run_dir.name}: rows.parquet is corrupt ({reason}) "
                    "and there is no rows.jsonl to fall back to"
                ) from None
            notes.append(
                f"run {run_dir.name}: rows.parquet is corrupt ({reason}); " "read rows.jsonl instead"
            )
    if jsonl.is_file():
        return read_jsonl(jsonl, notes)
    return pd.DataFrame()


def load_run(run: str | Path, notes: list[str]) -> tuple[pd.DataFrame, dict[str, Any]]:
    run_dir = resolve_run_dir(run)
    manifest = read_manifest(run_dir, notes)
    rows = read_rows(run_dir, notes)
    if rows.empty:
        raise AnalysisError(f"run {run_dir.name} has no rows (nothing in {run_dir})")
    missing = [c for c in REQUIRED_COLUMNS if c not in rows]
    if missing:
        raise AnalysisError(f"run {run_dir.name}: rows lack the column(s) {', '.join(missing)}")
    if "run_id" not in rows:
        rows["run_id"] = manifest["run_id"]
    if "capture_files" in rows:  # its trials' captures, for `explain` and the report's evidence
        rows["run_dir"] = str(run_dir)
    for column in ("trace_file", "cross_trace_file"):  # a player's or the flows' trace, beside the rows
        if column in rows:
            rows[column.replace("_file", "_path")] = inside_run(rows[column], run_dir, column, notes)
    return latest_attempts(rows, run_dir.name, notes), manifest


def inside_run(names: pd.Series, run_dir: Path, column: str, notes: list[str]) -> pd.Series:
    """The files a column names, as paths inside `run_dir`; None where there is none, or where
    the row names a place outside the run (`..`, absolute, through a symbolic link), which is
    noted and never read."""
    refused = 0

    def one(rel: object) -> str | None:
        nonlocal refused
        if not isinstance(rel, str) or not rel:
            return None
        try:
            return str(rowschema.run_file(run_dir, rel))
        except rowschema.RunPathError:
            refused += 1
            return None

    paths = names.map(one)
    if refused:
        notes.append(
            f"run {run_dir.name}: {refused} row(s) name a {column} outside the run directory; ignored"
        )
    return paths


def latest_attempts(rows: pd.DataFrame, run: str, notes: list[str]) -> pd.DataFrame:
    """One row per trial: a retried trial (`--retry-failed`) keeps its failed rows in
    rows.jsonl, and the last row written supersedes them. Rows without a trial id are kept."""
    if "trial_id" not in rows:
        return rows
    is_id = rows["trial_id"].map(lambda v: isinstance(v, str) and v != "")
    superseded = is_id & rows["trial_id"].where(is_id).duplicated(keep="last")
    rows = rows[~superseded].reset_index(drop=True)
    # Counted on the kept rows, so reading rows.parquet (already one per trial) says the same.
    attempts = pd.to_numeric(rows["attempt"], errors="coerce") if "attempt" in rows else None
    retried = 0 if attempts is None else int((attempts > 1).sum())
    if retried:
        notes.append(
            f"run {run}: {retried} trial(s) retried after failing; each counts once, " "by its last attempt"
        )
    return rows


def rtt_reference(df: pd.DataFrame, manifests: list[dict[str, Any]]) -> pd.Series:
    """The RTT that timings are normalised by: the trial's calibrated RTT, else the run's
    calibration for that condition, else the configured RTT."""
    from_manifest = calibrated_rtt(manifests)
    keys = zip(df["run_id"], df["condition"], strict=True)
    manifest_rtt = pd.Series([from_manifest.get(k, np.nan) for k in keys], index=df.index)
    return df["calib_rtt_ms"].fillna(manifest_rtt).fillna(df["rtt_ms"]).astype(float)


def calibrated_down_loss(manifests: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(run_id, condition) -> the calibrated downlink loss (%), where the manifest has one."""
    return {
        (e["run"], e["condition"]): float(e["loss_down_pct"])
        for e in calibration_entries(manifests)
        if isinstance(e.get("loss_down_pct"), int | float)
    }


def loss_paths(df: pd.DataFrame, manifests: list[dict[str, Any]]) -> pd.Series:
    """Each row's PathLoss (or None): the calibrated downlink loss of its condition, else the
    configured one; the calibrated RTT (rtt_reference); the configured downlink rate."""
    measured = calibrated_down_loss(manifests)
    rtt = rtt_reference(df, manifests)
    return pd.Series(
        [
            loss_response.path_loss(measured.get((run, cond)), loss, r, rate)
            for run, cond, loss, r, rate in zip(
                df["run_id"], df["condition"], df["loss_pct"], rtt, df["rate_down_mbit"], strict=True
            )
        ],
        index=df.index,
        dtype=object,
    )


def add_loss_response(df: pd.DataFrame, manifests: list[dict[str, Any]]) -> None:
    """The runner's loss_bound_mbit / loss_response / loss_bound_basis, computed with the same
    function for rows that lack them (runs older than the check)."""
    columns = [c.name for c in rowschema.LOSS_RESPONSE]
    for column in columns:
        if column not in df:
            df[column] = None
    missing = df["loss_response"].isna()
    if not missing.any():
        return
    paths = loss_paths(df, manifests)
    computed = [loss_response.row_columns(row, paths[i]) for i, row in df[missing].to_dict("index").items()]
    for column in columns:
        values = pd.Series([c[column] for c in computed], index=df.index[missing], dtype=object)
        df[column] = df[column].astype(object)
        df.loc[missing, column] = values
    df["loss_bound_mbit"] = pd.to_numeric(df["loss_bound_mbit"], errors="coerce")


def transfer_cpu_pct(df: pd.DataFrame) -> pd.Series:
    """The client's CPU over a cloud transfer, one per row kind: a browser's processes' over
    its download (browser_cpu_pct), since the container's over the trial holds the browser's
    start (about half a CPU-second, most of a 1 s download); the container's for the others."""
    browser = (df["workload"] == "cloud") & df["browser_cpu_pct"].notna()
    return df["cpu_client_pct"].where(~browser, df["browser_cpu_pct"])


def prepare(df: pd.DataFrame, manifests: list[dict[str, Any]], mixed: bool) -> pd.DataFrame:
    """Add missing optional columns and the derived ones every later stage relies on."""
    df = df.reset_index(drop=True)
    for column, default in OPTIONAL_COLUMNS.items():
        if column not in df:
            df[column] = default
    df["failed"] = df["error"].map(is_failed)
    for flag in ("cpu_bound", "calib_forced"):
        df[flag] = truthy(df[flag])
    # A browser's rows form an analysis kind of their own (a page load, a playback session),
    # never pooled with the transfer tools': what marks them is what they measured.
    for kind, columns in derived_kinds().items():
        marked = np.logical_or.reduce([df[c].notna().to_numpy() for c in columns])
        df["workload"] = df["workload"].where(~marked, kind)
    rtt = rtt_reference(df, manifests)
    # Below 1 ms the "RTT" is the hosts' own stacks (an unshaped path): dividing by it gives
    # noise, so such trials have no RTT-normalised values (NaN) anywhere.
    df["rtt_ref_ms"] = rtt.where(rtt >= MIN_RTT_MS)
    df["object_bytes"] = object_size_bytes(df)
    df["transfer_cpu_pct"] = transfer_cpu_pct(df)
    add_loss_response(df, manifests)
    # Runs with different setups are kept apart (the run id becomes part of the facet)
    # rather than pooled; a second server is likewise never pooled with the first.
    # The runner's condition ids (c0, c1...) are opaque; its labels ("india loss_pct=1") read.
    facet = df["condition_label"].fillna(df["condition"]).astype(str)
    if df["server"].nunique(dropna=True) > 1:
        facet = facet + " · " + df["server"].astype(str)
    # The path and server a row ran on, whatever measured it: where a browser's page load
    # meets the perf tools' download of the same page.
    df["path_facet"] = facet
    # Nor is a second browser: Chromium's and Firefox's page loads are two stacks (QUIC, TLS
    # and their own loading), compared with each other by protocol, never pooled.
    loads = df["workload"] == PAGELOAD
    if "tool" in df and df.loc[loads, "tool"].nunique(dropna=True) > 1:
        facet = facet.where(~loads, facet + " · " + df["tool"].astype(str))
    # Nor is a browser's cloud download with a perf tool's of the same protocol: the browser's
    # stack (and its CPU) is what such a run compares.
    if "browser" in df and "tool" in df:
        downloads = (df["workload"] == "cloud") & df["browser"].notna()
        facet = facet.where(~downloads, facet + " · " + df["tool"].astype(str))
    if mixed:
        facet = df["run_id"].astype(str) + " · " + facet
        df["path_facet"] = df["run_id"].astype(str) + " · " + df["path_facet"]
    df["facet"] = facet
    return df


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The runs' rows in one frame, a column's type from the runs that have values in it (a
    video run has no throughput; pandas would stop ignoring such empty columns, and warns)."""
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    kept = [f.dropna(axis=1, how="all") for f in frames]
    return pd.concat(kept, ignore_index=True).reindex(columns=columns)


def load_runs(runs: Iterable[str | Path]) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """All rows of the given runs (ids or paths) and their manifests.

    df.attrs["notes"] lists recoverable problems (fallbacks, torn lines) and
    df.attrs["manifest_differences"] how the runs' setups differ (empty if they don't).
    """
    runs = list(dict.fromkeys(str(r) for r in runs))
    if not runs:
        raise AnalysisError("no run given (available runs: " f"{', '.join(available_runs()) or 'none'})")
    notes: list[str] = []
    frames, manifests = [], []
    for run in runs:
        rows, manifest = load_run(run, notes)
        frames.append(rows)
        manifests.append(manifest)
    differences = manifest_differences(manifests) if len(manifests) > 1 else []
    df = prepare(_concat(frames), manifests, mixed=bool(differences))
    df.attrs["notes"] = notes
    df.attrs["manifest_differences"] = differences
    return df, manifests
