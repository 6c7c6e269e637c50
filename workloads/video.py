"""The video workload: a DASH stream played by a browser in dash.js (its rows are the derived
kind `streaming`), or fetched by the paper's video_download (audio and video in parallel,
paced like a player's playout).

Content under video/ of the store (workloads/store.py), made by ffmpeg (on the host, else the
quicbed/tools image): video/dash/manifest.mpd + segments, a 144p-720p ladder in 2 s segments,
and video/progressive/{1,10,50,100}MB.mp4. Reproducible only for the same ffmpeg build; the
manifest records what was made and with which parameters (remade when they change). The
player page a browser plays it in is workloads/player.py's.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from quicbed.dockercli import PULL_NEVER, docker, image_present
from quicbed.paths import REPO
from quicbed.topology.hosts import LABEL
from quicbed.topology.marker import scope

from . import player
from .base import Metric, ReportSection, TrialPath, WorkloadKind
from .store import ContentError, MiB, hash_file, locked, up_to_date

STREAMING = "streaming"  # a video played by a browser

VIDEO_CONNECTION = Metric("connection_time_ms", "Connection time", "ms", ("video",))
VIDEO_THROUGHPUT = Metric("throughput_mbps", "Download rate", "Mbit/s", ("video",), per_rtt=False)
VIDEO_STALL = Metric("stall_ms", "Playout stall time", "ms", ("video",), per_rtt=False)
STARTUP = Metric("startup_delay_ms", "Startup delay", "ms", (STREAMING,), per_rtt=False)
STALL_TIME = Metric("stall_total_ms", "Stall time", "ms", (STREAMING,), per_rtt=False)
SWITCHES = Metric("quality_switches", "Quality switches", "", (STREAMING,), per_rtt=False)

# (name, width, height, video kbit/s). Heights are the usual ladder; setdar=16/9 makes every
# rendition the same display aspect, which the DASH muxer requires ("Conflicting aspect
# ratios") when widths like 426 and 854 are not exactly 16:9.
LADDER = [
    ("144p", 256, 144, 150),
    ("240p", 426, 240, 300),
    ("360p", 640, 360, 700),
    ("480p", 854, 480, 1200),
    ("720p", 1280, 720, 2500),
]
AUDIO_KBPS = 128
VIDEO_SECONDS = 180  # the paper streamed for 3 minutes; experiments play up to this much
FPS = 30
SEGMENT_SECONDS = 2
PROGRESSIVE_MB = (1, 10, 50, 100)
PROGRESSIVE_KBPS = 4000  # 720p; the files are cut to length from a looped clip
TOOLS_IMAGE = "quicbed/tools:dev"


def ffmpeg_runner(root: Path) -> tuple[list[str], str]:
    """argv prefix running ffmpeg with root visible, and root's path as ffmpeg sees it.

    ffmpeg on the host if installed, else the quicbed/tools image (images/build.sh tools).
    """
    if shutil.which("ffmpeg"):
        return ["ffmpeg"], str(root)
    if not image_present(TOOLS_IMAGE):
        raise ContentError(
            f"video needs ffmpeg: install it on the host or build {TOOLS_IMAGE} "
            f"({REPO}/images/build.sh tools)"
        )
    return [
        "docker",
        "run",
        "--rm",
        *PULL_NEVER,
        "--label",
        LABEL,  # `quicbed clean` finds one left by a killed run
        *(["--label", f"{LABEL}.scope={owner}"] if (owner := scope()) else []),
        "--network",
        "none",
        "-v",
        f"{root.resolve()}:/work",
        "-w",
        "/work",
        TOOLS_IMAGE,
        "ffmpeg",
    ], "/work"


def _ffmpeg(prefix: list[str], args: list[str], timeout: float) -> None:
    """Run ffmpeg; a container of it is removed when the call ends early (a timeout, Ctrl-C):
    stopping the docker client alone leaves it encoding, and its CPU skews the next path."""
    container = None
    if prefix[0] == "docker":
        container = f"quicbed-ffmpeg-{os.getpid()}-{secrets.token_hex(4)}"
        prefix = [*prefix[:2], "--name", container, *prefix[2:]]
    cmd = [*prefix, "-hide_banner", "-loglevel", "error", "-y", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except BaseException:
        if container:
            docker("rm", "-f", container)
        raise
    if proc.returncode != 0:
        raise ContentError(f"ffmpeg failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")


def _source_args(seconds: int) -> list[str]:
    # Noise keeps x264 at its target rate (testsrc2 alone compresses to almost nothing).
    return [
        "-f",
        "lavfi",
        "-i",
        f"testsrc2=size=1280x720:rate={FPS}:duration={seconds}",
        "-f",
        "lavfi",
        "-i",
        f"sine=frequency=440:sample_rate=48000:duration={seconds}",
    ]


def _x264_args(kbps: int) -> list[str]:
    gop = FPS * SEGMENT_SECONDS
    return [
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-profile:v",
        "main",
        "-pix_fmt",
        "yuv420p",
        "-b:v",
        f"{kbps}k",
        "-maxrate",
        f"{kbps}k",
        "-bufsize",
        f"{2 * kbps}k",
        "-g",
        str(gop),
        "-keyint_min",
        str(gop),
        "-sc_threshold",
        "0",
        "-x264-params",
        "nal-hrd=cbr",
        "-threads",
        "2",
    ]


def _dash_args(seconds: int, out: str) -> list[str]:
    n = len(LADDER)
    split = f"[0:v]noise=alls=12:allf=t,split={n}" + "".join(f"[s{i}]" for i in range(n))
    scales = ";".join(f"[s{i}]scale={w}:{h},setdar=16/9[v{i}]" for i, (_, w, h, _) in enumerate(LADDER))
    args = ["-filter_complex", f"{split};{scales}"]
    for i in range(n):
        args += ["-map", f"[v{i}]"]
    args += ["-map", "1:a"]
    # Per-stream rates (the x264 options apply to all video streams).
    codec = _x264_args(LADDER[0][3])
    args += codec
    for i, (_, _, _, kbps) in enumerate(LADDER):
        args += [f"-b:v:{i}", f"{kbps}k", f"-maxrate:v:{i}", f"{kbps}k", f"-bufsize:v:{i}", f"{2 * kbps}k"]
    args += [
        "-c:a",
        "aac",
        "-b:a",
        f"{AUDIO_KBPS}k",
        "-ac",
        "2",
        "-fflags",
        "+bitexact",
        "-flags:v",
        "+bitexact",
        "-flags:a",
        "+bitexact",
        "-f",
        "dash",
        "-seg_duration",
        str(SEGMENT_SECONDS),
        "-use_template",
        "1",
        "-use_timeline",
        "0",
        "-adaptation_sets",
        "id=0,streams=v id=1,streams=a",
        out,
    ]
    return args


def ensure_video(root: Path, seconds: int = VIDEO_SECONDS) -> None:
    """DASH ladder (video/dash) and progressive MP4s (video/progressive), remade only when
    the parameters (length, ladder, rates) change; manifest.json lists every file."""
    root = Path(root)
    params = {
        "seconds": seconds,
        "ladder": LADDER,
        "audio_kbps": AUDIO_KBPS,
        "fps": FPS,
        "segment_seconds": SEGMENT_SECONDS,
        "progressive_mb": PROGRESSIVE_MB,
        "progressive_kbps": PROGRESSIVE_KBPS,
    }
    params = json.loads(json.dumps(params))  # tuples -> lists, to compare with the stored JSON
    with locked(root) as manifest:
        if up_to_date(root, manifest, "video/", params):
            return
        for rel in [rel for rel in manifest["files"] if rel.startswith("video/")]:
            manifest["files"].pop(rel)
            manifest["files"].pop(rel)
        shutil.rmtree(root / "video", ignore_errors=True)
        (root / "video/dash").mkdir(parents=True)
        (root / "video/progressive").mkdir(parents=True)
        prefix, seen_root = ffmpeg_runner(root)
        _ffmpeg(
            prefix,
            [*_source_args(seconds), *_dash_args(seconds, f"{seen_root}/video/dash/manifest.mpd")],
            timeout=60 * seconds,
        )
        _make_progressive(prefix, root, seen_root)
        for path in sorted((root / "video").rglob("*")):
            if path.is_file():
                os.chmod(path, 0o644)
                manifest["files"][str(path.relative_to(root))] = hash_file(path)
        manifest["params"]["video"] = params
        manifest["params"]["video_tool"] = " ".join(prefix[-2:])


def _make_progressive(prefix: list[str], root: Path, seen: str) -> None:
    """One 20 s 720p clip, then each size by looping it with -c copy (fast), cut by duration."""
    clip_seconds = 20
    clip = f"{seen}/video/progressive/.clip.mp4"
    _ffmpeg(
        prefix,
        [
            *_source_args(clip_seconds),
            "-vf",
            "noise=alls=12:allf=t",
            *_x264_args(PROGRESSIVE_KBPS),
            "-c:a",
            "aac",
            "-b:a",
            f"{AUDIO_KBPS}k",
            "-fflags",
            "+bitexact",
            "-movflags",
            "+faststart",
            clip,
        ],
        timeout=600,
    )
    # The clip's real rate (CBR filler and container overhead included) sets each cut.
    bytes_per_s = (root / "video/progressive/.clip.mp4").stat().st_size / clip_seconds
    for mb in PROGRESSIVE_MB:
        duration = mb * MiB / bytes_per_s
        loops = int(duration // clip_seconds) + 1
        _ffmpeg(
            prefix,
            [
                "-stream_loop",
                str(loops),
                "-i",
                clip,
                "-t",
                f"{duration:.3f}",
                "-c",
                "copy",
                "-fflags",
                "+bitexact",
                "-movflags",
                "+faststart",
                f"{seen}/video/progressive/{mb}MB.mp4",
            ],
            timeout=300,
        )
    (root / "video/progressive/.clip.mp4").unlink()


# A playback fetches its page, dash.js and first segments before it plays: Chromium's trials
# of 6 and 12 s of media took 8.1 and 14.2 s on india without loss, 15-20 s (6 s) at 5 % and
# 27-35 s (12 s) at 10 %, where the Mathis rate is 0.8 and 0.56 Mbit/s (2026-11-29, uml).
PLAYER_MBIT = 8.0
TOP_MEDIA_MBIT_S = (LADDER[-1][3] + AUDIO_KBPS) / 1000  # what video_download fetches a second


class Video(WorkloadKind):
    """A DASH stream (the ladder above: video renditions and audio, 2 s segments), played for
    `duration_s` seconds of media from its manifest."""

    kind, order, list_key, what, default = "video", 3, "modes", "video mode", ("dash",)
    extra_keys = {"duration_s": (180, 1, VIDEO_SECONDS)}
    settings_key, settings, settings_flag = "player", player.SETTINGS, "--player-settings"
    derived = {STREAMING: ("startup_delay_ms", "stall_count")}
    demand_limited = ("video", STREAMING)
    # Median of cpu_client_pct + cpu_server_pct, error-free rows (2-core host, delayline
    # router; 2026-11-25/26: paper-video, abr-trace).
    cpu_cores = {"chromium": 0.27}  # 22 playbacks (the issue: 13-29 % of a core)
    sections = (
        ReportSection(
            "Video download",
            ("video",),
            "The paper's video_download: audio and video fetched in parallel (two TLS/TCP "
            "connections, or one QUIC connection with two streams), paced like a player's "
            "playout: handshake time and overall download rate.",
            metrics=(VIDEO_CONNECTION, VIDEO_THROUGHPUT, VIDEO_STALL),
            figures="video",
            compared=(VIDEO_CONNECTION, VIDEO_THROUGHPUT),
            cdfs=(VIDEO_CONNECTION,),
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

    def make_content(self, root: Path) -> None:
        # One length for every experiment (the paper's 3 minutes): a shorter run plays part,
        # and a cache remade at another length would cost every later caller an encode.
        ensure_video(root, VIDEO_SECONDS)

    def prepare_content(self, root: Path, objects: tuple[str, ...]) -> None:
        super().prepare_content(root, objects)
        player.ensure_player(root)  # the DASH player page a browser client plays it in

    def trial_seconds(self, name: str, duration_s: float | None, path: TrialPath) -> float:
        played = duration_s or 0.0
        if path.plays_streams:
            # A player plays in real time once it has its page, dash.js and first segments.
            return played + PLAYER_MBIT / path.rate_mbit + path.start_s
        # The paper's video_download takes the top rendition and audio as fast as the path
        # gives them: its buffer holds a short session whole.
        return path.transfer_seconds(played * TOP_MEDIA_MBIT_S * 1e6 / 8)
