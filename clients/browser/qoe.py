"""Streaming QoE from one dash.js playback (workloads/player/qoe.js's window.quicbedQoE): the
row's metrics, as analysis/README.md defines them. Pure: the browser client calls it in the
container, the unit tests on the host."""

from __future__ import annotations

from typing import Any

# The row's columns summarize() fills (quicbed/rowschema.py's STREAMING group).
COLUMNS = (
    "startup_delay_ms",
    "stall_count",
    "stall_durations_ms",
    "stall_total_ms",
    "longest_stall_ms",
    "quality_switches",
    "switches_up",
    "switches_down",
    "seconds_at_resolution",
    "first_rendition",
    "lowest_quality",
    "mean_height",
    "mean_bitrate_kbps",
    "dropped_frames",
    "total_frames",
    "played_s",
    "player",
    "player_settings",
)


def _height_label(height: object) -> str:
    return f"{int(height)}p" if isinstance(height, int | float) and height > 0 else ""


def first_rendition(qoe: dict[str, Any]) -> str | None:
    """The rendition the playback started at ("360p"), as dash.js chose it: nothing pins its
    start (issue 64), so QUIC's and TCP's sessions may start at different renditions, whose
    first segments differ in size, and the startup findings say so. The player's render
    event for the start (no rendition before it) names it; without one, the first switch
    rendered left it; without a switch, one rendition played throughout and the trace's
    first sample of it names it. None when no frame was rendered."""
    if not isinstance(qoe.get("first_frame_ms"), int | float):
        return None
    switches = qoe.get("switches") or []
    if switches:
        first = switches[0]
        label = _height_label(first.get("from_height") if first.get("from_kbps") else first.get("to_height"))
        if label:
            return label
    return next((label for p in qoe.get("trace") or [] if (label := _height_label(p.get("height")))), None)


def trace_since_play(qoe: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-second trace with t_s counted from the play request, not navigation start: the
    player page itself can take seconds to load over a lossy path, and the figures' time axis
    starts where the startup delay does."""
    requested = qoe.get("requested_ms")
    offset = requested / 1000.0 if isinstance(requested, int | float) else 0.0
    return [
        {**p, "t_s": round(p["t_s"] - offset, 3)} if isinstance(p.get("t_s"), int | float) else p
        for p in qoe.get("trace") or []
    ]


def summarize(qoe: dict[str, Any]) -> dict[str, Any]:
    """The row's QoE columns from the player's record (times in ms from navigation start)."""
    requested, first = qoe.get("requested_ms"), qoe.get("first_frame_ms")
    started = isinstance(first, int | float)
    # Stalls after startup only (the player's initial buffering is the startup delay).
    stalls = [
        s
        for s in qoe.get("stalls") or []
        if started and s.get("start_ms", 0) >= first and s.get("end_ms") is not None
    ]
    durations = [round(s["end_ms"] - s["start_ms"], 1) for s in stalls]
    # The first rendition rendered is the start, not a switch.
    switches = [s for s in qoe.get("switches") or [] if s.get("from_kbps")]
    up = sum((s.get("to_kbps") or 0) > (s.get("from_kbps") or 0) for s in switches)
    seconds_at = {
        _height_label(float(h)): round(t, 2)
        for h, t in (qoe.get("seconds_at") or {}).items()
        if h not in ("", "0", "null", "undefined") and t > 0
    }
    played = sum(seconds_at.values())
    heights = {label: int(label[:-1]) for label in seconds_at}
    trace = qoe.get("trace") or []
    rates = [(p.get("bitrate_kbps"), not p.get("stalled")) for p in trace]
    played_rates = [r for r, playing in rates if isinstance(r, int | float) and playing]
    return {
        "startup_delay_ms": round(first - requested, 1) if started and requested is not None else None,
        "stall_count": len(durations),
        "stall_durations_ms": durations,
        "stall_total_ms": round(sum(durations), 1),
        "longest_stall_ms": max(durations, default=0.0),
        "quality_switches": len(switches),
        "switches_up": up,
        "switches_down": len(switches) - up,
        "seconds_at_resolution": seconds_at,
        "first_rendition": first_rendition(qoe),
        "lowest_quality": min(heights, key=lambda k: heights[k]) if heights else None,
        "mean_height": round(sum(heights[k] * t for k, t in seconds_at.items()) / played, 1)
        if played
        else None,
        "mean_bitrate_kbps": round(sum(played_rates) / len(played_rates), 1) if played_rates else None,
        "dropped_frames": qoe.get("dropped_frames"),
        "total_frames": qoe.get("total_frames"),
        "played_s": qoe.get("played_s"),
        "player": f"dash.js {qoe.get('dash_version', '')}".strip(),
        "player_settings": qoe.get("settings"),
    }
