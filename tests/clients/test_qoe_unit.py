"""Streaming QoE from a player record (clients/browser/qoe.py) and the player's files
(workloads/player.py): pure logic, no browser."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from quicbed.workloads import player

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("qoe", REPO / "clients" / "browser" / "qoe.py")
qoe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qoe)

RECORD = {
    "requested_ms": 100.0,
    "first_frame_ms": 1300.0,
    # one stall before the first frame (startup, not counted), two after it, one still open
    "stalls": [
        {"start_ms": 500.0, "end_ms": 900.0},
        {"start_ms": 5000.0, "end_ms": 5750.0},
        {"start_ms": 9000.0, "end_ms": 9250.0},
        {"start_ms": 20000.0, "end_ms": None},
    ],
    "switches": [
        {"from_kbps": 0, "to_kbps": 150},  # the first rendition: not a switch
        {"from_kbps": 150, "to_kbps": 2500},
        {"from_kbps": 2500, "to_kbps": 700},
        {"from_kbps": 700, "to_kbps": 1200},
    ],
    "seconds_at": {"720": 10.0, "360": 5.0, "480": 5.0, "0": 0.5},
    "trace": [
        {"bitrate_kbps": 2500, "stalled": False},
        {"bitrate_kbps": 700, "stalled": True},
        {"bitrate_kbps": 700, "stalled": False},
    ],
    "dropped_frames": 3,
    "total_frames": 600,
    "played_s": 20.0,
    "dash_version": "5.2.1",
    "settings": {"buffer": {"stableBufferTime": 12}},
}


def test_the_metrics_as_analysis_defines_them():
    row = qoe.summarize(RECORD)
    assert row["startup_delay_ms"] == 1200.0  # requested -> first frame
    assert row["stall_durations_ms"] == [750.0, 250.0] and row["stall_count"] == 2
    assert row["stall_total_ms"] == 1000.0 and row["longest_stall_ms"] == 750.0
    assert (row["quality_switches"], row["switches_up"], row["switches_down"]) == (3, 2, 1)
    assert row["seconds_at_resolution"] == {"720p": 10.0, "360p": 5.0, "480p": 5.0}
    assert row["lowest_quality"] == "360p" and row["mean_height"] == (720 * 10 + 840 * 5) / 20
    assert row["mean_bitrate_kbps"] == 1600.0  # the stalled second is not played
    assert row["player"] == "dash.js 5.2.1" and row["dropped_frames"] == 3


def test_a_playback_that_never_started_has_no_startup_and_no_stalls():
    row = qoe.summarize(
        {"requested_ms": 5.0, "first_frame_ms": None, "stalls": [{"start_ms": 10.0, "end_ms": 20.0}]}
    )
    assert row["startup_delay_ms"] is None and row["stall_count"] == 0
    assert row["lowest_quality"] is None and row["mean_height"] is None


def test_the_player_is_the_pinned_dashjs_and_the_testbed_page(tmp_path, monkeypatch):
    cached = player.CACHE / "npm"
    version, _ = player.dashjs_release()
    files = player.player_files()  # fetched from the npm registry once, then cached
    assert set(files) == {"player/index.html", "player/qoe.js", "player/dash.mediaplayer.min.js"}
    page = files["player/index.html"].decode()
    assert 'src="dash.mediaplayer.min.js"' in page and "https://" not in page
    # A tarball that is not the pinned one is refused with the reason, never used.
    monkeypatch.setattr(player, "dashjs_release", lambda: (version, "sha512-AAAA"))
    with pytest.raises(player.PlayerError, match="integrity"):
        player.dashjs_tarball(cached)


def test_the_trace_counts_from_the_play_request_not_the_page_load():
    # dash.js and the page took 10.6 s over a lossy path; play was requested then
    record = {
        "requested_ms": 10_600.0,
        "trace": [{"t_s": 11.693, "buffer_s": None}, {"t_s": 12.693, "buffer_s": 2}],
    }
    assert [p["t_s"] for p in qoe.trace_since_play(record)] == [1.093, 2.093]
    assert qoe.trace_since_play({"trace": [{"t_s": 1.5}]}) == [{"t_s": 1.5}]  # no request: as is
    assert qoe.trace_since_play({}) == []


def test_the_first_rendition_is_where_dashjs_started_however_it_said_so():
    """The start's own render event names it; without one, the rendition the first switch
    left; without a switch, the trace's first height. Nothing rendered: no start."""
    started = {"first_frame_ms": 900.0}
    initial = {"from_kbps": 0, "to_kbps": 700, "to_height": 480}
    up = {"from_kbps": 700, "from_height": 480, "to_kbps": 2500, "to_height": 720}
    assert qoe.summarize({**started, "switches": [initial, up]})["first_rendition"] == "480p"
    assert qoe.summarize({**started, "switches": [up]})["first_rendition"] == "480p"
    trace = [{"height": 0}, {"height": 360}, {"height": 720}]  # 0: before the stream was known
    assert qoe.first_rendition({**started, "switches": [], "trace": trace}) == "360p"
    assert qoe.first_rendition({"first_frame_ms": None, "switches": [up], "trace": trace}) is None


def test_the_paper_lets_dashjs_choose_where_it_starts():
    """Issue 64: dash.js runs as deployed. No paper experiment, full or quick, gives the
    player a setting (a pinned initial bitrate or rendition range would fix its start), so
    the browser gets no --player-settings and dash.js's defaults hold."""
    from quicbed.experiments.schema import load_experiment

    for quick in (False, True):
        exp = load_experiment(REPO / "experiments" / "paper" / "video.yaml", quick=quick)
        assert exp.workload.kind == "video" and not dict(exp.workload.settings), exp.workload.settings
