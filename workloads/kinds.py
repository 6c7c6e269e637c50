"""One class per workload kind, in one list (WORKLOADS): what an experiment's `workload:`
section may say, what a trial fetches, its size, the content the servers need, and what its
rows measure and how the report shows them (workloads/metrics.py).

The schema, the executor, the dry-run estimate, the synthetic executor and the analysis ask the
class; a new workload is a new class here (and its content in servers/content.py). A kind the
testbed cannot run yet is listed with `unavailable` set: validation refuses it with that reason.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from quicbed.servers import content, player

from . import metrics as m
from .metrics import PAGELOAD, STREAMING, ReportSection


class WorkloadKind:
    kind: str = ""
    list_key: str = ""  # the workload section's key listing what to fetch
    what: str = ""  # what one entry is called in messages
    default: tuple[str, ...] = ()  # when the list is left out (empty: the list is required)
    extra_keys: dict[str, tuple[float, float, float]] = {}  # key -> (default, low, high)
    # A mapping of named settings for the client that plays the workload (the video player's
    # buffer and ABR): its key in the workload section, and what each setting takes.
    settings_key: str = ""
    settings: dict[str, player.Setting] = {}
    settings_flag: str = ""  # the client flag that takes them (clients/tools.py workload_flags)
    unavailable: str = ""  # why experiments may not name it yet ("" = it runs)
    # Rows a browser measured form analysis kinds of their own, never pooled with the transfer
    # tools' rows: derived kind -> the columns whose presence marks such a row.
    derived: dict[str, tuple[str, ...]] = {}
    sections: tuple[ReportSection, ...] = ()  # the report's sections on this kind's rows

    def choices(self) -> tuple[str, ...]:
        """Every object an experiment may list."""
        raise NotImplementedError

    def url_path(self, name: str) -> str:
        """The object's path on the servers (below their content root)."""
        raise NotImplementedError

    def object_bytes(self, name: str) -> int:
        """Bytes one trial fetches (a page counts all its files)."""
        raise NotImplementedError

    def prepare_content(self, root: Path, objects: tuple[str, ...]) -> None:
        """Make what the servers serve for these objects (cached across runs)."""
        content.ensure_content(root, {self.kind})

    def tool_args(self, duration_s: float | None, settings: dict[str, Any]) -> dict[str, str]:
        """What the workload adds to a client's arguments (after the contract's), flag ->
        value; each tool takes the flags it knows (clients/tools.py: Tool.workload_flags)."""
        return {}


class Web(WorkloadKind):
    kind, list_key, what, default = "web", "objects", "object", ("index.html",)
    derived = {PAGELOAD: ("page_load_time_ms",)}
    sections = (
        ReportSection(
            "Connection time, TTFB and download time",
            m.TRANSFER_KINDS,
            "Connection time covers every non-streaming trial (a handshake does not depend "
            "on what follows); TTFB and download time cover the web pages.",
            metrics=tuple(m.TIMING_METRICS),
            figures="timing",
            cdfs=tuple(m.TIMING_METRICS),
            cdfs_in_rtts=True,
        ),
        ReportSection(
            "Page loads in browsers",
            (PAGELOAD,),
            "One page load per trial in a fresh headless browser, Chromium or Firefox (no "
            "cache, no session, no alt-svc memory); every resource's protocol was checked. "
            "Times from navigation start. Each browser is its own facet, never pooled with "
            "the other. Beside it, the perf tools' download of the same page's HTML, and "
            "the share of loads a CPU rather than the path limited.",
            metrics=(*m.PAGE_METRICS, m.PAGE_CPU),
            compared=tuple(m.PAGE_METRICS),
            figures="pageload",
            cdfs=(m.PAGE_CONNECTION, m.PAGE_LOAD),
            cdfs_in_rtts=True,
            plots=("pageload_vs_download",),
            table="pageload_vs_download",
            table_caption="Browser page load beside the perf tools' download of its HTML",
        ),
    )

    def choices(self) -> tuple[str, ...]:
        # web/index.html (which references the samples), the per-type samples, and whole
        # landing pages (`pages/<site>`: its index.html plus assets).
        return (
            "index.html",
            *(rel.removeprefix("web/") for rel in content.WEB_OBJECTS),
            *(f"pages/{site}" for site in content.LANDING_PAGES),
        )

    def url_path(self, name: str) -> str:
        return f"web/{name}/index.html" if name.startswith("pages/") else f"web/{name}"

    def object_bytes(self, name: str) -> int:
        sizes = _web_sizes()
        return sizes.get(name) or sum(v for k, v in sizes.items() if k.startswith(f"{name}/"))


class Cloud(WorkloadKind):
    kind, list_key, what = "cloud", "files", "file"
    sections = (
        ReportSection(
            "Cloud storage",
            ("cloud",),
            "Throughput = size / total download time; CPU = client process.",
            metrics=(m.CLOUD_THROUGHPUT, m.CLOUD_DOWNLOAD, m.CLOUD_CPU),
            keys=("facet", "object_bytes", "protocol"),
            # download time is throughput restated; comparing both adds rows only
            compared=(m.CLOUD_THROUGHPUT, m.CLOUD_CPU),
            figures="cloud",
            plots=("throughput_vs_size", "cpu_over_time", "cloud_against_rate"),
        ),
    )

    def choices(self) -> tuple[str, ...]:
        return tuple(content.CLOUD_SIZES)

    def url_path(self, name: str) -> str:
        return f"cloud/{name}"

    def object_bytes(self, name: str) -> int:
        return content.CLOUD_SIZES[name]

    def prepare_content(self, root: Path, objects: tuple[str, ...]) -> None:
        super().prepare_content(root, objects)
        content.ensure_files(root, objects)

    def tool_args(self, duration_s: float | None, settings: dict[str, Any]) -> dict[str, str]:
        # A browser must be told the URL is a file to download, not a page to open; the perf
        # tools fetch any URL the same way and do not take the flag.
        return {"--workload": "cloud"}


class Video(WorkloadKind):
    """A DASH stream (servers/content.py's ladder: video renditions and audio, 2 s segments),
    played for `duration_s` seconds of media from its manifest."""

    kind, list_key, what, default = "video", "modes", "video mode", ("dash",)
    extra_keys = {"duration_s": (180, 1, content.VIDEO_SECONDS)}
    settings_key, settings, settings_flag = "player", player.SETTINGS, "--player-settings"
    derived = {STREAMING: ("startup_delay_ms", "stall_count")}
    sections = (
        ReportSection(
            "Video download",
            ("video",),
            "The paper's video_download: audio and video fetched in parallel (two TLS/TCP "
            "connections, or one QUIC connection with two streams), paced like a player's "
            "playout: handshake time and overall download rate.",
            metrics=(m.VIDEO_CONNECTION, m.VIDEO_THROUGHPUT, m.VIDEO_STALL),
            figures="video",
            compared=(m.VIDEO_CONNECTION, m.VIDEO_THROUGHPUT),
            cdfs=(m.VIDEO_CONNECTION,),
            plots=("video_against_loss",),
        ),
        ReportSection(
            "Streaming",
            (STREAMING,),
            "",
            figures="streaming",
            plots=("streaming_against_loss", "streaming_cdfs", "streaming_example_traces"),
            table="streaming",
            table_caption="Stalls and quality switches against loss, per server",
        ),
    )

    def choices(self) -> tuple[str, ...]:
        return ("dash",)

    def url_path(self, name: str) -> str:
        return "video/dash/manifest.mpd"

    def object_bytes(self, name: str) -> int:
        return 0  # a stream's size is what the player fetches, not a property of the object

    def tool_args(self, duration_s: float | None, settings: dict[str, Any]) -> dict[str, str]:
        args = {"--duration": f"{duration_s:g}"} if duration_s else {}
        if settings:
            args[self.settings_flag] = json.dumps(
                player.dashjs_settings(settings), separators=(",", ":"), sort_keys=True
            )
        return args

    def prepare_content(self, root: Path, objects: tuple[str, ...]) -> None:
        # One length for every experiment (the paper's 3 minutes): a shorter run plays part.
        content.ensure_content(root, {"video"}, video_seconds=content.VIDEO_SECONDS)
        player.ensure_player(root)  # the DASH player page a browser client plays it in


WORKLOADS: dict[str, WorkloadKind] = {w.kind: w for w in (Web(), Cloud(), Video())}


@functools.cache
def _web_sizes() -> dict[str, int]:
    return {rel.removeprefix("web/"): len(data) for rel, data in content.web_files().items()}


def object_bytes(kind: str, name: str) -> int:
    return WORKLOADS[kind].object_bytes(name)


def report_sections() -> list[ReportSection]:
    """Every workload's report sections, in the order of WORKLOADS."""
    return [section for workload in WORKLOADS.values() for section in workload.sections]


def derived_kinds() -> dict[str, tuple[str, ...]]:
    """Derived analysis kind -> the columns that mark its rows, over every workload."""
    return {k: v for workload in WORKLOADS.values() for k, v in workload.derived.items()}
