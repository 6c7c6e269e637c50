"""Figures of a run, mirroring the paper's where the run has the data (PNG and SVG).

Every builder takes the successful rows and returns the figures it drew; a figure whose
data the run lacks is skipped (an empty list), never drawn empty.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: reports are built on servers and in CI
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from quicbed import limits
from quicbed.workloads import ReportSection, report_sections, transfer_kinds

from . import loss_response as lr
from .model import (
    CLOUD_CPU,
    CLOUD_THROUGHPUT,
    PAGELOAD,
    STALL_TIME,
    STARTUP,
    SWITCHES,
    VIDEO_CONNECTION,
    VIDEO_STALL,
    VIDEO_THROUGHPUT,
    Metric,
    listed,
    ordered_protocols,
    protocol_color,
    protocol_label,
    recorded_page_loads,
    size_label,
)
from .stats import median_ci
from .tables import CongestionGroup

RTT_GUIDES = (1, 2, 3)
X_SPAN = "The x axis spans about the 1st to the 99th percentile."
MAX_COLUMNS = 3
CPU_OBJECT = "200MB"  # the paper compares CPU on a 200 MB download


@dataclass(frozen=True)
class Figure:
    name: str
    section: str  # which report section shows it: timing, cloud, video, streaming
    title: str
    caption: str
    png: Path
    svg: Path


# panel title -> protocol -> values
Panels = dict[str, dict[str, np.ndarray]]


def ordered_unique(values: pd.Series) -> list:
    return list(dict.fromkeys(values.dropna()))


def panel_grid(
    count: int, columns: int = MAX_COLUMNS, sharex: bool = False
) -> tuple[plt.Figure, list[plt.Axes]]:
    rows = -(-count // columns)
    columns = -(-count // rows)  # balance the grid: 4 panels as 2×2, not 3 + 1
    width = min(4.6, 15 / columns)  # keep wide grids legible once scaled to a page
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(width * columns, 3.4 * rows),
        squeeze=False,
        layout="constrained",
        sharex=sharex,
    )
    flat = list(axes.ravel())
    for extra in flat[count:]:
        extra.set_visible(False)
    return fig, flat[:count]


def save(fig: plt.Figure, out_dir: Path, name: str, section: str, title: str, caption: str) -> Figure:
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    fig.suptitle(title)
    fig.savefig(png, dpi=110)
    # The layout is settled by the first save; freezing it makes the second save cheaper.
    fig.set_layout_engine("none")
    fig.savefig(svg)
    plt.close(fig)
    return Figure(name, section, title, caption, png, svg)


def panels_by(df: pd.DataFrame, panel: pd.Series, value: Callable[[pd.DataFrame], np.ndarray]) -> Panels:
    out: Panels = {}
    for key in ordered_unique(panel):
        rows = df[panel == key]
        by_protocol = {p: value(rows[rows["protocol"] == p]) for p in ordered_protocols(rows["protocol"])}
        by_protocol = {p: v for p, v in by_protocol.items() if len(v)}
        if by_protocol:
            out[str(key)] = by_protocol
    return out


def draw_cdf(ax: plt.Axes, values: np.ndarray, protocol: str) -> None:
    x = np.sort(values)
    y = np.arange(1, len(x) + 1) / len(x)
    # Start the curve at 0 so the first step is drawn, not implied.
    ax.step(
        np.r_[x[0], x],
        np.r_[0, y],
        where="post",
        color=protocol_color(protocol),
        linewidth=1.8,
        label=f"{protocol_label(protocol)} (n={len(x)})",
    )


def x_range(panels: Iterable[dict[str, np.ndarray]], guides: Iterable[float]) -> tuple[float, float]:
    """1st to 99th percentile (the long tail would squash the body of every curve),
    widened to show the guides; from 0 when that costs little space."""
    values = [v for by_protocol in panels for v in by_protocol.values()]
    lo = min(np.quantile(v, 0.01) for v in values)
    hi = max(np.quantile(v, 0.99) for v in values)
    lo, hi = min([lo, *guides]), max([hi, *guides])
    pad = 0.08 * (hi - lo) or 0.1 * abs(hi) or 1.0
    return (0.0 if lo < 0.5 * hi else lo - pad), hi + pad


def cdf_figure(
    panels: Panels,
    xlabel: str,
    guides: Iterable[float] = (),
    columns: int = MAX_COLUMNS,
    sharex: bool = False,
    ylabel: str = "CDF (fraction of trials)",
) -> plt.Figure:
    guides = tuple(guides)
    fig, axes = panel_grid(len(panels), columns, sharex)
    shared = x_range(panels.values(), guides) if sharex else None
    for ax, (title, by_protocol) in zip(axes, panels.items(), strict=True):
        for protocol, values in by_protocol.items():
            draw_cdf(ax, values, protocol)
        for guide in guides:
            ax.axvline(guide, color="0.6", linestyle=":", linewidth=1)
            ax.text(
                guide,
                1.01,
                f"{guide:g} RTT",
                ha="center",
                va="bottom",
                fontsize=8,
                color="0.35",
                transform=ax.get_xaxis_transform(),
            )
        ax.set_xlim(*(shared or x_range([by_protocol], guides)))
        ax.set_ylim(0, 1)
        ax.set_title(title, fontsize=10, pad=14 if guides else 6)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        if sharex:
            ax.label_outer()  # one axis label per row and column is enough when shared
    return fig


def column_values(column: str, scale: pd.Series | None = None) -> Callable[[pd.DataFrame], np.ndarray]:
    def values(rows: pd.DataFrame) -> np.ndarray:
        x = pd.to_numeric(rows[column], errors="coerce")
        if scale is not None:
            x = x / scale.loc[rows.index]
        return x[np.isfinite(x)].to_numpy(dtype=float)

    return values


def metric_cdf(df: pd.DataFrame, out_dir: Path, metric: Metric, section: str, per_rtt: bool) -> list[Figure]:
    rows = metric.rows(df)
    dropped = ""
    if per_rtt:
        short = rows.loc[rows["rtt_ref_ms"].isna(), "facet"].unique()
        rows = rows[rows["rtt_ref_ms"].notna()]
        if len(short):
            dropped = " Left out (no calibrated RTT of 1 ms or more): " f"{', '.join(map(str, short))}."
    if rows.empty:
        return []
    scale = rows["rtt_ref_ms"] if per_rtt else None
    panels = panels_by(rows, rows["facet"], column_values(metric.column, scale))
    where = "" if metric.workloads is None else f" ({', '.join(metric.workloads)} rows)"
    if per_rtt:
        fig = cdf_figure(panels, f"{metric.label} (RTTs, calibrated RTT)", RTT_GUIDES)
        caption = (
            f"{metric.label}{where} divided by each trial's calibrated RTT; dotted "
            "lines mark 1, 2 and 3 RTT (first-connection handshakes: QUIC 1, "
            f"TLS 1.3 2, TLS 1.2 3). {X_SPAN}{dropped}"
        )
        name = f"cdf_{metric.column.removesuffix('_ms')}_{section}_rtt"
        title = f"{metric.label} in RTTs"
    else:
        fig = cdf_figure(panels, f"{metric.label} ({metric.unit})")
        name_in_text = metric.label if metric.label.isupper() else metric.label.lower()
        caption = f"CDF of {name_in_text}{where} per protocol and condition; " f"n = trials. {X_SPAN}"
        name = f"cdf_{metric.column.removesuffix('_ms')}_{section}_ms"
        title = metric.label
    return [save(fig, out_dir, name, section, title, caption)]


def cloud_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["throughput_mbps"].notna() & df["object_bytes"].notna()]


def throughput_vs_size(df: pd.DataFrame, out_dir: Path, section: str) -> list[Figure]:
    rows = cloud_rows(df)
    if rows.empty:
        return []
    facets = ordered_unique(rows["facet"])
    fig, axes = panel_grid(len(facets))
    for ax, facet in zip(axes, facets, strict=True):
        in_facet = rows[rows["facet"] == facet]
        for protocol in ordered_protocols(in_facet["protocol"]):
            draw_throughput(ax, in_facet[in_facet["protocol"] == protocol], protocol)
        rates = pd.to_numeric(in_facet["rate_down_mbit"], errors="coerce").dropna()
        if len(rates):
            ax.axhline(rates.median(), color="0.5", linestyle="--", linewidth=1, label="link rate")
        ax.set_xscale("log")
        sizes = sorted(in_facet["object_bytes"].unique())
        ax.set_xticks(sizes, [size_label(s) for s in sizes], rotation=45, fontsize=8)
        ax.minorticks_off()
        ax.set_title(str(facet), fontsize=10)
        ax.set_xlabel("file size (log scale)")
        ax.set_ylabel("throughput (Mbit/s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    caption = (
        "Median throughput (size / total download time) per file size, with 95% "
        "bootstrap CIs as error bars; n = trials per size (range over sizes)."
    )
    return [
        save(
            fig,
            out_dir,
            f"{section}_throughput_vs_size",
            section,
            "Cloud storage: throughput against file size",
            caption,
        )
    ]


def draw_throughput(ax: plt.Axes, rows: pd.DataFrame, protocol: str) -> None:
    points = [(size, median_ci(group["throughput_mbps"])) for size, group in rows.groupby("object_bytes")]
    sizes = np.array([s for s, _ in points])
    est = [e for _, e in points]
    value = np.array([e.value for e in est])
    err = np.array([[e.value - e.lo, e.hi - e.value] for e in est]).T
    ns = [e.n for e in est]
    n_text = f"n={min(ns)}" if min(ns) == max(ns) else f"n={min(ns)}–{max(ns)}"
    ax.errorbar(
        sizes,
        value,
        yerr=np.nan_to_num(err),
        color=protocol_color(protocol),
        marker="o",
        markersize=4,
        capsize=3,
        linewidth=1.6,
        label=f"{protocol_label(protocol)} ({n_text} per size)",
    )


def cpu_samples(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per CPU sample: trial, protocol, facet, t (s), proc_pct."""
    records = []
    for row in rows.itertuples():
        samples = [s for s in listed(row.cpu) if s is not None and s.get("proc_pct") is not None]
        # Time from the trial's first sample, whether t is relative or a wall-clock stamp.
        t0 = min((float(s.get("t", 0)) for s in samples), default=0.0)
        records += [
            (row.trial_id, row.protocol, row.facet, float(s.get("t", 0)) - t0, float(s["proc_pct"]))
            for s in samples
        ]
    return pd.DataFrame(records, columns=["trial_id", "protocol", "facet", "t", "proc_pct"])


def cpu_object(rows: pd.DataFrame) -> str:
    objects = rows.drop_duplicates("object").set_index("object")["object_bytes"]
    return CPU_OBJECT if CPU_OBJECT in objects.index else str(objects.idxmax())


def cpu_over_time(df: pd.DataFrame, out_dir: Path, section: str) -> list[Figure]:
    rows = cloud_rows(df)
    if rows.empty:
        return []
    samples_rows = rows[has_items(rows["cpu"])]
    if samples_rows.empty:
        return []
    obj = cpu_object(samples_rows)
    samples = cpu_samples(samples_rows[samples_rows["object"] == obj])
    if samples.empty:
        return []
    facets = ordered_unique(samples["facet"])
    fig, axes = panel_grid(len(facets))
    for ax, facet in zip(axes, facets, strict=True):
        draw_cpu(ax, samples[samples["facet"] == facet])
        ax.set_title(str(facet), fontsize=10)
        ax.set_xlabel("time since trial start (s)")
        ax.set_ylabel("client process CPU (%)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    caption = (
        f"CPU of the client process while downloading {obj}, sampled every 500 ms: "
        "thin lines are single trials, thick lines the median across trials."
    )
    return [
        save(
            fig,
            out_dir,
            f"{section}_cpu_over_time",
            section,
            f"Cloud storage: CPU over time ({obj})",
            caption,
        )
    ]


def draw_cpu(ax: plt.Axes, samples: pd.DataFrame) -> None:
    for protocol in ordered_protocols(samples["protocol"]):
        mine = samples[samples["protocol"] == protocol]
        color = protocol_color(protocol)
        for _, trial in mine.groupby("trial_id"):
            ax.plot(trial["t"], trial["proc_pct"], color=color, alpha=0.2, linewidth=0.8)
        # Median across trials on the 500 ms sampling grid.
        median = mine.groupby((mine["t"] * 2).round() / 2)["proc_pct"].median()
        ax.plot(
            median.index,
            median.to_numpy(),
            color=color,
            linewidth=2.2,
            label=f"{protocol_label(protocol)} (n={mine['trial_id'].nunique()} trials)",
        )


def path_and_server(rows: pd.DataFrame) -> pd.Series:
    """The profile, and the server where a run has several: each server's QUIC is a stack of
    its own, so their sessions are never pooled in one panel."""
    if rows["server"].nunique() > 1:
        return rows["profile"].astype(str) + " · " + rows["server"].astype(str)
    return rows["profile"].astype(str)


def streaming_panel(rows: pd.DataFrame) -> pd.Series:
    loss = rows["loss_pct"].map(lambda v: f"{v:g}% loss")
    if rows["profile"].nunique() > 1 or rows["server"].nunique() > 1:
        return path_and_server(rows) + " · " + loss
    return loss


def streaming_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Streaming rows ordered profile by profile, by loss within one (one grid row each)."""
    rows = df.assign(loss_pct=lambda d: d["loss_pct"].fillna(0))
    first = {p: i for i, p in enumerate(dict.fromkeys(rows["profile"]))}
    return rows.sort_values(["profile", "loss_pct"], key=lambda c: c.map(first) if c.name == "profile" else c)


def streaming_cdf(panels: Panels, rows: pd.DataFrame, xlabel: str, ylabel: str) -> plt.Figure:
    # One column per loss rate and a shared x axis, so loss reads left to right.
    return cdf_figure(panels, xlabel, columns=max(1, rows["loss_pct"].nunique()), sharex=True, ylabel=ylabel)


def has_items(cells: pd.Series) -> pd.Series:
    # astype(bool): on an empty frame map() gives an object Series, which pandas would
    # read as a list of column labels rather than a mask.
    return cells.map(lambda c: len(listed(c)) > 0).astype(bool)


def stall_durations(rows: pd.DataFrame) -> np.ndarray:
    return np.asarray([d for ds in rows["stall_durations_ms"] for d in listed(ds)], dtype=float)


def streaming_cdfs(df: pd.DataFrame, out_dir: Path, section: str) -> list[Figure]:
    rows = streaming_rows(df)
    if rows.empty:
        return []
    figures = []
    startup = rows[rows["startup_delay_ms"].notna()]
    if not startup.empty:
        panels = panels_by(startup, streaming_panel(startup), column_values("startup_delay_ms"))
        figures.append(
            save(
                streaming_cdf(panels, startup, "startup delay (ms)", "CDF (fraction of sessions)"),
                out_dir,
                f"{section}_startup_delay",
                section,
                "Streaming: startup delay",
                "CDF of the video startup delay per loss rate; n = sessions.",
            )
        )
    stalled = rows[has_items(rows["stall_durations_ms"])]
    panels = panels_by(stalled, streaming_panel(stalled), stall_durations)
    if panels:
        figures.append(
            save(
                streaming_cdf(panels, stalled, "stall duration (ms)", "CDF (fraction of stalls)"),
                out_dir,
                f"{section}_stall_durations",
                section,
                "Streaming: stall durations",
                "CDF of the durations of single stalls per loss rate; "
                "n = stalls (sessions without stalls add none).",
            )
        )
    return figures


# What a figure's x axis can be: a row column, its label, and the word for "per ... rate".
LOSS_AXIS = ("loss_pct", "loss (%)", "loss rate")
RATE_AXIS = ("rate_down_mbit", "link rate, down (Mbit/s)", "link rate")


def against_loss(
    df: pd.DataFrame,
    out_dir: Path,
    section: str,
    metrics: list[Metric],
    name: str,
    title: str,
    axis: tuple[str, str, str] = LOSS_AXIS,
    note: str = "",
) -> list[Figure]:
    """One row of panels per profile (and server, where there are several), one column per
    metric: the median against the loss rate (or another axis) per protocol, with 95%
    bootstrap CIs (the paper's streaming figures; seed 003's against the link rate). Where
    several tools measured one protocol (a perf tool and the browser), one line per tool and
    protocol: two stacks are never pooled."""
    column, xlabel, per = axis
    rows = df
    if column not in rows.columns:
        return []
    rows = rows.assign(**{column: pd.to_numeric(rows[column], errors="coerce").fillna(0)})
    metrics = [m for m in metrics if rows[m.column].notna().any()]
    if rows.empty or not metrics:
        return []
    rows = rows.assign(panel=path_and_server(rows))
    # A sweep keeps its profile's name: the axis must vary within a panel (india at 20 Mbit/s
    # beside germany at 500 is two paths, not a rate sweep).
    if rows.groupby("panel")[column].nunique().max() < 2:
        return []
    profiles = ordered_unique(rows["panel"])
    fig, axes = panel_grid(len(profiles) * len(metrics), columns=len(metrics))
    for i, (profile, metric) in enumerate((p, m) for p in profiles for m in metrics):
        ax, mine = axes[i], rows[rows["panel"] == profile]
        for protocol, tool in tool_series(mine):
            same = mine[mine["protocol"] == protocol]
            if tool:
                same = same[same["tool"] == tool]
            points = [
                (x, median_ci(pd.to_numeric(g[metric.column], errors="coerce")))
                for x, g in same.groupby(column)
            ]
            points = [(x, e) for x, e in points if e.n]
            if not points:
                continue
            x = [p for p, _ in points]
            y = np.array([e.value for _, e in points])
            err = np.nan_to_num(np.array([[e.value - e.lo, e.hi - e.value] for _, e in points]).T)
            ns = [e.n for _, e in points]
            n_text = f"n={min(ns)}" if min(ns) == max(ns) else f"n={min(ns)}–{max(ns)}"
            ax.errorbar(
                x,
                y,
                yerr=err,
                color=protocol_color(protocol),
                marker="s" if tool in BROWSER_TOOLS else "o",
                linestyle="--" if tool in BROWSER_TOOLS else "-",
                markersize=4,
                capsize=3,
                linewidth=1.6,
                label=f"{protocol_label(protocol)}{f' · {tool}' if tool else ''} ({n_text})",
            )
        ticks = sorted(mine[column].unique())
        if column == "rate_down_mbit" and ticks[0] > 0 and ticks[-1] / ticks[0] >= 10:
            ax.set_xscale("log")
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.set_title(f"{profile}: {metric.label}", fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(metric.label + (f" ({metric.unit})" if metric.unit else ""))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    caption = (
        f"Median per {per} and protocol with 95% bootstrap CIs; n = trials per " f"point (range over {per}s)."
    )
    return [save(fig, out_dir, name, section, title, caption + note)]


BROWSER_TOOLS = ("chromium", "firefox")  # drawn dashed beside the transfer tools


def tool_series(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """(protocol, tool) per line: the tool is "" where one tool measured the protocol (the
    label stays the protocol's), else each tool has its own line."""
    out = []
    for protocol in ordered_protocols(rows["protocol"]):
        mine = rows.loc[rows["protocol"] == protocol]
        tools = sorted(mine["tool"].dropna().unique()) if "tool" in mine else []
        out += [(protocol, str(t)) for t in tools] if len(tools) > 1 else [(protocol, "")]
    return out


def video_against_loss(df: pd.DataFrame, out_dir: Path, section: str) -> list[Figure]:
    return against_loss(
        df,
        out_dir,
        section,
        [VIDEO_CONNECTION, VIDEO_THROUGHPUT, VIDEO_STALL],
        f"{section}_against_loss",
        "Video download against loss",
    )


def streaming_against_loss(df: pd.DataFrame, out_dir: Path, section: str) -> list[Figure]:
    return against_loss(
        df,
        out_dir,
        section,
        [STARTUP, STALL_TIME, SWITCHES],
        f"{section}_against_loss",
        "Streaming: startup, stalls and switches " "against loss",
    )


def cloud_against_rate(df: pd.DataFrame, out_dir: Path, section: str) -> list[Figure]:
    """Seed 003's Figures 3 and 6: throughput and the client's CPU against the link rate,
    for a run that sweeps the rate (a rate calibration refused has no point), per tool and
    protocol where a browser downloaded beside the perf tools. The client CPU is
    transfer_cpu_pct (analysis/load.py): a browser's over its download, as in the tables."""
    note = ""
    if "browser_cpu_pct" in df and df["browser_cpu_pct"].notna().any():
        note = (
            " A browser's (dashed) client CPU is its processes' over the download alone "
            "(browser_cpu_pct), not over its start."
        )
    return against_loss(
        df,
        out_dir,
        section,
        [CLOUD_THROUGHPUT, CLOUD_CPU],
        f"{section}_against_rate",
        "Cloud download: throughput and client CPU against the link rate",
        RATE_AXIS,
        note,
    )


EXAMPLE_LOSS_PCT = 5.0  # the paper's example condition for a playback trace


def read_trace(path: Any) -> pd.DataFrame:
    """A playback's per-second trace (t_s, buffer_s, bitrate_kbps, height, stalled), or an
    empty frame where the file is missing or unreadable (a report never fails on one)."""
    try:
        return pd.DataFrame(
            json.loads(limits.read_bounded(Path(path), limits.RUN_JSON_MAX_BYTES, follow=False))
        )
    except (OSError, TypeError, ValueError, RecursionError):  # limits.TooBig is a ValueError
        return pd.DataFrame()


def example_session(rows: pd.DataFrame) -> pd.Series | None:
    """The session whose stall time is the median of its protocol's (the representative
    one, not the worst), ties broken by startup delay."""
    rows = rows[rows["trace_path"].notna()]
    if rows.empty:
        return None
    ranked = rows.sort_values(["stall_total_ms", "startup_delay_ms"], na_position="last")
    return ranked.iloc[(len(ranked) - 1) // 2]


def streaming_example_traces(df: pd.DataFrame, out_dir: Path, section: str) -> list[Figure]:
    """One playback per protocol at the loss rate nearest 5 %, per profile (and server): buffer level
    over time, stalls shaded, and the rendition's bitrate (the paper's example traces)."""
    rows = streaming_rows(df)
    if rows.empty or "trace_path" not in rows:
        return []
    examples = []
    rows = rows.assign(panel=path_and_server(rows))
    for profile in ordered_unique(rows["panel"]):
        mine = rows[rows["panel"] == profile]
        loss = min(mine["loss_pct"].unique(), key=lambda v: (abs(v - EXAMPLE_LOSS_PCT), -v))
        for protocol in ordered_protocols(mine["protocol"]):
            session = example_session(mine[(mine["loss_pct"] == loss) & (mine["protocol"] == protocol)])
            trace = read_trace(session["trace_path"]) if session is not None else pd.DataFrame()
            if {"t_s", "buffer_s", "stalled"} <= set(trace.columns):
                examples.append((f"{profile} · {loss:g}% loss · {protocol_label(protocol)}", protocol, trace))
    if not examples:
        return []
    fig, axes = panel_grid(len(examples), columns=3)
    # One bitrate scale for every panel, so the renditions compare across protocols.
    top = max(pd.to_numeric(t.get("bitrate_kbps"), errors="coerce").max() for *_, t in examples)
    for ax, (title, protocol, trace) in zip(axes, examples, strict=False):
        draw_trace(ax, trace, protocol, 1.1 * top if top > 0 else None)
        ax.set_title(title, fontsize=10)
    caption = (
        "One playback per protocol at the loss rate nearest 5% (the session with the "
        "median stall time): buffer level (line), stalls (shaded), and the bitrate of "
        "the rendition played (dashed, right axis)."
    )
    return [save(fig, out_dir, f"{section}_example_traces", section, "Streaming: example playbacks", caption)]


def draw_trace(ax: plt.Axes, trace: pd.DataFrame, protocol: str, bitrate_top: float | None) -> None:
    t = trace["t_s"].astype(float).to_numpy()
    color = protocol_color(protocol)
    ax.plot(t, pd.to_numeric(trace["buffer_s"], errors="coerce"), color=color, linewidth=1.6)
    for start, stalled in zip(t, trace["stalled"].astype(bool), strict=True):
        if stalled:
            ax.axvspan(start - 0.5, start + 0.5, color="0.6", alpha=0.35, linewidth=0)
    ax.set_xlabel("time since play was requested (s)")
    ax.set_ylabel("buffer (s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if "bitrate_kbps" in trace:
        right = ax.twinx()
        right.step(
            t,
            pd.to_numeric(trace["bitrate_kbps"], errors="coerce"),
            where="post",
            color=color,
            linestyle="--",
            linewidth=1.0,
            alpha=0.8,
        )
        right.set_ylabel("bitrate (kbit/s)")
        right.set_ylim(0, bitrate_top)


def pageload_vs_download(df: pd.DataFrame, out_dir: Path, section: str) -> list[Figure]:
    """Per condition: the browser's page load time beside the perf tools' download of the
    same page's HTML, per protocol (median and 95% bootstrap CI)."""
    pages = df[df["workload"] == PAGELOAD]
    if pages.empty:
        return []
    facets = ordered_unique(pages["facet"])
    fig, axes = panel_grid(len(facets))
    for ax, facet in zip(axes, facets, strict=True):
        mine = pages[pages["facet"] == facet]
        protocols = ordered_protocols(mine["protocol"])
        perf = df[
            (df["workload"] != PAGELOAD) & (df["facet"] == facet) & df["object"].isin(mine["object"].unique())
        ]
        for i, protocol in enumerate(protocols):
            for offset, rows, column, marker in (
                (-0.15, perf, "download_time_ms", "s"),
                (0.15, mine, "page_load_time_ms", "o"),
            ):
                est = median_ci(rows.loc[rows["protocol"] == protocol, column])
                if est.n == 0:
                    continue
                err = np.nan_to_num([[est.value - est.lo], [est.hi - est.value]])
                ax.errorbar(
                    [i + offset],
                    [est.value],
                    yerr=err,
                    color=protocol_color(protocol),
                    marker=marker,
                    markersize=7,
                    capsize=3,
                    mfc="white" if marker == "s" else protocol_color(protocol),
                )
                ax.annotate(
                    f"n={est.n}",
                    (i + offset, est.value),
                    xytext=(0, -14),
                    textcoords="offset points",
                    ha="center",
                    fontsize=7,
                    color="0.35",
                )
        ax.set_xticks(range(len(protocols)), [protocol_label(p) for p in protocols])
        ax.set_xlim(-0.6, len(protocols) - 0.4)
        ax.set_title(str(facet), fontsize=10)
        ax.set_ylabel("time (ms)")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(
            handles=[
                plt.Line2D(
                    [],
                    [],
                    color="0.3",
                    marker="s",
                    mfc="white",
                    linestyle="",
                    label="perf-tool download (HTML)",
                ),
                plt.Line2D([], [], color="0.3", marker="o", linestyle="", label="browser page load"),
            ],
            fontsize=8,
            loc="upper left",
        )
    caption = (
        "Median page load time in headless Chromium (filled circles) beside the perf "
        "tools' download of the same page's HTML (open squares), per protocol, with "
        "95% bootstrap CIs; n = trials."
    )
    return [
        save(
            fig,
            out_dir,
            f"{section}_vs_download",
            section,
            "Page load in a browser against a perf-tool download",
            caption,
        )
    ]


def pageload_vs_origins(df: pd.DataFrame, out_dir: Path, section: str) -> list[Figure]:
    """Per browser (facet): the median page load of each recorded page against its origins,
    one line per protocol, with 95% bootstrap CIs."""
    pages = recorded_page_loads(df)
    if pages.empty:
        return []
    facets = ordered_unique(pages["facet"])
    fig, axes = panel_grid(len(facets))
    for ax, facet in zip(axes, facets, strict=True):
        mine = pages[pages["facet"] == facet]
        for protocol in ordered_protocols(mine["protocol"]):
            rows = mine[mine["protocol"] == protocol]
            points = sorted(
                (int(origins), median_ci(group["page_load_time_ms"]))
                for origins, group in rows.groupby("page_origins")
            )
            xs = [x for x, _ in points]
            ys = [est.value for _, est in points]
            err = np.nan_to_num([[e.value - e.lo for _, e in points], [e.hi - e.value for _, e in points]])
            ax.errorbar(
                xs,
                ys,
                yerr=err,
                color=protocol_color(protocol),
                marker="o",
                capsize=3,
                label=protocol_label(protocol),
            )
        ax.set_title(str(facet), fontsize=10)
        ax.set_xlabel("origins of the page")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("page load time (ms)")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    caption = (
        "Median page load time of each recorded page against its number of origins, per "
        "protocol, with 95% bootstrap CIs. More origins mean more connections, but only "
        "the setups opened in sequence lengthen the load (the table's critical path)."
    )
    return [save(fig, out_dir, f"{section}_pageload", section, "Page load against origins", caption)]


# Figures of their own that a workload's report section names (workloads/<kind>.py).
# Each takes the section's own rows (ReportSection.own_rows), the output folder and the
# section's figures name, which its files' names begin with.
PLOTS: dict[str, Callable[[pd.DataFrame, Path, str], list[Figure]]] = {
    "throughput_vs_size": throughput_vs_size,
    "cpu_over_time": cpu_over_time,
    "cloud_against_rate": cloud_against_rate,
    "streaming_cdfs": streaming_cdfs,
    "streaming_against_loss": streaming_against_loss,
    "streaming_example_traces": streaming_example_traces,
    "video_against_loss": video_against_loss,
    "pageload_vs_download": pageload_vs_download,
    "pageload_vs_origins": pageload_vs_origins,
}


def section_figures(ok: pd.DataFrame, out_dir: Path, spec: ReportSection) -> list[Figure]:
    figures: list[Figure] = []
    for metric in spec.cdfs:
        for per_rtt in (False, True) if spec.cdfs_in_rtts and metric.per_rtt else (False,):
            figures += metric_cdf(ok, out_dir, metric, spec.figures, per_rtt)
    own = spec.own_rows(ok)
    for name in spec.plots:
        figures += PLOTS[name](own, out_dir, spec.figures)
    return figures


def make_figures(ok: pd.DataFrame, out_dir: Path) -> list[Figure]:
    """All figures the successful rows `ok` support, written to out_dir: each workload's
    report sections, in their order."""
    return [f for spec in report_sections() for f in section_figures(ok, out_dir, spec)]


CONGESTION = "congestion"  # the report's Congestion response section
FAIRNESS = "fairness"  # the report's Shared bottleneck section
MATRIX = "matrix"  # the report's client x server matrix section
VERDICT_COLORS = {
    "pass": "#b7e4c7",
    "fail": "#f4a6a6",
    "n/a": "#e0e0e0",
    "unsupported": "#c6dbef",
    "not spoken": "#fafafa",  # the server does not speak the client's protocol: no trial
}


def stack_matrix(found: list[Any], out_dir: Path) -> list[Figure]:
    """One grid per profile: a row per client, a column group per check (analysis/
    stack_matrix.py CHECKS) holding a column per server; colour = the check's verdict, text =
    its median with 95 % CI."""
    from .stack_matrix import CHECK_TITLES, checks_shown

    profiles = list(dict.fromkeys(c.profile for c in found))
    if not profiles:
        return []
    clients = list(dict.fromkeys(c.client for c in found))
    servers = list(dict.fromkeys(c.server for c in found))
    shown = checks_shown(found)
    columns = [(check, server) for check in shown for server in servers]
    fig, axes = panel_grid(len(profiles), columns=1)
    for ax, profile in zip(axes, profiles, strict=True):
        mine = {(c.client, c.server): c for c in found if c.profile == profile}
        for i, client in enumerate(clients):
            for j, (check, server) in enumerate(columns):
                cell = mine.get((client, server))
                verdict = cell.checks.get(check, "n/a") if cell else "n/a"
                ax.add_patch(
                    plt.Rectangle((j, i), 1, 1, facecolor=VERDICT_COLORS[verdict], edgecolor="white")
                )
                text = (
                    cell.text(check).replace(" [", "\n[").replace("], ", "]\n").replace("; ", "\n")
                    if cell
                    else "not run"
                )
                ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=5.5)
        for g in range(1, len(shown)):  # the column groups' borders
            ax.axvline(g * len(servers), color="0.2", linewidth=1.2)
        for g, check in enumerate(shown):
            ax.text(
                (g + 0.5) * len(servers), -0.35, CHECK_TITLES[check], ha="center", va="bottom", fontsize=7
            )
        ax.set_xlim(0, len(columns))
        ax.set_ylim(len(clients), 0)
        ax.set_xticks([j + 0.5 for j in range(len(columns))], [s for _, s in columns], fontsize=7)
        ax.set_yticks([i + 0.5 for i in range(len(clients))], clients, fontsize=7)
        ax.set_title(profile, fontsize=10, pad=20, loc="left")
        ax.tick_params(length=0)
    fig.set_size_inches(
        max(6.0, 1.25 * len(columns) + 2), max(2.5, (0.75 * len(clients) + 1.2) * len(profiles))
    )
    caption = (
        "Each row is one client, each column group one check, a column per server: green, the "
        "check passes on its median; red, it fails; blue, the client cannot do it (exit 3, or "
        'no such option in its descriptor); grey, nothing to check; white, "not spoken": the '
        "server does not speak the client's protocol (an HTTP/3-only server), so no trial. "
        "Handshake: connection time net of the client's CPU in calibrated RTTs (QUIC 1, "
        "TLS 1.3 2, TLS 1.2 3; at most +3 % or +1.5 ms). Goodput: the TCP model's time for the "
        "download over the measured one (lossless, 1 MB or more; at least 0.97). Resumed: the "
        "first byte in RTTs (QUIC 0-RTT 1, resumed 2; TLS 1.3 early data 2, resumed 3; TLS 1.2 "
        "3). Loss: every trial completes within the timeout; the text is the median goodput. "
        "Brackets: 95 % CIs."
    )
    return [save(fig, out_dir, "stack_matrix", MATRIX, "Client × server matrix", caption)]


CROSS_COLORS = ("0.35", "#cc79a7", "#009e73", "#d55e00", "0.6", "#56b4e9", "#f0e442", "0.15")


def read_cross_trace(path: Any) -> dict[str, Any]:
    """A trial's per-flow rates over time (experiments/cross.py's timeline), or {}."""
    try:
        data = json.loads(limits.read_bounded(Path(path), limits.RUN_JSON_MAX_BYTES, follow=False))
        return data if isinstance(data, dict) and "mbit" in data else {}
    except (OSError, TypeError, ValueError, RecursionError):  # limits.TooBig is a ValueError
        return {}


def cross_timelines(df: pd.DataFrame, out_dir: Path) -> list[Figure]:
    """Per profile, server and protocol, the trial with the median share: the trial's and
    every cross flow's rate at the client over time (seed 001's throughput-over-time view)."""
    if "cross_trace_path" not in df or "trial_share" not in df:
        return []
    rows = df[df["cross_trace_path"].notna() & df["trial_share"].notna()]
    if rows.empty:
        return []
    rows = rows.assign(panel=path_and_server(rows))
    examples = []
    for panel in ordered_unique(rows["panel"]):
        mine = rows[rows["panel"] == panel]
        for protocol in ordered_protocols(mine["protocol"]):
            ranked = mine[mine["protocol"] == protocol].sort_values("trial_share")
            trial = ranked.iloc[(len(ranked) - 1) // 2]
            trace = read_cross_trace(trial["cross_trace_path"])
            if trace:
                examples.append((f"{panel} · {protocol_label(protocol)}", protocol, trial, trace))
    if not examples:
        return []
    fig, axes = panel_grid(len(examples), columns=2)
    for ax, (title, protocol, trial, trace) in zip(axes, examples, strict=False):
        for i, (name, mbit) in enumerate(trace["mbit"].items()):
            own = name == "trial"
            ax.plot(
                trace["t_s"],
                mbit,
                color=protocol_color(protocol) if own else CROSS_COLORS[i % len(CROSS_COLORS)],
                linewidth=1.8 if own else 1.2,
                label=f"trial ({protocol_label(protocol)})" if own else name,
            )
        if pd.notna(trial.get("rate_down_mbit")):
            ax.axhline(float(trial["rate_down_mbit"]), color="0.5", linestyle="--", linewidth=1)
        ax.set_title(f"{title}: share {trial['trial_share']:.2f}", fontsize=10)
        ax.set_xlabel("time since the trial's tool started (s)")
        ax.set_ylabel("Mbit/s at the client")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    caption = (
        "One trial per group (the one with the median share): each flow's IP bytes at the "
        "client per 250 ms bin; dashed, the link's rate. The flows are named as in the "
        "table above."
    )
    return [save(fig, out_dir, "cross_timelines", FAIRNESS, "Shared bottleneck: rates over time", caption)]


def goodput_against_bound(groups: list[CongestionGroup], out_dir: Path) -> list[Figure]:
    """Per condition under loss, each stack's median goodput per client and object (log
    scale) against the loss bound: Mathis's (solid), twice it (the flag, dotted) and
    Padhye's (dashed). Groups too short for a verdict are left out."""
    shown = [g for g in groups if g.verdict != lr.TOO_SHORT]
    if not shown:
        return []
    conditions = list(dict.fromkeys(g.condition for g in shown))
    fig, axes = panel_grid(len(conditions), columns=2)
    for ax, condition in zip(axes, conditions, strict=True):
        mine = [g for g in shown if g.condition == condition]
        stacks = list(dict.fromkeys(g.stack for g in mine))
        for g in mine:
            flagged = g.verdict == lr.NOT_RESPONSIVE
            ax.scatter(
                stacks.index(g.stack),
                g.goodput,
                marker="o" if g.keys[4] in transfer_kinds() else "s",
                color="#D55E00" if flagged else "#0072B2",
                s=30,
                zorder=3,
            )
        path = mine[0].path
        for value, style, label in (
            (path.bound_mbit, "-", "Mathis bound"),
            (lr.FLAG_FACTOR * path.bound_mbit, ":", f"{lr.FLAG_FACTOR:g}× bound (flag)"),
            (path.padhye_mbit, "--", "Padhye bound"),
        ):
            ax.axhline(value, color="#555555", linestyle=style, linewidth=1, label=label)
        ax.set_yscale("log")
        ax.set_xticks(range(len(stacks)), stacks, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("goodput (Mbit/s), median")
        ax.set_title(f"{condition}: {path.describe()}", fontsize=9)
        ax.grid(alpha=0.3, which="both", axis="y")
        ax.legend(fontsize=7)
    caption = (
        "Median goodput per stack, client and object (circles: transfers; squares: a "
        "player, a browser or the paced video download), red where not loss-responsive, "
        "against the bounds a loss-responsive sender cannot exceed at the path's loss and RTT."
    )
    return [
        save(
            fig, out_dir, "congestion_goodput_vs_bound", CONGESTION, "Goodput against the loss bound", caption
        )
    ]
