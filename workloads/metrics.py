"""What a workload's rows measure and how the report shows them: metrics, and the report
sections a workload kind owns (data only; analysis/ renders them).

Rows are grouped by *analysis kind*: the workload's own name for the rows of the transfer tools
(tls_perf, quic_perf), and a derived kind for rows that a browser measured (`pageload` for page
loads, `streaming` for playback), which must never be pooled with a transfer tool's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

PAGELOAD = "pageload"  # a web page loaded by a browser (clients/browser)
STREAMING = "streaming"  # a video played by a browser
TRANSFER_KINDS = ("web", "cloud", "video")  # rows of the transfer tools (clients/perf)


@dataclass(frozen=True)
class Metric:
    column: str
    label: str
    unit: str
    # Analysis kinds whose rows measure this metric; None = every transfer tool's rows (a
    # handshake is a handshake whatever is fetched after it).
    workloads: tuple[str, ...] | None = None
    # Whether dividing by the RTT is meaningful (times are, rates are not).
    per_rtt: bool = True

    def rows(self, df: pd.DataFrame) -> pd.DataFrame:
        selected = df[df["workload"].isin(self.workloads or TRANSFER_KINDS)]
        return selected[selected[self.column].notna()]


CONNECTION = Metric("connection_time_ms", "Connection time", "ms")
TTFB = Metric("ttfb_ms", "TTFB", "ms", ("web",))
DOWNLOAD = Metric("download_time_ms", "Download time", "ms", ("web",))
TIMING_METRICS = [CONNECTION, TTFB, DOWNLOAD]
CLOUD_THROUGHPUT = Metric("throughput_mbps", "Throughput", "Mbit/s", ("cloud",), per_rtt=False)
CLOUD_CPU = Metric("transfer_cpu_pct", "Client CPU", "%", ("cloud",), per_rtt=False)
CLOUD_DOWNLOAD = Metric("download_time_ms", "Download time", "ms", ("cloud",), per_rtt=False)
VIDEO_CONNECTION = Metric("connection_time_ms", "Connection time", "ms", ("video",))
VIDEO_THROUGHPUT = Metric("throughput_mbps", "Download rate", "Mbit/s", ("video",), per_rtt=False)
VIDEO_STALL = Metric("stall_ms", "Playout stall time", "ms", ("video",), per_rtt=False)
STARTUP = Metric("startup_delay_ms", "Startup delay", "ms", (STREAMING,), per_rtt=False)
STALL_TIME = Metric("stall_total_ms", "Stall time", "ms", (STREAMING,), per_rtt=False)
SWITCHES = Metric("quality_switches", "Quality switches", "", (STREAMING,), per_rtt=False)
PAGE_CONNECTION = Metric("connection_time_ms", "Connection time", "ms", (PAGELOAD,))
PAGE_TTFB = Metric("ttfb_ms", "TTFB", "ms", (PAGELOAD,))
PAGE_FCP = Metric("fcp_ms", "First contentful paint", "ms", (PAGELOAD,))
PAGE_LOAD = Metric("page_load_time_ms", "Page load time", "ms", (PAGELOAD,))
PAGE_CPU = Metric("browser_cpu_ms", "Browser CPU", "ms", (PAGELOAD,), per_rtt=False)
PAGE_METRICS = [PAGE_CONNECTION, PAGE_TTFB, PAGE_FCP, PAGE_LOAD]


@dataclass(frozen=True)
class ReportSection:
    """One section of the report: medians of `metrics` per `keys`, QUIC against TLS on
    `compared` (None: all of `metrics`), with the figures analysis/figures.py files under
    `figures`. `table` names a section table of its own (analysis/tables.py) instead."""

    title: str
    kinds: tuple[str, ...]  # the analysis kinds whose successful rows it shows
    intro: str
    metrics: tuple[Metric, ...] = ()
    keys: tuple[str, ...] = ("facet", "protocol")
    compared: tuple[Metric, ...] | None = None
    figures: str = ""  # the figures' section name (their file names carry it)
    cdfs: tuple[Metric, ...] = ()  # drawn as CDFs in the metric's unit
    cdfs_in_rtts: bool = False  # and, for metrics with per_rtt, divided by the RTT
    plots: tuple[str, ...] = ()  # figures of their own, by builder name (analysis/figures.py)
    table: str = ""  # a table of its own, by builder name (analysis/report.py's TABLES)
    table_caption: str = ""
