"""What the repository has measured of browsers' CPU-bound loads, and the dry run's warning
from it (issue 63, decision 3).

Where more than analysis/cpu_bound.CPU_BOUND_SHARE_MAX of a browser's loads on a path were
CPU-bound, the report leaves them out of the paper's findings. `quicbed run FILE --dry-run`
says so before the run: for each browser of the plan, the measured path nearest each
condition's RTT (on a log scale: 40 ms is as near 20 as 80), from a host with at least this
host's cores (one with fewer is at least as starved), and the figures over the line there. A
host with more cores than any measurement gets no warning: nothing is known of it.

MEASURED is the one place for the figures: add a row when a bench or a run measures a share.
Cloud downloads are not here: a browser's download is CPU-bound by its rate, not its RTT
(plan.CPU_BOUND_MBIT, said per rate by the dry run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from quicbed.analysis.cpu_bound import CPU_BOUND_SHARE_MAX

from .matrix import Condition, conditions
from .registry import TOOLS
from .schema import ClientVariant, Experiment


@dataclass(frozen=True)
class MeasuredPath:
    profile: str
    rtt_ms: float  # as calibrated there


@dataclass(frozen=True)
class Measured:
    """One measured CPU-bound share: a browser's loads of one workload on one path."""

    browser: str  # the chromium client's `browser` (chromium-full, headless-shell), or firefox
    kind: str  # the workload kind: web (page loads), video (dash.js playbacks)
    path: MeasuredPath
    cores: int  # the measuring host's
    share: float  # of the loads, CPU-bound
    what: str  # what was loaded, and how many
    source: str  # where the figure is written down


INDIA, GERMANY = MeasuredPath("india", 80.0), MeasuredPath("germany", 20.0)
SHELL_BENCH = "bench/README.md, the full Chromium against the headless shell, 2026-11-26"
PARALLEL_BENCH = "bench/README.md, two paths at once, 2026-11-26"

# Every host here had 2 cores (AMD EPYC), as the repo's measuring hosts have had. Only figures
# of the browser as it runs now: since 2026-12-07 a load waits for the fresh browser to go quiet
# before navigating (--settle), which took Chromium's start-up work out of the timed load; the
# figures before it (pages/media 13 of 60 on india, the replayed page 15 and 25 %, germany 8
# of 8) describe a browser no run starts any more.
SETTLED_BENCH = "bench/README.md, a quiet browser before the timed load, 2026-12-07"
REPLAY_RUN = "bench/README.md, the median desktop page replayed on india after --settle, 2026-12-07"
MEASURED: tuple[Measured, ...] = (
    Measured("chromium-full", "web", GERMANY, 2, 0.0, "pages/news, 0 of 8 loads", SETTLED_BENCH),
    Measured("chromium-full", "web", INDIA, 2, 0.0, "the median desktop page, its twin: 0 of 40", REPLAY_RUN),
    Measured("headless-shell", "web", INDIA, 2, 0.0, "pages/media, 0 of 40 loads", SHELL_BENCH),
    Measured("firefox", "web", INDIA, 2, 0.0, "the median desktop page and its twin, 0 of 40", REPLAY_RUN),
    Measured("firefox", "web", GERMANY, 2, 0.0, "pages/news, 0 of 8 loads", SETTLED_BENCH),
    Measured("chromium-full", "video", INDIA, 2, 0.0, "dash.js at 0 and 5 % loss, 0 of 48", PARALLEL_BENCH),
)


def browser_of(client: ClientVariant) -> str | None:
    """The browser a client variant runs, as MEASURED names it (None: not a browser)."""
    if not TOOLS[client.tool].browser:
        return None
    return client.options.get("browser", client.tool)


def _distance(a_ms: float, b_ms: float) -> float:
    """How far apart two RTTs are, as a ratio (a path of 0 ms counts as 0.1)."""
    return abs(math.log(max(a_ms, 0.1) / max(b_ms, 0.1)))


def nearest(browser: str, kind: str, rtt_ms: float, cores: int) -> list[Measured]:
    """The figures for this browser and workload on the measured path nearest this RTT, from
    hosts of at least `cores` cores."""
    mine = [m for m in MEASURED if (m.browser, m.kind) == (browser, kind) and m.cores >= cores]
    if not mine:
        return []
    path = min(mine, key=lambda m: _distance(m.path.rtt_ms, rtt_ms)).path  # a tie: the first listed
    return [m for m in mine if m.path == path]


def _warning(browser: str, near: list[Condition], known: list[Measured], cores: int) -> str:
    where = ", ".join(f"{c.id} {c.label} ({c.link.rtt_ms:g} ms)" for c in near)
    by_source: dict[str, list[str]] = {}
    for m in known:
        by_source.setdefault(m.source, []).append(f"{m.what}: {100 * m.share:.0f} %")
    figures = "; ".join(f"{', '.join(shares)} ({source})" for source, shares in by_source.items())
    m = known[0]
    return (
        f"warning: {browser} is known to be CPU-bound on {where} on {cores} cores: measured on "
        f"{m.path.profile} ({m.path.rtt_ms:g} ms, {m.cores} cores): {figures}. Over "
        f"{100 * CPU_BOUND_SHARE_MAX:.0f} % of its loads CPU-bound, the report shows its figures "
        "there flagged and leaves them out of the paper's findings (analysis/cpu_bound.py)."
    )


def warnings(exp: Experiment, cores: int) -> list[str]:
    """One warning per browser of the plan and measured path, where its figures nearest the
    plan's conditions are over the line on this many cores."""
    browsers = dict.fromkeys(b for b in map(browser_of, exp.clients) if b is not None)
    out = []
    for browser in browsers:
        by_path: dict[str, tuple[list[Condition], list[Measured]]] = {}
        for cond in conditions(exp):
            known = nearest(browser, exp.workload.kind, cond.link.rtt_ms, cores)
            over = [m for m in known if m.share > CPU_BOUND_SHARE_MAX]
            if over:
                by_path.setdefault(over[0].path.profile, ([], over))[0].append(cond)
        out += [_warning(browser, near, known, cores) for near, known in by_path.values()]
    return out
