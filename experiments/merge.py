"""`quicbed merge RUN...`: shard result directories (`quicbed run FILE --shard I/N`) into one
run, as if one machine had run them all.

Refused, with the reason: directories that are not shards, shards of another experiment text,
seed or code version (git commit), shards of different counts, and the same shard twice. A
missing shard, or a shard with trials still to run, is allowed and said: the merged run can be
finished with `quicbed run FILE --resume MERGED`, on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quicbed.errors import InputError

from .runner import decisions_of
from .schema import parse_experiment
from .shard import units
from .store import RunStore, load_history, load_rows, read_manifest, write_parquet

# What must be equal in every shard: the experiment (its text), the seed, the code version.
SAME = {
    "experiment text": ("file_sha256",),
    "seed": ("seed",),
    "matrix": ("matrix_hash",),
    "quick": ("quick",),
    "code version": ("git", "commit"),
}


class MergeError(InputError):
    pass


@dataclass
class Merged:
    run_dir: Path
    trials: int
    missing_shards: list[int]
    trials_to_run: int


def _field(manifest: dict[str, Any], keys: tuple[str, ...]) -> Any:
    value: Any = manifest
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def check_shards(manifests: list[dict[str, Any]]) -> list[str]:
    """Why these runs cannot be merged (empty: they can)."""
    problems = []
    plain = [m["run_id"] for m in manifests if not m.get("shard")]
    if plain:
        problems.append(f"not a shard (run without --shard): {', '.join(plain)}")
        return problems
    for what, keys in SAME.items():
        values = {str(_field(m, keys)) for m in manifests}
        if len(values) > 1:
            problems.append(
                f"different {what}: "
                + "; ".join(f"{m['run_id']}={str(_field(m, keys))[:16]}" for m in manifests)
            )
    counts = {m["shard"]["count"] for m in manifests}
    if len(counts) > 1:
        problems.append(f"shards of different splits (N = {', '.join(map(str, sorted(counts)))})")
    whole = [m["run_id"] for m in manifests if "units" not in m["shard"]]
    if whole and len(whole) < len(manifests):
        # Same commit is checked too; this says why, for shards from before units.
        problems.append(f"shards of whole conditions (made before units) and of units: {', '.join(whole)}")
    seen: dict[int, str] = {}
    for m in manifests:
        index = m["shard"]["index"]
        if index in seen:
            problems.append(f"shard {index} twice ({seen[index]} and {m['run_id']})")
        seen[index] = m["run_id"]
    return problems


def merge_runs(run_dirs: list[Path], out_dir: Path) -> Merged:
    if not run_dirs:
        raise MergeError("no shard given")
    manifests = [read_manifest(d) for d in run_dirs]
    problems = check_shards(manifests)
    if problems:
        raise MergeError("cannot merge: " + "; ".join(problems))
    count = manifests[0]["shard"]["count"]
    missing = sorted(set(range(1, count + 1)) - {m["shard"]["index"] for m in manifests})
    merged = _merged_manifest(out_dir.name, manifests, missing)
    with RunStore(out_dir).open(create=True) as store:
        store.write_manifest(merged)
        for run_dir, manifest in zip(run_dirs, manifests, strict=True):
            for row in load_history(run_dir)[0]:  # every attempt: retries stay superseded
                if _owns(manifest["shard"], row):
                    store.append({**row, "run_id": out_dir.name})
    current = load_rows(out_dir)[0]
    write_parquet(current, out_dir / "rows.parquet")
    if merged.get("decisions"):  # each shard decided its own cells; the whole run decides all
        merged["decisions"] = _decisions(merged, current)
        RunStore(out_dir).write_manifest(merged)
    done = sum(r.get("error") is None for r in current)
    return Merged(out_dir, len(current), missing, merged["trials_total"] - done)


def _decisions(manifest: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decide lines over every shard's rows, from the experiment text the shards ran."""
    text, file = str(manifest["experiment_text"]), str(manifest.get("file") or "merged")
    exp = parse_experiment(text, file, quick=bool(manifest.get("quick")))
    return decisions_of(exp, rows, units(exp))


def _owns(shard: dict[str, Any], row: dict[str, Any]) -> bool:
    """The row is one of the shard's own: its unit's (a shard made before units: its
    condition's)."""
    if "units" in shard:
        return row.get("unit") in set(shard["units"])
    return row.get("condition") in set(shard["conditions"])


def _merged_manifest(run_id: str, manifests: list[dict[str, Any]], missing: list[int]) -> dict[str, Any]:
    first = sorted(manifests, key=lambda m: m["shard"]["index"])[0]
    merged = {k: v for k, v in first.items() if k != "shard"}
    conditions = {cid: dict(entry) for cid, entry in first["conditions"].items()}
    units: dict[str, Any] = {}
    sessions, statuses = [], set()
    for m in manifests:
        shard = m["shard"]
        statuses.add(m.get("status"))
        ran_in = {
            "run_id": m["run_id"],
            "shard": f"{shard['index']}/{shard['count']}",
            "host": m.get("host"),
            "executor": m.get("executor"),
        }
        # Which shard, host and executor ran each unit and condition, beside its calibration
        # (a condition split over shards keeps the calibration of one of its units; each
        # unit's own is in `units`).
        for uid in shard.get("units", []):
            units[uid] = {**m["units"][uid], "ran_in": ran_in}
        for cid in shard["conditions"]:
            mine = m["conditions"][cid]
            if cid not in conditions or mine.get("calibration") or not conditions[cid].get("ran_in"):
                conditions[cid] = {**mine, "ran_in": ran_in}
        sessions += [{**s, "run_id": m["run_id"]} for s in m.get("sessions", [])]
    merged.update(
        run_id=run_id,
        conditions=conditions,
        sessions=sessions,
        merged_from=[m["run_id"] for m in manifests],
        **({"units": units} if units else {}),
        missing_shards=missing,
        status="complete" if statuses == {"complete"} and not missing else "partial",
    )
    # The whole matrix: the trials of a missing shard count as still to run.
    merged["trials_total"] = first["shard"]["trials_all"]
    return merged
