"""What every browser driver's load shares: the load's directory and marker, the CPU sampler,
the player page, the playback's QoE, the page's timing script, cleanup. A driver
(chromium_driver.Load, firefox_driver.FirefoxLoad) subclasses BrowserLoad and adds run(),
failure() and its browser's own preparation."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

import qoe
from page_row import PAGE_ONLY_KEYS, one_line
from proc_watch import (
    _TICK_S,
    CPU_SAMPLE_S,
    MARKER,
    TMP_PREFIX,
    _system_jiffies,
    kill_marked,
    marked_pids,
    process_cpu_s,
    settle_until_quiet,
)


def page_origins(args: argparse.Namespace) -> tuple[str, ...]:
    """The names a load may fetch from: every --resolve'd host at the page's port, the page's
    own first (a replayed page's origins; today's pages have one)."""
    url = urlsplit(args.url)
    port = url.port or 443
    own = (url.hostname or "").lower()
    return tuple(dict.fromkeys([own, *(r.host for r in args.resolve if r.port == port)]))


def browser_env(home: str, tmpdir: str, token: str, keylog: str | None, **extra: str) -> dict[str, str]:
    """A fresh browser's whole environment: nothing of the caller's leaks in, its HOME and
    caches are the load's own, and the marker lets the process watch find its processes."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmpdir,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "LANG": "C.UTF-8",
        MARKER: token,
        **extra,
    }
    if keylog:
        env["SSLKEYLOGFILE"] = os.path.abspath(keylog)
    return env


PLAYER_PAGE = "/player/index.html"  # served by the testbed's servers (workloads/player.py)
_QOE_DONE_JS = "window.quicbedQoE !== undefined && window.quicbedQoE.done"

_PAGE_TIMINGS_JS = """
async (wait) => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const nav = performance.getEntriesByType('navigation')[0];
  for (let i = 0; wait && i < 200 && nav && !(nav.loadEventEnd > 0); i++) await sleep(5);
  const fcpOf = () => {
    const e = performance.getEntriesByName('first-contentful-paint')[0];
    return e ? e.startTime : null;
  };
  let lcp = null;
  const po = new PerformanceObserver(list => {
    const es = list.getEntries();
    if (es.length) lcp = es[es.length - 1].startTime;
  });
  po.observe({type: 'largest-contentful-paint', buffered: true});
  // Buffered entries arrive in a later task; paint may trail the load event by a frame.
  const frame = () => new Promise(r => {
    requestAnimationFrame(() => r());
    setTimeout(r, 100);
  });
  for (let i = 0; wait && i < 20 && (fcpOf() === null || lcp === null); i++) await frame();
  await frame();
  po.disconnect();
  const keep = e => e.toJSON();
  return {timeOrigin: performance.timeOrigin, navigation: nav ? keep(nav) : null,
          resources: performance.getEntriesByType('resource').map(keep),
          fcp: fcpOf(), lcp: lcp, userAgent: navigator.userAgent};
}
"""


@dataclass
class BrowserLoad:
    """One page load in one fresh browser: its temp directory, its processes, its row."""

    args: argparse.Namespace
    rep: int
    token: str = ""
    tmp: str = ""
    row: dict[str, Any] = field(default_factory=dict)
    net: dict[str, Any] = field(
        default_factory=lambda: {
            "document": None,
            "responses": [],
            "requests": [],
            "failures": [],
            "pending": {},
        }
    )
    watchdog_fired: bool = False
    cpu_samples: list[dict[str, Any]] = field(default_factory=list)
    _sampling: threading.Event = field(default_factory=threading.Event)

    def settle(self) -> None:
        """The fresh browser's start-up work before the timed window: wait until it is quiet,
        at most --settle ms (proc_watch.settle_until_quiet says why); the row keeps the wait."""
        waited_s = settle_until_quiet(self.token, getattr(self.args, "settle", 0) / 1000.0)
        self.row["settle_ms"] = round(1000.0 * waited_s, 1)

    def sample_cpu(self) -> None:
        ncpu = os.cpu_count() or 1
        start = time.monotonic()
        last_proc = process_cpu_s(marked_pids(self.token))
        last_all, last_idle = _system_jiffies()
        while not self._sampling.wait(CPU_SAMPLE_S):
            proc = process_cpu_s(marked_pids(self.token))
            total, idle = _system_jiffies()
            d_all = max(1, total - last_all)
            self.cpu_samples.append(
                {
                    "t": round(time.monotonic() - start, 3),
                    "proc_pct": round(100.0 * (proc - last_proc) / (d_all * _TICK_S / ncpu), 1),
                    "sys_busy_pct": round(100.0 * (d_all - (idle - last_idle)) / d_all, 1),
                }
            )
            last_proc, last_all, last_idle = proc, total, idle

    def page_url(self) -> str:
        """What the browser opens: --url, or with --duration the player page playing it."""
        if self.args.duration is None:
            return self.args.url
        url = urlsplit(self.args.url)
        params = {"mpd": url.path, "duration": f"{self.args.duration:g}"}
        if self.args.player_settings is not None:
            params["settings"] = json.dumps(self.args.player_settings, separators=(",", ":"))
        query = urlencode(params)
        return f"{url.scheme}://{url.netloc}{PLAYER_PAGE}?{query}"

    def add_playback(self, record: dict[str, Any], cpu_ms: float) -> str:
        """The playback's QoE and trace into the row; its error, if the player had one."""
        for key in PAGE_ONLY_KEYS:
            self.row[key] = None
        self.row.update(
            qoe.summarize(record), trace=qoe.trace_since_play(record), t_done=round(time.time(), 6)
        )
        played_ms = 1000.0 * (record.get("played_s") or 0) + (self.row["stall_total_ms"] or 0)
        if played_ms:  # cpu_bound: cpu_limits over the playback, as for a page
            self.row["browser_cpu_pct"] = round(100.0 * cpu_ms / played_ms, 1)
        if record.get("error"):
            return one_line(record["error"])
        if self.row["startup_delay_ms"] is None:
            return "player: no frame was rendered"
        return ""

    def cleanup(self) -> None:
        self._sampling.set()
        if self.token:
            kill_marked(self.token)
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            if os.path.exists(self.tmp):  # a process wrote while we removed: once more
                time.sleep(0.1)
                shutil.rmtree(self.tmp, ignore_errors=True)

    def make_tmp(self) -> str:
        """The load's own directory under /tmp; its name is the marker of its processes."""
        self.tmp = tempfile.mkdtemp(prefix=TMP_PREFIX, dir="/tmp")
        self.token = os.path.basename(self.tmp)
        return self.tmp
