// QoE of one DASH playback in dash.js, from the player's and the video element's own events.
// Query: mpd (manifest URL, same origin), duration (seconds of media to play), and dash.js
// settings as JSON in `settings` (merged into its defaults, e.g. {"streaming": {"buffer":
// {"bufferTimeDefault": 12}}}: an experiment's `player:` settings, servers/player.py SETTINGS).
// The result is window.quicbedQoE; `done` turns true when the playhead reached `duration`,
// the stream ended, or the player reported a fatal error.
"use strict";

function quicbedPlay(video, query) {
  // Segments are resources too: keep every entry so each one's protocol can be checked.
  performance.setResourceTimingBufferSize(100000);
  const duration = Number(query.get("duration") || "60");
  const qoe = window.quicbedQoE = {
    done: false, error: "", requested_ms: null, first_frame_ms: null, stalls: [],
    switches: [], trace: [], seconds_at: {}, settings: null, dash_version: "",
  };
  const now = () => performance.now();
  let stallStart = null;
  let lastSample = null;  // {t, height, bitrate} of the last 250 ms sample while playing

  const player = dashjs.MediaPlayer().create();
  qoe.dash_version = player.getVersion();
  player.updateSettings(JSON.parse(query.get("settings") || "{}"));
  // Recorded in every row: the buffer targets and which ABR rules decide (dash.js defaults
  // unless the experiment's `settings` changed them).
  const s = player.getSettings().streaming;
  const rules = {};
  for (const [name, rule] of Object.entries(s.abr.rules || {})) rules[name] = rule.active;
  qoe.settings = {
    buffer: {bufferTimeDefault: s.buffer.bufferTimeDefault, bufferToKeep: s.buffer.bufferToKeep,
             bufferTimeAtTopQuality: s.buffer.bufferTimeAtTopQuality,
             initialBufferLevel: s.buffer.initialBufferLevel, stallThreshold: s.buffer.stallThreshold},
    abr: {rules, autoSwitchBitrate: s.abr.autoSwitchBitrate, initialBitrate: s.abr.initialBitrate,
          maxBitrate: s.abr.maxBitrate, minBitrate: s.abr.minBitrate},
  };

  function representation() {
    try {
      const r = player.getCurrentRepresentationForType("video");
      if (r) return {height: r.height || video.videoHeight, bitrate: (r.bandwidth || 0) / 1000};
    } catch (e) { /* not ready yet */ }
    return {height: video.videoHeight, bitrate: null};
  }

  function finish(why) {
    if (qoe.done) return;
    if (stallStart !== null) qoe.stalls.push({start_ms: stallStart, end_ms: now(), open: true});
    stallStart = null;
    qoe.end_reason = why;
    const q = video.getVideoPlaybackQuality ? video.getVideoPlaybackQuality() : null;
    qoe.dropped_frames = q ? q.droppedVideoFrames : null;
    qoe.total_frames = q ? q.totalVideoFrames : null;
    qoe.played_s = video.currentTime;
    qoe.done = true;
    player.reset();
  }

  const first = () => {
    if (qoe.first_frame_ms === null) qoe.first_frame_ms = now();
  };
  if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(first);
  video.addEventListener("playing", () => {
    first();  // a browser without frame callbacks: the first `playing` is the first frame
    if (stallStart !== null) {
      qoe.stalls.push({start_ms: stallStart, end_ms: now()});
      stallStart = null;
    }
  });
  // A stall: the element waits for data after playback began (no seeking here).
  video.addEventListener("waiting", () => {
    if (qoe.first_frame_ms !== null && stallStart === null && !video.seeking) stallStart = now();
  });
  video.addEventListener("ended", () => finish("ended"));
  video.addEventListener("timeupdate", () => {
    if (video.currentTime >= duration) finish("duration");
  });
  player.on(dashjs.MediaPlayer.events.QUALITY_CHANGE_RENDERED, (e) => {
    if (e.mediaType !== "video") return;
    const from = e.oldRepresentation || {}, to = e.newRepresentation || {};
    qoe.switches.push({t_ms: now(), from_height: from.height || null, to_height: to.height || null,
                       from_kbps: (from.bandwidth || 0) / 1000, to_kbps: (to.bandwidth || 0) / 1000});
  });
  player.on(dashjs.MediaPlayer.events.ERROR, (e) => {
    qoe.error = "player: " + JSON.stringify(e.error || e).slice(0, 300);
    finish("error");
  });

  // Time at each resolution and the bitrate played, integrated every 250 ms while playing.
  setInterval(() => {
    const t = now();
    const playing = qoe.first_frame_ms !== null && stallStart === null && !video.paused;
    if (lastSample && playing) {
      const dt = (t - lastSample.t) / 1000;
      const key = String(lastSample.height);
      qoe.seconds_at[key] = (qoe.seconds_at[key] || 0) + dt;
    }
    lastSample = playing ? {t, ...representation()} : null;
  }, 250);
  // The per-second trace, for plotting beside the rows.
  setInterval(() => {
    const r = representation();
    let buffer = null;
    try { buffer = player.getBufferLength("video"); } catch (e) { /* before the stream */ }
    qoe.trace.push({t_s: Math.round(now()) / 1000, buffer_s: buffer, bitrate_kbps: r.bitrate,
                    height: r.height, stalled: stallStart !== null, position_s: video.currentTime});
  }, 1000);

  qoe.requested_ms = now();  // play is requested with the source (autoplay)
  player.initialize(video, query.get("mpd"), true);
}
