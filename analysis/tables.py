"""Tables of the report, as DataFrames of display strings (rendered to HTML and Markdown)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from . import loss_response as lr
from .cpu_bound import CPU_BOUND_SHARE_MAX  # above it, a group's loads measure the host's CPU
from .model import (
    PAGELOAD,
    Metric,
    listed,
    ordered_protocols,
    protocol_label,
    recorded_page_loads,
    size_label,
)
from .stats import ALPHA, MIN_N, Comparison, Estimate, compare, median_ci, median_diff_ci

BASELINES = ("tls1.2", "tls1.3")
NUMERIC_KEYS = {"object_bytes", "loss_pct"}


def fmt(value: object) -> str:
    """Three significant digits, without scientific notation for typical magnitudes."""
    try:
        value = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "–" if value is None else str(value)
    if not np.isfinite(value):
        return "–"
    magnitude = abs(value)
    digits = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2
    return f"{value:,.{digits}f}"


def fmt_p(p: float) -> str:
    if not np.isfinite(p):
        return "–"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def fmt_est(e: Estimate) -> str:
    if e.n == 0:
        return "–"
    ci = f" [{fmt(e.lo)}, {fmt(e.hi)}]" if np.isfinite(e.lo) else ""
    return f"{fmt(e.value)}{ci}"


def group_frames(df: pd.DataFrame, keys: Sequence[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """(key values, rows) in order of first appearance, protocols in canonical order."""
    if df.empty:
        return []
    rank: dict[str, dict[Any, int] | None] = {
        key: (
            {p: i for i, p in enumerate(ordered_protocols(df[key]))}
            if key == "protocol"
            else None
            if key in NUMERIC_KEYS
            else {v: i for i, v in enumerate(dict.fromkeys(df[key]))}
        )
        for key in keys
    }
    groups = [
        (k if isinstance(k, tuple) else (k,), rows)
        for k, rows in df.groupby(list(keys), sort=False, dropna=False)
    ]

    # Sizes and loss rates sort by value, protocols canonically, the rest as they came.
    def order(key: str, value: Any) -> Any:
        ranks = rank[key]
        return value if ranks is None else ranks.get(value, 99)

    groups.sort(key=lambda g: tuple(order(k, v) for k, v in zip(keys, g[0], strict=True)))
    return groups


def key_columns(keys: Sequence[str], values: tuple) -> dict[str, str]:
    names = {
        "facet": "condition",
        "protocol": "protocol",
        "object_bytes": "file size",
        "loss_pct": "loss (%)",
    }
    shown: dict[str, Callable[[Any], str]] = {
        "protocol": protocol_label,
        "object_bytes": size_label,
        "loss_pct": lambda v: f"{v:g}",
    }
    return {names.get(k, k): shown.get(k, str)(v) for k, v in zip(keys, values, strict=True)}


def metric_cells(rows: pd.DataFrame, metric: Metric) -> dict[str, str]:
    values = metric.rows(rows)
    est = median_ci(values[metric.column])
    cells = {f"{metric.label} n": str(est.n), f"{metric.label} median ({metric.unit}) [95% CI]": fmt_est(est)}
    if metric.per_rtt:
        per_rtt = median_ci(values[metric.column] / values["rtt_ref_ms"])
        cells[f"{metric.label} (RTTs)"] = fmt_est(per_rtt)
    return cells


def summary_table(df: pd.DataFrame, keys: Sequence[str], metrics: Sequence[Metric]) -> pd.DataFrame:
    """One line per group: n, median with CI (and in RTTs) for every metric."""
    lines = []
    for values, rows in group_frames(df, keys):
        cells = key_columns(keys, values)
        for metric in metrics:
            cells.update(metric_cells(rows, metric))
        lines.append(cells)
    return pd.DataFrame(lines)


def protocol_values(rows: pd.DataFrame, metric: Metric, protocol: str) -> pd.Series:
    values = metric.rows(rows)
    return values.loc[values["protocol"] == protocol, metric.column]


def compare_protocols(
    rows: pd.DataFrame, metric: Metric, a: str = "quic", b: str = "tls1.2"
) -> Comparison | None:
    xa, xb = protocol_values(rows, metric, a), protocol_values(rows, metric, b)
    if xa.empty or xb.empty:
        return None
    return compare(xa, xb)


# A trial's place in the schedule: with interleaved runs, one key's QUIC and TLS trials ran
# back to back (Kakhki et al. compare such pairs).
PAIR_KEY = ["run_id", "condition", "server", "object", "repetition"]


def back_to_back_pairs(rows: pd.DataFrame, metric: Metric, a: str, b: str) -> int:
    values = metric.rows(rows)
    keys = [
        set(map(tuple, values.loc[values["protocol"] == p, PAIR_KEY].astype(str).to_numpy())) for p in (a, b)
    ]
    return len(keys[0] & keys[1])


def comparison_cells(c: Comparison, unit: str, pairs: int) -> dict[str, str]:
    # Units go in their own column so metrics with different units share one table.
    verdict = "yes" if c.significant else ("n<10" if min(c.a.n, c.b.n) < MIN_N else "no")
    return {
        "unit": unit,
        "n QUIC / other (pairs)": f"{c.a.n} / {c.b.n} ({pairs})",
        "median QUIC": fmt(c.a.value),
        "median other": fmt(c.b.value),
        "Δ median [95% CI]": fmt_est(c.diff),
        "Δ (%)": fmt(100 * c.relative),
        "Welch p": fmt_p(c.welch_p),
        "MWU p": fmt_p(c.mwu_p),
        f"significant (p<{ALPHA:g})": verdict,
    }


def comparison_table(
    df: pd.DataFrame, keys: Sequence[str], metrics: Sequence[Metric], baselines: Sequence[str] = BASELINES
) -> pd.DataFrame:
    """QUIC against each TCP baseline, per group and metric: Δ = QUIC − baseline."""
    lines = []
    for values, rows in group_frames(df, keys):
        for metric in metrics:
            for baseline in baselines:
                c = compare_protocols(rows, metric, "quic", baseline)
                if c is None:
                    continue
                lines.append(
                    {
                        **key_columns(keys, values),
                        "metric": metric.label,
                        "QUIC vs": protocol_label(baseline),
                        **comparison_cells(
                            c, metric.unit, back_to_back_pairs(rows, metric, "quic", baseline)
                        ),
                    }
                )
    return pd.DataFrame(lines)


def lowest_quality(values: pd.Series) -> str:
    """The lowest resolution seen ('144p' < '240p' ...), by its number of lines."""
    heights = {
        str(v): float(str(v).rstrip("p"))
        for v in values.dropna()
        if str(v).rstrip("p").replace(".", "", 1).isdigit()
    }
    return min(heights, key=lambda k: heights[k]) if heights else "–"


STREAMING_KEYS = ["loss_pct", "server", "protocol"]


def streaming_table(df: pd.DataFrame) -> pd.DataFrame:
    """Stalls and quality switches against loss, per server and protocol: each server's QUIC
    is its own stack (its own congestion control), so servers are never pooled. df: the
    Streaming section's rows."""
    lines = []
    for values, group in group_frames(df, STREAMING_KEYS):
        stalls = group["stall_durations_ms"].map(listed)
        durations = [d for ds in stalls for d in ds]
        verdicts = group["loss_response"].dropna().value_counts() if "loss_response" in group else {}
        lines.append(
            {
                **key_columns(STREAMING_KEYS, values),
                "sessions n": str(len(group)),
                "startup delay median (ms) [95% CI]": fmt_est(median_ci(group["startup_delay_ms"])),
                "stalls per session (mean)": fmt(group["stall_count"].mean()),
                "stalls n": str(len(durations)),
                "stall duration median (ms) [95% CI]": fmt_est(median_ci(durations)),
                "stall time per session (mean, ms)": fmt(stalls.map(lambda ds: float(np.sum(ds))).mean()),
                "quality switches (median)": fmt(group["quality_switches"].median()),
                "lowest quality": lowest_quality(group["lowest_quality"]),
                "congestion response (sessions)": ", ".join(f"{n} {v}" for v, n in verdicts.items()) or "–",
            }
        )
    return pd.DataFrame(lines)


def cpu_bound_share(rows: pd.DataFrame) -> float:
    return float(rows["cpu_bound"].astype(bool).mean()) if len(rows) else 0.0


def cpu_bound_groups(df: pd.DataFrame) -> list[str]:
    """The page-load groups (condition, page, protocol) whose CPU-bound share is over
    CPU_BOUND_SHARE_MAX, as 'facet / object / protocol (share)'."""
    pages = df[df["workload"] == PAGELOAD]
    out = []
    for values, group in group_frames(pages, ["facet", "object", "protocol"]):
        share = cpu_bound_share(group)
        if share > CPU_BOUND_SHARE_MAX:
            out.append(f"{' / '.join(str(v) for v in values)} ({share:.0%})")
    return out


def pageload_vs_download_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per condition, page and protocol: the browser's page load beside the perf tools'
    download of the same page's HTML (their rows in the same condition). df: the page-load
    section's rows and those beside them (the web kind's own)."""
    pages = df[df["workload"] == PAGELOAD]
    perf = df[df["workload"] != PAGELOAD]
    lines = []
    for values, group in group_frames(pages, ["facet", "object", "protocol"]):
        _, obj, protocol = values
        path = group["path_facet"].iloc[0]
        same = perf[(perf["path_facet"] == path) & (perf["object"] == obj) & (perf["protocol"] == protocol)]
        load, download = median_ci(group["page_load_time_ms"]), median_ci(same["download_time_ms"])
        lines.append(
            {
                **key_columns(["facet", "object", "protocol"], values),
                "page load median (ms) [95% CI]": fmt_est(load),
                "loads n": str(load.n),
                "perf-tool download median (ms) [95% CI]": fmt_est(download),
                "downloads n": str(download.n),
                "page load ÷ download": fmt(load.value / download.value) if download.n else "–",
                "connections (median)": fmt(pd.to_numeric(group["connections"], errors="coerce").median()),
                # browser_perf's flag: a CPU, not the path, limited the load (README "CPU-bound")
                "CPU-bound share": f"{cpu_bound_share(group):.0%}",
            }
        )
    return pd.DataFrame(lines)


# The prediction's model. QUIC's handshake costs one RTT, TLS 1.3 over TCP two (TCP's, then
# TLS's), so QUIC saves one RTT per connection setup on a load's critical path. Setups opened in
# parallel overlap, so the saving is per setup in sequence, not per origin or per connection:
# predicted gain = critical-path setups (the loads' `critical_connections`, from Resource
# Timing: clients/browser/critical_path.py) × RTT. It leaves out all else that differs between
# the stacks (loss recovery, congestion windows, the browsers' own CPU): the measured gain keeps it.
CRITICAL = "critical_connections"


def pageload_by_origins_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per browser (facet) and recorded page, fewest origins first: its origins, connections,
    connection setups on the critical path, QUIC's gain over TLS 1.3 as the model predicts it
    and as measured (TLS 1.3's median page load − QUIC's, with its 95 % CI), whether the
    prediction lies in that CI, and both loads. Rows: recorded pages' page loads
    (`page_origins`, workloads/recorded.py)."""
    pages = recorded_page_loads(df)
    lines = []
    for (facet,), rows in group_frames(pages, ["facet"]):
        by_page = [group for _, group in group_frames(rows, ["object"])]
        for group in sorted(by_page, key=lambda g: (int(g["page_origins"].iloc[0]), g["object"].iloc[0])):
            lines.append({"condition": str(facet), **_recorded_page_line(group)})
    return pd.DataFrame(lines)


def _recorded_page_line(group: pd.DataFrame) -> dict[str, str]:
    """One recorded page's line of pageload_by_origins_table: `group` is its loads by one browser."""
    tls, quic = (group[group["protocol"] == p]["page_load_time_ms"] for p in ("tls1.3", "quic"))
    gain = median_diff_ci(tls, quic)
    rtt, rtt_source = page_rtt(group)
    critical = _median(group, CRITICAL)
    predicted = critical * rtt
    return {
        "page": str(group["object"].iloc[0]),
        "origins": str(int(group["page_origins"].iloc[0])),
        "connections (median)": fmt(_median(group, "connections")),
        "critical-path connections (median)": _critical_cell(group),
        "RTT (ms)": f"{fmt(rtt)} {rtt_source}" if np.isfinite(rtt) else "–",
        "predicted gain (ms)": fmt(predicted),
        "measured gain (ms) [95% CI]": fmt_est(gain),
        "prediction in the CI": prediction_verdict(predicted, gain),
        "QUIC load (ms) [95% CI]": fmt_est(median_ci(quic)),
        "TLS 1.3 load (ms) [95% CI]": fmt_est(median_ci(tls)),
        "CPU-bound share": f"{cpu_bound_share(group):.0%}",
    }


def _median(rows: pd.DataFrame, column: str) -> float:
    """The median of a numeric column over the rows; NaN where no row has it (older runs)."""
    if column not in rows:
        return float("nan")
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    return float(values.median()) if len(values) else float("nan")


def _critical_cell(group: pd.DataFrame) -> str:
    """The median critical-path setups over both protocols' loads, and each protocol's where
    they differ (a browser may chain its connections differently over QUIC)."""
    pooled = fmt(_median(group, CRITICAL))
    each = {p: _median(group[group["protocol"] == p], CRITICAL) for p in ("quic", "tls1.3")}
    if all(np.isfinite(v) for v in each.values()) and each["quic"] != each["tls1.3"]:
        return f"{pooled} (QUIC {fmt(each['quic'])}, TLS 1.3 {fmt(each['tls1.3'])})"
    return pooled


def page_rtt(rows: pd.DataFrame) -> tuple[float, str]:
    """The RTT the prediction multiplies: the median calibrated RTT of the loads' path
    (`calib_rtt_ms`, measured before the trials), else the configured one (`rtt_ms`), and
    which of the two it is."""
    for column, source in (("calib_rtt_ms", "calibrated"), ("rtt_ms", "configured")):
        value = _median(rows, column)
        if np.isfinite(value):
            return value, source
    return float("nan"), ""


def prediction_verdict(predicted: float, gain: Estimate) -> str:
    """Whether the predicted gain lies in the measured gain's 95 % CI, or on which side of it
    the measurement fell."""
    if not (np.isfinite(predicted) and np.isfinite(gain.lo) and np.isfinite(gain.hi)):
        return "–"
    if gain.lo <= predicted <= gain.hi:
        return "yes"
    return "no: measured more" if gain.lo > predicted else "no: measured less"


def failures_table(df: pd.DataFrame) -> pd.DataFrame:
    failed = df[df["failed"]]
    if failed.empty:
        return pd.DataFrame()
    counts = failed.groupby(["facet", "protocol", "workload", "error"], sort=False).size()
    return pd.DataFrame(
        [
            {**key_columns(["facet", "protocol"], k[:2]), "workload": k[2], "error": k[3], "trials": str(n)}
            for k, n in counts.items()
        ]
    )


def flag_table(df: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per condition and protocol: how many trials carry a boolean flag (of how many)."""
    flagged = df[column]
    if not flagged.any():
        return pd.DataFrame()
    lines = []
    for values, rows in group_frames(df, ["facet", "protocol"]):
        count = int(flagged.loc[rows.index].sum())
        if count:
            lines.append(
                {**key_columns(["facet", "protocol"], values), "flagged trials": f"{count} of {len(rows)}"}
            )
    return pd.DataFrame(lines)


# --- congestion response (analysis/loss_response.py) ----------------------------------------
CONGESTION_KEYS = ["run_id", "condition", "server", "client", "workload", "object"]


def stacks(rows: pd.DataFrame) -> pd.Series:
    """Each row's sender: the server's QUIC stack or the kernel's TCP and its congestion control."""
    cc = rows["param_server.tcp_cc"] if "param_server.tcp_cc" in rows else pd.Series(None, index=rows.index)
    return pd.Series(
        [
            lr.stack_label(str(s), str(p), c)
            for s, p, c in zip(rows["server"], rows["protocol"], cc, strict=True)
        ],
        index=rows.index,
        dtype=object,
    )


@dataclass(frozen=True)
class CongestionGroup:
    """One condition × server × client × workload × object under loss: its trials' median
    goodput and payload, the path's bounds and the group's verdict."""

    keys: tuple
    condition: str
    stack: str
    path: lr.PathLoss
    n: int
    goodput: float
    payload: float
    verdict: str
    trial_verdicts: dict[str, int]

    @property
    def ratio(self) -> float:
        return self.goodput / self.path.bound_mbit


def congestion_groups(ok: pd.DataFrame, paths: pd.Series) -> list[CongestionGroup]:
    """The successful rows under loss that have a goodput, grouped (CONGESTION_KEYS)."""
    goodput = pd.Series([lr.goodput_mbit(r) for r in ok.to_dict("records")], index=ok.index, dtype=float)
    lossy = paths.reindex(ok.index).map(lambda p: p is not None and p.loss_pct > 0).astype(bool)
    rows = ok[lossy & goodput.notna()]
    if rows.empty:  # (assigning a Series to an empty frame would adopt the Series' index)
        return []
    rows = rows.assign(goodput=goodput[rows.index], stack=stacks(rows))
    groups = []
    for keys, group in group_frames(rows, CONGESTION_KEYS):
        path = paths[group.index[0]]
        rate, payload = float(group["goodput"].median()), float(group["bytes"].astype(float).median())
        label = group["condition_label"].dropna()
        groups.append(
            CongestionGroup(
                keys=keys,
                condition=str(label.iloc[0]) if len(label) else str(keys[1]),
                stack=str(group["stack"].iloc[0]),
                path=path,
                n=len(group),
                goodput=rate,
                payload=payload,
                verdict=lr.verdict(rate, payload, path, lr.is_demand_limited(group.iloc[0].to_dict())),
                trial_verdicts=group["loss_response"].dropna().value_counts().to_dict(),
            )
        )
    return groups


def congestion_table(groups: list[CongestionGroup], runs: int = 1) -> pd.DataFrame:
    """Per group: median goodput, the two bounds, goodput ÷ Mathis's, the verdict."""
    lines = []
    for g in groups:
        run, _, server, client, workload, obj = g.keys
        lines.append(
            {
                **({"run": str(run)} if runs > 1 else {}),
                "condition": g.condition,
                "loss (%)": f"{g.path.loss_pct:.3g} ({g.path.basis})",
                "RTT (ms)": fmt(g.path.rtt_ms),
                "stack": g.stack,
                "server": str(server),
                "client": str(client),
                "workload": str(workload),
                "object": str(obj),
                "n": str(g.n),
                "goodput median (Mbit/s)": fmt(g.goodput),
                "bound: Mathis (Mbit/s)": fmt(g.path.bound_mbit),
                "bound: Padhye (Mbit/s)": fmt(g.path.padhye_mbit),
                "goodput ÷ Mathis": fmt(g.ratio),
                "verdict": g.verdict,
                "trials": ", ".join(f"{n} {v}" for v, n in g.trial_verdicts.items()) or "–",
            }
        )
    return pd.DataFrame(lines)


def flagged_stacks(ok: pd.DataFrame) -> list[str]:
    """'nginx's QUIC (12 of 40 trials)': the stacks of the rows flagged not loss-responsive."""
    if "loss_response" not in ok or ok.empty:
        return []
    flagged = ok[ok["loss_response"] == lr.NOT_RESPONSIVE]
    if flagged.empty:
        return []
    counts = stacks(flagged).value_counts()
    return [f"{stack} ({n} of {len(ok)} trials)" for stack, n in counts.items()]


# Cross traffic (experiments/cross.py): who got the shared bottleneck, per group of trials.
FAIRNESS_KEYS = ["profile", "server", "protocol"]


def cross_flow_names(rows: pd.DataFrame) -> str:
    """The competing flows of these rows, as the experiment declared them (x0 tcp cubic ...)."""

    seen: dict[str, None] = {}
    for text in rows["cross_flows"].dropna():
        for flow in json.loads(text):
            cc = flow.get("sender_cc") or flow.get("cc") or "its server's cc"
            what = f"web {flow.get('rate_per_s')}/s" if flow.get("kind") == "web" else flow["direction"]
            seen[f"{flow['flow']} {flow['protocol']} {cc} {what}"] = None
    return ", ".join(seen) or "–"


def fairness_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per profile, server and protocol: the trial's share of the down bytes at the client
    over its transfer (0.5 beside one flow is fair), Jain's index, and both rates, medians
    with 95 % CIs."""
    if "trial_share" not in df.columns:
        return pd.DataFrame()
    rows = df[df["trial_share"].notna()]
    keys = [k for k in FAIRNESS_KEYS if k in rows.columns]
    lines = []
    for values, group in group_frames(rows, keys):
        cells = key_columns(keys, values)
        cells["against"] = cross_flow_names(group)
        cells["n"] = str(len(group))
        for column, title in (
            ("trial_share", "trial's share"),
            ("jain_index", "Jain's index"),
            ("trial_mbit", "trial Mbit/s"),
            ("cross_mbit", "cross Mbit/s"),
        ):
            cells[title] = fmt_est(median_ci(group[column].astype(float)))
        lines.append(cells)
    return pd.DataFrame(lines)
