"""The one row schema: every column a trial row carries, who writes it and its unit; the
expectation metrics; the run directory's layout.

A row is the experiment's axes (runner) + the client tool's JSON row + what the executor
measured around the tool + the calibration summary. The runner fills the defaults, the
analysis reads the same names, and tests hold the C tools' rows and their README to TOOL.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quicbed import limits

# --- the run directory ---------------------------------------------------------------------
ROWS_FILE = "rows.jsonl"  # one JSON row per trial, appended and fsynced: the durable record
PARQUET_FILE = "rows.parquet"  # the same rows, written when a run ends (for analysis)
MANIFEST_FILE = "manifest.json"  # versions, conditions, calibrations, sessions
LOCK_FILE = ".lock"  # one runner per run directory
LOGS_DIR = "logs"  # logs/<condition>/<server>/: the servers' own logs
REPORT_DIR = "report"  # report.md, report.html and the figures
TRACES_DIR = "traces"  # traces/<trial id with / as ~>.json: a player's per-second trace
TRIALS_DIR = "trials"  # trials/<trial id with / as ~>/: a trial's capture (experiment capture:)
CROSS_DIR = "cross"  # cross/<trial id with / as ~>.json: each flow's rate over a trial (cross:)


@dataclass(frozen=True)
class Column:
    name: str
    unit: str  # "" for names, flags and counts
    meaning: str


def _columns(*specs: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*spec) for spec in specs)


# What the perf tools (clients/perf) print for every measurement; clients/perf/README.md's
# row table documents each, and tests/base/test_rowschema.py holds the two together.
TOOL = _columns(
    ("tool", "", "tls_perf or quic_perf"),
    ("tool_version", "", "version of the tools"),
    ("library", "", "the TLS/QUIC libraries and their versions"),
    ("backend", "", "libcurl or ngtcp2"),
    ("protocol", "", "requested: tls1.2, tls1.3, quic"),
    ("tls_version", "", "negotiated TLS version"),
    ("http_version", "", "negotiated HTTP version"),
    ("cipher", "", "negotiated cipher suite"),
    ("tls_group", "", "negotiated key-exchange group"),
    ("local_ip", "", "the connection's local address"),
    ("local_port", "", "the connection's local port"),
    ("remote_ip", "", "the server's address"),
    ("remote_port", "", "the server's port"),
    ("url", "", "as requested"),
    ("bytes", "B", "body bytes received"),
    ("http_status", "", "response status, 0 if none"),
    ("t_start", "s", "epoch: connecting began"),
    ("t_connect", "s", "epoch: transport connected"),
    ("t_handshake", "s", "epoch: TLS/QUIC handshake done"),
    ("t_first_byte", "s", "epoch: first response byte"),
    ("t_done", "s", "epoch: last response byte"),
    ("connection_time_ms", "ms", "t_handshake - t_start"),
    ("client_cpu_ms", "ms", "the client's own CPU time inside connection_time_ms"),
    ("ttfb_ms", "ms", "t_first_byte - t_start"),
    ("download_time_ms", "ms", "t_done - t_start"),
    ("throughput_mbps", "Mbit/s", "bytes * 8 / download time"),
    ("resumed", "", "TLS session resumed"),
    ("cpu", "", "CPU samples every 500 ms (with --cpu)"),
    ("rep", "", "repetition index inside one tool run"),
    ("error", "", "empty on success, else category: detail"),
)
# Printed only with the option that asks for them.
TOOL_OPTIONAL = _columns(
    ("sha256", "", "SHA-256 of the body (--sha256)"),
    ("early_data_bytes", "B", "bytes sent as 0-RTT (--resume)"),
    ("cc", "", "congestion control asked for (--cc)"),
    ("curl_timers", "", "libcurl's raw timers (--curl-timers)"),
)
# The experiment's axes for the trial (runner.trial_axes); sweep axes add param_<axis>.
AXES = _columns(
    ("run_id", "", "the run"),
    ("trial_id", "", "condition/server/client/object/repetition"),
    ("condition", "", "condition id (c0, c1...)"),
    ("condition_label", "", "profile and swept values"),
    ("unit", "", "the part of the condition run on one path (c0u1; experiments/shard.py); none before units"),
    ("profile", "", "network profile name"),
    ("rtt_ms", "ms", "configured RTT"),
    ("rate_down_mbit", "Mbit/s", "configured downlink rate"),
    ("rate_up_mbit", "Mbit/s", "configured uplink rate"),
    ("loss_pct", "%", "configured downlink loss (a Gilbert-Elliott model as its mean)"),
    ("loss_up_pct", "%", "configured uplink loss"),
    ("jitter_ms", "ms", "configured downlink jitter"),
    ("queue_packets", "", "configured downlink queue"),
    ("server", "", "server name"),
    ("client", "", "client variant label (tls1.3-h2, quic-h3...)"),
    ("tool", "", "client tool"),
    ("protocol", "", "tls1.2, tls1.3 or quic"),
    ("workload", "", "workload kind"),
    ("object", "", "what the trial fetched"),
    ("repetition", "", "repetition index"),
)
# Measured by the executor around the tool run.
EXECUTOR = _columns(
    ("cpu_client_pct", "%", "client container CPU during the trial, of one core"),
    ("cpu_server_pct", "%", "server container CPU during the trial, of one core"),
    (
        "host_cpu_other_pct",
        "%",
        "host CPU busy during the trial beyond its client and server containers, of one core",
    ),
    ("host_steal_pct", "%", "CPU time the hypervisor stole during the trial, of the host's busy time"),
    (
        "cpu_bound",
        "",
        "a CPU limited the trial (a browser's own judgement, or a container >= 90 % of a core)",
    ),
    ("tool_wall_s", "s", "the tool process's wall time"),
    ("transfer_s", "s", "t_done - t_start"),
    # What the server saw of the trial (its access log, its network namespace's counters):
    # the protocol checks of experiments/ci/ judge these, not the client's word alone.
    ("server_http", "", "lowest HTTP version in the server's access log for the trial (3, 2, 1.1)"),
    ("server_requests", "", "requests the server logged during the trial"),
    ("server_tcp_retrans", "", "TCP segments the server retransmitted during the trial"),
    # A recorded page's trial (workloads/recorded.py): the page as its HAR records it.
    ("page_origins", "", "a recorded page's origins (hosts), as its HAR records them"),
    ("page_requests", "", "the requests of the recorded page a replay serves"),
    ("page_bytes", "B", "the recorded page's bodies, decoded, all of them"),
)
# The runner's bookkeeping and the condition's calibration.
RUNNER = _columns(
    ("calib_rtt_ms", "ms", "the calibrated RTT of the condition's path"),
    ("calib_passed", "", "the path passed calibration"),
    ("calib_forced", "", "measured through a failed calibration (--force)"),
    ("started_at", "", "UTC time the trial started"),
    ("wall_s", "s", "the trial's wall time in the runner"),
    ("attempt", "", "attempt number (resumes retry failures)"),
    (
        "parallel",
        "",
        "paths measuring at once on the machine (--parallel K; 1: a CPU-bound unit measured "
        "again alone; on Ray, the worker's quicbed_path offer, 1 for a unit that held them all; "
        "absent on one path)",
    ),
)
# What the browser client (clients/browser) adds to the perf tools' columns for a page load;
# its row has the TOOL columns too, where the meaning is the same (connection_time_ms: the
# document's connectStart -> connectEnd; download_time_ms: the document's responseEnd).
BROWSER = _columns(
    ("page_load_time_ms", "ms", "navigation start to loadEventEnd"),
    ("dom_content_loaded_ms", "ms", "navigation start to domContentLoadedEventEnd"),
    ("fcp_ms", "ms", "first contentful paint (Paint Timing)"),
    ("lcp_ms", "ms", "largest contentful paint (LCP API)"),
    ("resources", "", "subresources fetched (the document not counted)"),
    ("resource_protocols", "", "nextHopProtocol -> resources, the document included"),
    ("connections", "", "connections the client opened"),
    ("origins", "", "distinct hosts the document and its subresources came from"),
    ("origin_connections", "", "host -> connections its responses came over (coalesced: each)"),
    # Resource Timing's setups (connectStart < connectEnd), chained when one began after the
    # first response over the one before arrived (clients/browser/critical_path.py): QUIC saves
    # one RTT per setup on this chain against TLS 1.3 over TCP (the report's prediction).
    (
        "critical_connections",
        "",
        "connection setups opened in sequence on the load's critical path (overlapping setups: one)",
    ),
    ("critical_chain", "", "the hosts of those setups, in order"),
    ("browser_cpu_ms", "ms", "CPU time of the browser's processes, navigation to load end"),
    ("browser_cpu_pct", "%", "browser_cpu_ms over the page load or download, of one core"),
    ("browser", "", "headless-shell (Debian's chromium-headless-shell), chromium-full or firefox"),
    ("host_idle_pct", "%", "idle time of the CPUs the browser may use, over the load"),
    ("busiest_thread_pct", "%", "the busiest browser thread's CPU time / the load's wall time"),
    ("busiest_thread", "", "that thread's name"),
    ("cpu_wait_ms", "ms", "run-queue wait of all browser threads over the load (schedstat)"),
    ("cpu_throttled_ms", "ms", "the client container's CPU-quota throttled time over the load"),
    ("cpu_by_process", "", "process kind -> ms on a CPU over the load (browser, renderer, gpu-process...)"),
    ("cpu_top_threads", "", "the busiest threads over the load: [thread, process kind, ms]"),
    ("settle_ms", "ms", "the wait for the fresh browser to go quiet before navigating (--settle cap)"),
)
# What a client with a `streams` option adds with --streams N > 1 (stacks/quicgo): its TOOL
# columns are then all the streams' (bytes, t_done, download_time_ms).
STREAMS = _columns(
    ("streams", "", "requests on parallel streams of one connection (--streams N)"),
    ("streams_completed", "", "of them, those whose body arrived whole"),
    ("connections", "", "QUIC connections the streams took (counted on the wire)"),
)
# What video_download (clients/perf) adds to the perf tools' columns; its TOOL columns are
# the first connection's (connection_time_ms: the paper's handshake time) and the whole
# download's (throughput_mbps: the overall download rate).
VIDEO_DOWNLOAD = _columns(
    ("video_rate_mbps", "Mbit/s", "the video stream's bytes over its busy download time"),
    ("audio_rate_mbps", "Mbit/s", "the audio stream's bytes over its busy download time"),
    ("video_bytes", "B", "the video stream's body bytes"),
    ("audio_bytes", "B", "the audio stream's body bytes"),
    ("segments", "", "media segments fetched, both streams"),
    ("rendition", "", "the video rendition fetched (720p...)"),
    ("media_s", "s", "seconds of media fetched"),
    ("startup_ms", "ms", "start to the first media segment of both streams"),
    ("late_segments", "", "segments that arrived after their playout time"),
    ("stalls", "", "times the playout clock waited for a segment"),
    ("stall_ms", "ms", "total time the playout clock waited"),
    ("second_connection_time_ms", "ms", "TCP: the audio connection's handshake"),
)
# Video QoE (the streaming client, not yet built): the analysis already reads them.
STREAMING = _columns(
    ("startup_delay_ms", "ms", "play request to first frame"),
    ("stall_count", "", "rebuffering events"),
    ("stall_durations_ms", "ms", "each stall's length"),
    ("quality_switches", "", "representation changes"),
    ("lowest_quality", "", "lowest representation played"),
    ("trace_file", "", "the per-second trace beside the rows (traces/...)"),
    (
        "cancelled_requests",
        "",
        "requests the player cancelled (abandoned segments, their response begun or not): no "
        "protocol to prove, left out of the protocol proof, which the completed ones pass",
    ),
    ("stall_total_ms", "ms", "the stalls' total length"),
    ("longest_stall_ms", "ms", "the longest stall"),
    ("switches_up", "", "switches to a higher bitrate"),
    ("switches_down", "", "switches to a lower bitrate"),
    ("seconds_at_resolution", "s", 'played seconds per resolution ({"720p": 12.5})'),
    (
        "first_rendition",
        "",
        "the rendition the playback started at (360p), dash.js's own choice: nothing pins it",
    ),
    ("mean_height", "", "time-weighted mean of the played resolution's lines"),
    ("mean_bitrate_kbps", "kbit/s", "mean bitrate of the rendition played, per second"),
    ("dropped_frames", "", "frames the browser dropped"),
    ("total_frames", "", "frames the browser decoded"),
    ("played_s", "s", "media time played"),
    ("player", "", "the player and its version (dash.js 5.2.1)"),
    ("player_settings", "", "the player's buffer and ABR settings"),
)
# The congestion-response check (analysis/loss_response.py): written by the runner with each
# row, and computed by the analysis (analysis/load.py) for rows of older runs that lack them.
LOSS_RESPONSE = _columns(
    ("loss_bound_mbit", "Mbit/s", "the most a Reno-like sender reaches at the path's loss and RTT"),
    ("loss_response", "", "the goodput against that bound: responsive, not loss-responsive..."),
    ("loss_bound_basis", "", "the bound's loss: calibrated (measured) or configured"),
)
# --- capture (experiment `capture: [qlog, pcap, keys]`): the capture builder and
# `quicbed explain` share these names; a row without capture has neither column.
CAPTURE_KINDS: tuple[str, ...] = ("keys", "pcap", "qlog")
# What a trial's capture directory may hold (fixed names).
CAPTURE_FILES: dict[str, str] = {
    "pcap": "client.pcap",  # tcpdump on the client's path interface, the whole trial
    "keys": "keys.log",  # the client's TLS secrets (SSLKEYLOGFILE format)
    "qlog/client": "client.sqlog",  # the client's qlog (JSON-SEQ, RFC 7464)
    "qlog/server": "server.sqlog",  # the server's qlog of the trial's connection(s)
}
CAPTURE = _columns(
    ("capture_files", "", "capture files of the trial, relative to the run directory (executor)"),
    (
        "capture_missing",
        "",
        "capture kind -> why it was not written, e.g. qlog/server, or handshake: why a row "
        "has no WIRE columns (executor)",
    ),
    ("capture_s", "s", "the capture's own time around the tool (tcpdump, server qlog); not in wall_s"),
)
# --- the handshake on the wire: every trial of a one-connection-per-GET tool (the perf tools,
# the stack clients) is captured at the client's path interface and in the server's namespace
# (headers of its first packets, experiments/capture.py HandshakeCapture), whatever the
# experiment's `capture:`; analysis/wire.py handshake_columns computes these. connection_time_ms
# stays the tool's raw figure beside them. A row whose captures could not say it has none of
# these, and its capture_missing["handshake"] says why.
WIRE = _columns(
    (
        "client_turn_ms",
        "ms",
        "the client's own time in the handshake, on the wire: start to its first packet out, "
        "each server flight's last packet in to its next packet out, the last packet in to "
        "handshake done",
    ),
    (
        "server_turn_ms",
        "ms",
        "the server's own time in the handshake, on its wire: each client flight's last packet "
        "in to the server's first packet out, up to handshake done",
    ),
    (
        "wire_rtts",
        "",
        "the handshake's path time in calibrated RTTs: (connection_time_ms - client_turn_ms - "
        "server_turn_ms) / calib_rtt_ms; 1 QUIC, 2 TLS 1.3, 3 TLS 1.2",
    ),
)
# --- cross traffic (experiment `cross:`, experiments/cross.py): the trial's flow and the
# competing flows on its bottleneck, read off a capture at the client; rows without cross
# traffic have none of these.
CROSS = _columns(
    (
        "cross_flows",
        "",
        "JSON: each cross flow: spec, sender cc, start and end seen, Mbit/s (life, trial)",
    ),
    (
        "cross_window_s",
        "s",
        "the trial's transfer at the client, first to last packet: the window the shares are of",
    ),
    ("trial_mbit", "Mbit/s", "the trial's IP bytes at the client over the window"),
    ("cross_mbit", "Mbit/s", "the down cross flows' IP bytes at the client over the window"),
    ("jain_index", "", "Jain's fairness index over the trial and the down bulk cross flows in the window"),
    ("trial_share", "", "the trial's share of the down bytes in the window"),
    ("cross_trace_file", "", "every flow's rate over the trial, 250 ms bins (cross/...)"),
)
# Derived by the analysis (analysis/load.py) for every row it reads; never written.
DERIVED = _columns(
    (
        "transfer_cpu_pct",
        "%",
        "the client's CPU over a cloud transfer: a browser's over its download, else the container's",
    ),
)
SWEEP_PREFIX = "param_"  # a swept axis's value, e.g. param_server.tcp_cc
CLASH_PREFIX = "tool_"  # a tool value that disagrees with an axis of the same name

COLUMNS: dict[str, Column] = {
    c.name: c
    for group in (
        AXES,
        TOOL,
        TOOL_OPTIONAL,
        STREAMS,
        BROWSER,
        VIDEO_DOWNLOAD,
        EXECUTOR,
        RUNNER,
        STREAMING,
        LOSS_RESPONSE,
        CAPTURE,
        WIRE,
        CROSS,
        DERIVED,
    )
    for c in group
}

# Keys a tool's row must not set (issue 46): the runner's bookkeeping, which identifies the
# trial and the run, and what the executor measures around the tool or names in the run
# directory. A tool (a stack's image, a browser) is not trusted to say which trial it was or
# where a file lies: a row that sets one is an error row (runner.owned_key_error). Not the
# axes a tool may echo in its own spelling (tool, protocol: kept as tool_<key>), nor
# cpu_bound, which the browser judges itself.
RUNNER_OWNED: frozenset[str] = frozenset(
    {
        "run_id",
        "trial_id",
        "condition",
        "condition_label",
        "unit",
        *(c.name for c in RUNNER),
        *(c.name for c in LOSS_RESPONSE),
    }
)
EXECUTOR_OWNED: frozenset[str] = frozenset(
    {
        *(c.name for c in EXECUTOR if c.name != "cpu_bound"),
        *(c.name for c in CAPTURE),
        *(c.name for c in WIRE),
        *(c.name for c in CROSS),
        "trace_file",  # the executor writes the tool's `trace` there and names it
    }
)
OWNED_PREFIXES: tuple[str, ...] = (SWEEP_PREFIX,)  # param_<axis>: the condition's swept values


def owned_keys(
    tool_row: dict[str, object], owned: frozenset[str] = RUNNER_OWNED | EXECUTOR_OWNED
) -> list[str]:
    """The keys of a tool's row that only quicbed may write, sorted (empty: the row is fine)."""
    return sorted(k for k in tool_row if k in owned or str(k).startswith(OWNED_PREFIXES))


def owned_key_error(owned: list[str]) -> str:
    """An error row's reason for a tool row that set quicbed's keys (a few named: a hostile
    tool may set thousands)."""
    shown = ", ".join(owned[:5]) + (f" and {len(owned) - 5} more" if len(owned) > 5 else "")
    return f"tool row: sets {shown}, which only quicbed writes (rowschema.RUNNER_OWNED, EXECUTOR_OWNED)"


class ToolRowError(ValueError):
    """A tool's output that is not rows quicbed takes: the reason, for the trial's error row."""


def tool_rows(stdout: str) -> list[dict[str, Any]]:
    """The rows a tool printed (its lines that start with '{'), bounded: the output at most
    limits.TOOL_OUTPUT_MAX_BYTES, a row line at most ROW_LINE_MAX_BYTES, each a JSON object
    that sets none of quicbed's own keys (owned_keys). Raises ToolRowError, naming the line,
    never quoting it."""
    if len(stdout) > limits.TOOL_OUTPUT_MAX_BYTES:
        raise ToolRowError(f"tool output: over {limits.TOOL_OUTPUT_MAX_BYTES // 2**20} MiB")
    rows = []
    for number, line in enumerate(stdout.split("\n"), 1):
        if not line.startswith("{"):
            continue
        if len(line) > limits.ROW_LINE_MAX_BYTES:
            raise ToolRowError(
                f"tool output line {number}: a row over {limits.ROW_LINE_MAX_BYTES // 2**20} MiB"
            )
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            raise ToolRowError(f"tool output line {number}: not a JSON row") from None
        if not isinstance(row, dict):
            raise ToolRowError(f"tool output line {number}: not a JSON object")
        owned = owned_keys(row)
        if owned:
            raise ToolRowError(owned_key_error(owned))
        rows.append(row)
    return rows


# Every row has these, even when the tool or the executor did not supply them.
RUNNER_DEFAULTS: dict[str, object] = {
    "error": None,
    "connection_time_ms": None,
    "client_cpu_ms": None,
    "ttfb_ms": None,
    "download_time_ms": None,
    "throughput_mbps": None,
    "cpu_client_pct": None,
    "cpu_server_pct": None,
    "host_cpu_other_pct": None,
    "host_steal_pct": None,
    "cpu_bound": False,
}

# What the analysis assumes of a row a run may lack (older runs, other workloads).
_NAN = math.nan
ANALYSIS_DEFAULTS: dict[str, object] = {
    "run_id": "",
    "trial_id": "",
    "condition": "default",
    "condition_label": None,
    "unit": None,  # rows from before units
    "profile": "",
    "server": "",
    "client": "",
    "workload": "web",
    "object": "",
    "repetition": _NAN,
    "rtt_ms": _NAN,
    "rate_down_mbit": _NAN,
    "rate_up_mbit": _NAN,
    "loss_pct": 0.0,
    "bytes": _NAN,
    "connection_time_ms": _NAN,
    "client_cpu_ms": _NAN,
    "client_turn_ms": _NAN,  # WIRE: absent where no capture said them
    "server_turn_ms": _NAN,
    "wire_rtts": _NAN,
    "ttfb_ms": _NAN,
    "download_time_ms": _NAN,
    "throughput_mbps": _NAN,
    "cpu": None,
    "cpu_client_pct": _NAN,
    "cpu_server_pct": _NAN,
    "host_cpu_other_pct": _NAN,
    "host_steal_pct": _NAN,
    "cpu_bound": False,
    "calib_rtt_ms": _NAN,
    "calib_passed": True,
    "calib_forced": False,
    "error": "",
    "startup_delay_ms": _NAN,
    "stall_count": _NAN,
    "stall_durations_ms": None,
    "quality_switches": _NAN,
    "lowest_quality": None,
    "first_rendition": None,
    "page_load_time_ms": _NAN,
    "dom_content_loaded_ms": _NAN,
    "fcp_ms": _NAN,
    "lcp_ms": _NAN,
    "browser_cpu_ms": _NAN,
    "browser_cpu_pct": _NAN,
    "stall_ms": _NAN,
    "stall_total_ms": _NAN,
}

# The values of the `protocol` column: QUIC and the two TLS versions over TCP.
PROTOCOLS: tuple[str, ...] = ("quic", "tls1.2", "tls1.3")

# The metrics `expect:` lines and summaries name -> their column.
METRICS: dict[str, str] = {
    "connection_time": "connection_time_ms",
    "ttfb": "ttfb_ms",
    "download_time": "download_time_ms",
    "throughput": "throughput_mbps",
    "page_load_time": "page_load_time_ms",
    "dom_content_loaded": "dom_content_loaded_ms",
    "fcp": "fcp_ms",
    "lcp": "lcp_ms",
}
# What a `decide:` line may compare (analysis/decisions.py): the metrics, and the figures of
# the paper's findings that are not transfer times (the client's CPU, a player's startup
# delay and time stalled).
DECIDABLE: dict[str, str] = METRICS | {
    "cpu_client": "cpu_client_pct",
    "startup_delay": "startup_delay_ms",
    "stall_total": "stall_total_ms",
}
# Protocol behaviour that `expect:` lines may judge but `quicbed compare` does not (counts and
# versions, not times): name -> column.
CHECKS: dict[str, str] = {
    "server_http": "server_http",
    "server_requests": "server_requests",
    "tcp_retrans": "server_tcp_retrans",
    "resumed": "resumed",
    "early_data": "early_data_bytes",
}


def trace_path(trial_id: str) -> str:
    """Where a trial's trace lives in its run directory (trial ids contain slashes)."""
    return f"{TRACES_DIR}/{trial_id.replace('/', '~')}.json"


def cross_trace_path(trial_id: str) -> str:
    """Where a trial's per-flow rates over time live in its run directory."""
    return f"{CROSS_DIR}/{trial_id.replace('/', '~')}.json"


def capture_dir(trial_id: str) -> str:
    """A trial's capture directory, relative to its run directory (trial ids contain slashes)."""
    return f"{TRIALS_DIR}/{trial_id.replace('/', '~')}"


# A run's id names its directory under results/ (and a report's): letters, digits, '.', '_'
# and '-', starting with a letter or digit, at most 128 characters and without '..', so no id
# read from a manifest or a command line can name a directory elsewhere. Made by
# store.new_run_id as <experiment name>-<UTC time>[-N]; the name is held to the same rule.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def run_id_problem(run_id: object) -> str | None:
    """Why `run_id` is not a run id (one line, the id shortened), or None when it is one."""
    if isinstance(run_id, str) and RUN_ID_PATTERN.fullmatch(run_id) and ".." not in run_id:
        return None
    shown = repr(run_id)[:60]
    return (
        f"bad run id {shown}: use letters, digits, '.', '_' and '-', starting with a letter or "
        "digit, without '..', at most 128 characters"
    )


class RunPathError(ValueError):
    """A row names a path that is not a plain relative one inside its run directory."""


def run_file(run_dir: Path, rel: object) -> Path:
    """The path a row names (trace_file, cross_trace_file, capture_files) joined to its run
    directory, refused (RunPathError) unless it is a plain relative name inside it: no '..',
    '.', empty part or absolute start, and no symbolic link on the way, so a row of a hostile
    tool or results folder cannot read or write a file elsewhere on the host."""
    if not isinstance(rel, str) or not rel or len(rel) > 1024 or "\0" in rel:
        raise RunPathError("not a relative path")
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):  # "" also catches a leading "/"
        raise RunPathError(f"{rel[:80]!r} is not a plain relative path inside the run directory")
    path = run_dir
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise RunPathError(f"{rel[:80]!r} passes a symbolic link")
    return path


def misplaced_files(row: dict[str, Any], trial_id: str) -> list[str]:
    """The keys of a trial's row that name a file other than the trial's own (trace_path,
    cross_trace_path, under capture_dir): the executor only ever names those, so any other
    came from the tool, and would point the head or the report elsewhere."""
    own = {"trace_file": trace_path(trial_id), "cross_trace_file": cross_trace_path(trial_id)}
    bad = [k for k, rel in own.items() if k in row and row[k] is not None and row[k] != rel]
    files = row.get("capture_files")
    if files is not None and not (
        isinstance(files, list) and all(_in_capture_dir(f, trial_id) for f in files)
    ):
        bad.append("capture_files")
    return bad


def _in_capture_dir(rel: object, trial_id: str) -> bool:
    """One of the capture's fixed files (CAPTURE_FILES) in the trial's capture directory."""
    return rel in {f"{capture_dir(trial_id)}/{name}" for name in CAPTURE_FILES.values()}


def is_known(column: str) -> bool:
    """A column of the schema, a swept axis or a clash kept from a tool row."""
    return column in COLUMNS or column.startswith((SWEEP_PREFIX, CLASH_PREFIX))


def unit(column: str) -> str:
    return COLUMNS[column].unit if column in COLUMNS else ""
