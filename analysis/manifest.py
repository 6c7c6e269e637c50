"""Reading run manifests: how two runs' setups differ, and each condition's calibration.

The manifest's one schema is quicbed/runmanifest.py (`conditions: {id: {label, profile, link,
calibration: {rtt_ms, passed, forced, calibration: {backend, checks: [...]}}}}`); a
condition's whole calibration record is read through `runmanifest.calibration_record`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from quicbed import runmanifest

# Manifest fields that legitimately differ between runs of one setup (bookkeeping, what was
# run, when); every other field is setup (versions, kernel, backend, commit, TCP/QUIC settings).
PER_RUN_KEYS = {
    "run_id",
    "manifest_version",
    "calibration",
    "conditions",
    "seed",
    "started_at",
    "ended_at",
    "notes",
    "sessions",
    "status",
    "trials_total",
    "experiment",
    "experiment_text",
    "description",
    "file",
    "file_sha256",
    "matrix_hash",
    "quick",
    "order",
}
SHOWN_CHARS = 60


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def manifest_differences(manifests: list[dict[str, Any]]) -> list[str]:
    """Setup fields (dotted paths) on which the runs differ, one readable line each."""
    return [f"{key}: {per_run}" for key, per_run in _differing(manifests)]


def _differing(manifests: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(dotted key, "run=value; ...") of every setup field on which the runs differ."""
    flat = [flatten({k: v for k, v in m.items() if k not in PER_RUN_KEYS}) for m in manifests]
    keys = sorted(set().union(*flat)) if flat else []
    diffs = []
    for key in keys:
        values = [f.get(key, "(missing)") for f in flat]
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) > 1:
            per_run = "; ".join(
                f"{m.get('run_id', '?')}={short(v)}" for m, v in zip(manifests, values, strict=True)
            )
            diffs.append((key, per_run))
    return diffs


# The setup fields whose difference can change a number: the code and the pinned versions,
# the host, the link backend, what is captured (a capture costs time) and the images the
# trials ran in. The rest (descriptions, timings of the set-up, what other backends could
# do) is in the Run section's manifest table, not among the warnings.
MEASUREMENT_KEYS = (
    "versions.",
    "host.",
    "git.commit",
    "executor.link_backend",
    "executor.kernel",
    "executor.force",
    "executor.capture.kinds",
    "executor.client_image.id",
)
SERVER_IMAGE_KEY, CLIENT_IMAGE_KEY = "executor.server_images.", "executor.client_images."


def bears_on_measurement(key: str, servers: set[str]) -> bool:
    """Whether a manifest field can change what a run measured. Of an image, only its id does,
    and of a server's only for the servers the runs measured (a client's every run uses)."""
    for prefix in (SERVER_IMAGE_KEY, CLIENT_IMAGE_KEY):
        if key.startswith(prefix):
            name, _, field = key.removeprefix(prefix).rpartition(".")
            return field == "id" and (prefix == CLIENT_IMAGE_KEY or name in servers)
    # "versions." names a group; "executor.link_backend" one field (not link_backends_here)
    return any(key.startswith(k) if k.endswith(".") else key == k for k in MEASUREMENT_KEYS)


def verdict_differences(manifests: list[dict[str, Any]], servers: set[str]) -> list[str]:
    """The differences a reader must see before trusting a comparison: between runs of one
    experiment, once per field that bears on a measurement. Runs of different experiments
    are expected to differ, and are analysed apart: nothing is said of them here."""
    by_experiment: dict[str, list[dict[str, Any]]] = {}
    for m in manifests:
        by_experiment.setdefault(str(m.get("experiment", "?")), []).append(m)
    out = []
    for experiment, runs in by_experiment.items():
        if len(runs) > 1:
            out += [
                f"Runs of {experiment} differ in {key} (analysed apart, not pooled): {per_run}"
                for key, per_run in _differing(runs)
                if bears_on_measurement(key, servers)
            ]
    return out


def check_values(checks: list[dict[str, Any]] | None) -> dict[str, float | None]:
    """Measured values of the runner's calibration checks, keyed metric[_direction]."""
    out = {}
    for c in checks or []:
        direction = c.get("direction")
        key = c.get("metric", "?") + ("" if direction in (None, "both") else f"_{direction}")
        out[key] = c.get("measured")
    return out


def host_kind(host: dict[str, Any] | None) -> str:
    """What decides whether two hosts' timings compare: CPU, kernel and images (not the name)."""
    if not host:
        return "unrecorded"
    images = ", ".join(
        f"{k} {str(v).removeprefix('sha256:')[:12]}" for k, v in sorted((host.get("images") or {}).items())
    )
    kind = (
        f"{host.get('cpu_model', '?')} x{host.get('cpus', '?')} {host.get('machine', '?')}, "
        f"kernel {host.get('kernel', '?')}"
    )
    return kind + (f", images {images}" if images else "")


def mixed_hosts(entries: list[dict[str, Any]]) -> list[str]:
    """A run whose conditions ran on different kinds of host (a Ray cluster, merged shards):
    its comparisons across conditions compare hosts too."""
    runs: dict[str, dict[str, list[str]]] = {}
    for e in entries:
        if e["calibrated"]:
            kind = e.get("host_kind", "unrecorded")
            runs.setdefault(e["run"], {}).setdefault(kind, []).append(str(e["label"]))
    return [
        f"Run {run}: its conditions ran on {len(kinds)} kinds of host, so comparing "
        "conditions across them also compares hosts: "
        + "; ".join(f"{', '.join(labels)} on {kind}" for kind, labels in kinds.items())
        for run, kinds in runs.items()
        if len(kinds) > 1
    ]


# The calibration checks two units of one condition must agree on: (metric, direction).
ALIKE_CHECKS = (
    ("rtt_median_ms", "both"),
    ("goodput_mbit", "down"),
    ("goodput_mbit", "up"),
    ("loss_pct", "down"),
    ("loss_pct", "up"),
)
_NUMBER = r"(-?[0-9.]+)"
Checks = dict[tuple[Any, Any], dict[str, Any]]  # (metric, direction) -> the check


def half_band(check: dict[str, Any]) -> float | None:
    """Half the width of a calibration check's tolerance band, in the check's unit: `±0.81 ms`,
    `94%..96.1% of rate` (of the configured rate), `99.9% CI [0.712, 1.311]`."""
    text = str(check.get("tolerance") or "")
    if m := re.fullmatch(rf"±{_NUMBER} ms", text):
        return float(m[1])
    if m := re.fullmatch(rf"{_NUMBER}%\.\.{_NUMBER}% of rate", text):
        return (float(m[2]) - float(m[1])) / 200 * float(check.get("configured") or 0)
    if m := re.search(rf"\[{_NUMBER}, {_NUMBER}\]", text):
        return (float(m[2]) - float(m[1])) / 2
    return None


def units_unlike(manifests: list[dict[str, Any]]) -> list[str]:
    """Conditions whose units (experiments/shard.py: parts of a condition, each on a path of its
    own) calibrated unlike each other: a check's measured values further apart than its
    tolerance (half its band: the RTT's ±, the goodput's band, the loss's interval), so
    comparing their servers or objects also compares paths. One line per condition."""
    out = []
    for m in manifests:
        by_condition: dict[str, list[tuple[str, Checks]]] = {}
        for uid, unit in (m.get("units") or {}).items():
            record = runmanifest.calibration_record(unit.get("calibration"))
            checks = {(c.get("metric"), c.get("direction")): c for c in record.get("checks") or []}
            if checks:
                by_condition.setdefault(unit.get("condition", "?"), []).append((uid, checks))
        for cid, held in sorted(by_condition.items()):
            apart = [line for key in ALIKE_CHECKS if (line := _apart(key, held))]
            if apart:
                label = (m.get("conditions") or {}).get(cid, {}).get("label", cid)
                out.append(
                    f"Run {m.get('run_id', '?')}: the units of {cid} ({label}) calibrated unlike each "
                    f"other, so comparing their servers or objects also compares paths: {'; '.join(apart)}"
                )
    return out


def _apart(key: tuple[str, str], held: list[tuple[str, Checks]]) -> str | None:
    values = [(uid, checks[key]) for uid, checks in held if key in checks]
    measured: list[tuple[str, float]] = [
        (uid, float(c["measured"]))
        for uid, c in values
        if isinstance(c.get("measured"), int | float) and not math.isnan(c["measured"])
    ]
    bands = [b for _, c in values if (b := half_band(c)) is not None]
    if len(measured) < 2 or not bands:
        return None
    low, high = min(measured, key=lambda x: x[1]), max(measured, key=lambda x: x[1])
    allowed = max(bands)
    if high[1] - low[1] <= allowed:
        return None
    metric, direction = key
    where = "" if direction == "both" else f" {direction}"
    return (
        f"{metric}{where} {low[1]:g} ({low[0]}) vs {high[1]:g} ({high[0]}), "
        f"{high[1] - low[1]:.3g} apart, tolerance {allowed:.3g}"
    )


def runner_entry(
    run_id: str, cid: str, cond: dict[str, Any], host: dict[str, Any] | None = None
) -> dict[str, Any]:
    link, cal = cond.get("link") or {}, cond.get("calibration") or {}
    full = runmanifest.calibration_record(cal)  # checks and backend: one level down
    down, up = link.get("down") or {}, link.get("up") or {}
    measured = check_values(full.get("checks"))
    failed = [c for c in full.get("checks") or [] if not c.get("passed", True)]
    return {
        "run": run_id,
        "condition": cid,
        "label": cond.get("label", cid),
        "profile": cond.get("profile", ""),
        "calibrated": bool(cal),
        "host_kind": host_kind(cond.get("ran_on") or host),
        "rtt_ms": link.get("rtt_ms"),
        "rtt_min_ms": cal.get("rtt_ms"),
        "rtt_median_ms": measured.get("rtt_median_ms"),
        "rate_down_mbit": down.get("rate_mbit"),
        "goodput_down_mbit": measured.get("goodput_mbit_down"),
        "rate_up_mbit": up.get("rate_mbit"),
        "goodput_up_mbit": measured.get("goodput_mbit_up"),
        "loss_pct": down.get("loss_pct"),
        "loss_down_pct": measured.get("loss_pct_down"),
        "loss_up_pct": measured.get("loss_pct_up"),
        "passed": cal.get("passed"),
        "forced": cal.get("forced", False),
        "link_backend": full.get("backend"),
        "backend_reason": full.get("backend_reason"),
        "delayline_priority": (full.get("link") or {}).get("delayline_priority"),
        "uml_priority": (full.get("link") or {}).get("uml_priority"),
        # The host's contention while each calibration attempt measured (topology/proven.py).
        "host_load": [x for x in full.get("host_load") or [] if isinstance(x, dict)],
        "failed_checks": [
            f"{c.get('metric')} {c.get('direction')}: {c.get('measured')} "
            f"(configured {c.get('configured')}, {c.get('tolerance', '')})"
            for c in failed
        ],
    }


def calibration_entries(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat record per run and condition: configured vs measured, passed, forced."""
    entries = []
    for m in manifests:
        run_id = str(m.get("run_id"))
        entries += [
            runner_entry(run_id, cid, cond, m.get("host"))
            for cid, cond in (m.get("conditions") or {}).items()
        ]
    return entries


def calibrated_rtt(manifests: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(run_id, condition) -> the calibrated (minimum) RTT, where the manifest has one."""
    return {
        (e["run"], e["condition"]): float(e["rtt_min_ms"])
        for e in calibration_entries(manifests)
        if e.get("rtt_min_ms") is not None
    }
