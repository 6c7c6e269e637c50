"""Video playback in the headless-Chromium client (browser_perf --duration: dash.js in the
testbed's player page, workloads/player.py) on emulated paths: a fast path plays the top rendition
without a stall; a path slower than the lowest rendition stalls, and the QoE agrees with the
per-second trace; every segment goes over the protocol asked for; a broken stream is an error
row. Playback is real time, so each trial plays 16 s of the 180 s ladder."""

from __future__ import annotations

import json

import pytest

from quicbed.clients.tools import TOOLS
from quicbed.paths import CACHE
from quicbed.servers.accesslog import read_access_log
from quicbed.servers.descriptors import get_server
from quicbed.servers.testbed import CLIENT_PKI, SERVER_NAME, served_testbed
from quicbed.topology.net import server_address
from quicbed.topology.profiles import load_profile
from quicbed.workloads import ensure_content, player, video

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

PLAY_S = 16
MPD = f"https://{SERVER_NAME}/video/dash/manifest.mpd"
HOP = {"quic": "h3", "tls1.3": "h2", "tls1.2": "h2"}
TOP, BOTTOM = video.LADDER[-1][0], video.LADDER[0][0]
# The lowest rendition and the audio: a link below this cannot keep up with any rendition.
LOWEST_KBPS = video.LADDER[0][3] + video.AUDIO_KBPS


def _content():
    root = CACHE / "content"
    ensure_content(root, {"video"})
    player.ensure_player(root)
    return root


@pytest.fixture(scope="module")
def testbed(tmp_path_factory, clean_slate):
    """A path factory: one profile at a time, nginx serving the ladder and the player."""
    root = _content()
    tmp = tmp_path_factory.mktemp("player")

    def up(profile):
        return served_testbed(
            profile,
            ["nginx"],
            log_root=tmp / profile.name / "logs",
            pki_dir=tmp / "pki",
            content_dir=root,
            start=True,
            client_image=TOOLS["chromium"].image,  # the browser image, as the client container
        )

    return up, tmp


def _play(
    tb,
    hosts,
    protocol: str,
    url: str = MPD,
    timeout: int = PLAY_S + 40,
    extra: tuple[str, ...] = (),
    play_s: int = PLAY_S,
) -> dict:
    address = server_address(tb.servers.index(hosts["nginx"]))
    argv = TOOLS["chromium"].argv(
        url,
        f"{SERVER_NAME}:443:{address}",
        f"{CLIENT_PKI}/ca.pem",
        timeout,
        {"protocol": protocol},
        {"--duration": str(play_s)},
    )
    argv += extra
    proc = tb.client.exec(argv, timeout=timeout + 30)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 1, (proc.returncode, proc.stderr[-800:])
    return rows[0]


def _nothing_left(tb) -> None:
    """No browser process (Chromium, its crash handler, Playwright's driver), no temp dir."""
    procs = tb.client.exec(["ps", "-eo", "args="]).stdout.splitlines()
    dirs = tb.client.exec(["sh", "-c", "ls -d /tmp/quicbed-browser-* 2>/dev/null"]).stdout
    left = [p for p in procs if any(k in p for k in ("chromium", "crashpad", "playwright"))]
    assert not left and not dirs.split(), (left, dirs)


def test_a_fast_path_plays_the_top_rendition_without_a_stall(testbed):
    up, tmp = testbed
    with up(load_profile("germany")) as (tb, hosts):
        for protocol in ("quic", "tls1.3"):
            row = _play(tb, hosts, protocol)
            assert row["error"] == "", row["error"]
            # Starts within a few segment times (2 s each), never stalls, reaches the top.
            assert 0 < row["startup_delay_ms"] < 2 * video.SEGMENT_SECONDS * 1000, row
            assert row["stall_count"] == 0 and row["stall_total_ms"] == 0
            assert row["seconds_at_resolution"].get(TOP, 0) > PLAY_S / 2, row
            assert row["played_s"] >= PLAY_S - 0.5
            # Every request of the playback (page, dash.js, manifest, segments) over the
            # protocol asked for, and the server saw the segments so.
            assert set(row["resource_protocols"]) == {HOP[protocol]}, row["resource_protocols"]
            assert row["resources"] >= PLAY_S / video.SEGMENT_SECONDS
            assert row["player"].startswith("dash.js ") and row["player_settings"]["abr"]
            trace = row["trace"]
            assert len(trace) >= PLAY_S - 1 and not any(p["stalled"] for p in trace)
        log = read_access_log(tmp / "germany" / "logs" / "nginx", get_server("nginx"))
        segments = [e for e in log if e["path"].startswith("/video/dash/chunk")]
        assert {e["proto"] for e in segments} == {"HTTP/3.0", "HTTP/2.0"}
        _nothing_left(tb)


def test_a_path_slower_than_the_lowest_rendition_stalls_as_the_trace_shows(testbed):
    up, _ = testbed
    # Below the lowest rendition + its audio (the page and its 0.7 MB dash.js load slowly too).
    slow_mbit = round(0.8 * LOWEST_KBPS / 1000, 3)
    slow = load_profile("india", {"down.rate_mbit": str(slow_mbit)})
    with up(slow) as (tb, hosts):
        # 10 s of media: the stalls show within it, and the page alone loads for ~25 s here.
        row = _play(tb, hosts, "quic", timeout=PLAY_S * 8, play_s=10)
        assert row["error"] == "", row["error"]
        assert row["stall_count"] >= 1 and row["stall_total_ms"] > 1000, row
        assert row["lowest_quality"] == BOTTOM, row["seconds_at_resolution"]
        # The stall time agrees with the seconds the per-second trace saw stalled.
        stalled = sum(p["stalled"] for p in row["trace"])
        assert abs(stalled - row["stall_total_ms"] / 1000) <= 2 + 0.1 * stalled, (stalled, row)
        assert row["stall_count"] == len(row["stall_durations_ms"])
        _nothing_left(tb)


def test_player_settings_are_in_force_and_a_missing_stream_is_an_error_row(testbed):
    """The experiment's `player:` settings, as the runner passes them (Video.tool_args), reach
    dash.js: a bitrate cap below 480p keeps a fast path at 360p, and the row records them."""
    from quicbed.workloads import WORKLOADS

    up, _ = testbed
    chosen = {
        "max_bitrate_kbps": 1000,
        "buffer_time_default_s": 6,
        "abr_rules": ("throughputRule", "insufficientBufferRule"),
    }
    args = WORKLOADS["video"].tool_args(PLAY_S, chosen)
    with up(load_profile("germany")) as (tb, hosts):
        row = _play(tb, hosts, "quic", extra=("--player-settings", args["--player-settings"]))
        assert row["error"] == "", row["error"]
        settings = row["player_settings"]
        assert settings["buffer"]["bufferTimeDefault"] == 6
        assert settings["abr"]["maxBitrate"]["video"] == 1000
        assert {k for k, on in settings["abr"]["rules"].items() if on} == set(chosen["abr_rules"])
        # 100 Mbit/s would carry 720p; the cap holds the player at or below 360p (700 kbit/s).
        played = {res for res, seconds in row["seconds_at_resolution"].items() if seconds > 0}
        assert played and played <= {"144p", "240p", "360p"}, row["seconds_at_resolution"]
        assert row["stall_count"] == 0
        # A stream that does not exist: an error row, and the browser is gone all the same
        # (on this fast path: on the slow one the page alone takes half a minute).
        broken = _play(tb, hosts, "quic", url=MPD.replace("manifest.mpd", "missing.mpd"))
        assert broken["error"].startswith(("player:", "http:")), broken["error"]
        _nothing_left(tb)
