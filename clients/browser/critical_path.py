"""The connection setups on a page load's critical path, from the page's Resource Timing alone
(the document's Navigation Timing entry and its subresources' entries, as every driver reads
them: load_common._PAGE_TIMINGS_JS). Standard library only: both drivers' rows use it, and the
unit tests load it on the host.

The model. A connection setup is an entry whose `connectEnd` is after its `connectStart` (a
reused connection's are equal). Setup B *follows* setup A when B began only after a response
over A's connection had started to arrive (A's entry's `responseStart`): before then nothing
A carried could have named B's resource. The setups on the critical path are the longest chain
of setups each following the one before. Setups that overlap in time cannot follow one another,
so setups to different origins opened in parallel count once, however many origins they are.

Why count them: QUIC's handshake costs one RTT, TLS 1.3 over TCP two (TCP's, then TLS's), so
QUIC shortens a page load by one RTT per setup on this chain, not one per origin
(analysis/tables.py pageload_by_origins_table predicts the gain from it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# Entries that never touch the network (no connection to count).
NO_NETWORK_SCHEMES = ("data:", "blob:", "about:", "chrome:", "chrome-error:", "javascript:")


@dataclass(frozen=True)
class Setup:
    """One connection setup: the host it was opened to, when it started and ended, and when
    the response of the entry that opened it began to arrive (ms from navigation start)."""

    host: str
    start_ms: float
    end_ms: float
    first_response_ms: float


def _number(entry: dict[str, Any], key: str) -> float | None:
    value = entry.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def connection_setups(perf: dict[str, Any]) -> list[Setup] | None:
    """Every connection setup of the load, in order of start; None when an entry's timings are
    hidden (a cross-origin response without `timing-allow-origin` reads 0), since a hidden
    entry may hide a setup. The replay server allows every response's timing
    (workloads/replay.py)."""
    entries = [perf.get("navigation") or {}, *(perf.get("resources") or [])]
    setups = []
    for entry in entries:
        name = str(entry.get("name") or "")
        if not name or name.startswith(NO_NETWORK_SCHEMES):
            continue
        start, end = _number(entry, "connectStart"), _number(entry, "connectEnd")
        response = _number(entry, "responseStart")
        if response is None or response <= 0:
            return None
        if start is not None and end is not None and end > start:
            setups.append(Setup(urlsplit(name).hostname or "", start, end, response))
    return sorted(setups, key=lambda s: (s.start_ms, s.end_ms))


def critical_chain(setups: list[Setup]) -> list[Setup]:
    """The longest chain of setups, each begun at or after the first response over the one
    before (setups sorted by start). Longest-path over a DAG in start order: O(n²), n being
    a page's connections (tens)."""
    longest: list[int] = []
    before: list[int | None] = []
    for i, setup in enumerate(setups):
        after = [j for j in range(i) if setups[j].first_response_ms <= setup.start_ms]
        best = max(after, key=lambda j: longest[j], default=None)
        longest.append(1 + (longest[best] if best is not None else 0))
        before.append(best)
    if not setups:
        return []
    last: int | None = max(range(len(setups)), key=lambda k: longest[k])
    chain = []
    while last is not None:
        chain.append(setups[last])
        last = before[last]
    return chain[::-1]


def critical_connections(perf: dict[str, Any]) -> tuple[int | None, list[str] | None]:
    """The row's `critical_connections` (how many setups the critical path holds) and
    `critical_chain` (their hosts, in order); (None, None) when the timings are hidden."""
    setups = connection_setups(perf)
    if setups is None:
        return None, None
    chain = critical_chain(setups)
    return len(chain), [s.host for s in chain]
