"""The connection setups on a page load's critical path (clients/browser/critical_path.py), from
Resource Timing entries as the browsers give them: times in ms from navigation start, TLS 1.3
over TCP on an 80 ms path (a setup is 2 RTT, the response one RTT after it)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pytest
from browser_module import load_browser_perf

bp = load_browser_perf()
critical_path = sys.modules["critical_path"]  # clients/browser/critical_path.py, via page_row
load_common = sys.modules["load_common"]

RTT = 80.0
A, B, C = "https://www.a.example/", "https://cdn.b.example/", "https://img.c.example/"


def _entry(url: str, start: float, setup: bool = True) -> dict[str, Any]:
    """A fetch begun at `start`: a new connection (2 RTT), or a reused one (none), then its
    response one RTT after the request."""
    end = start + 2 * RTT if setup else start
    return {
        "name": url,
        "fetchStart": start,
        "connectStart": start,
        "connectEnd": end,
        "requestStart": end,
        "responseStart": end + RTT,
        "responseEnd": end + RTT + 5,
    }


def _perf(navigation: dict[str, Any], *resources: dict[str, Any]) -> dict[str, Any]:
    return {"timeOrigin": 1_700_000_000_000.0, "navigation": navigation, "resources": list(resources)}


def _count(perf: dict[str, Any]) -> tuple[int | None, list[str] | None]:
    return critical_path.critical_connections(perf)


def test_a_chain_of_origins_puts_each_setup_on_the_critical_path() -> None:
    """The document on A names a script on B, which, run, loads an image from C: three setups,
    each begun after the response that named it."""
    doc = _entry(A, 2.0)
    script = _entry(B + "app.js", doc["responseStart"] + 5)
    image = _entry(C + "hero.webp", script["responseEnd"] + 10)
    css = _entry(A + "site.css", doc["responseStart"] + 5, setup=False)  # the document's connection
    assert _count(_perf(doc, css, script, image)) == (3, ["www.a.example", "cdn.b.example", "img.c.example"])


def test_two_origins_whose_setups_overlap_count_once() -> None:
    """The document's origin and a second one connected at once (the second preconnected at
    navigation): two connections, one setup on the critical path."""
    doc = _entry(A, 2.0)
    preconnected = _entry(B + "app.js", 3.0)
    assert _count(_perf(doc, preconnected))[0] == 1


def test_parallel_origins_after_the_document_count_once_after_it() -> None:
    """The document names B and C; both connect at once after its response: the document's
    setup, then one for the two."""
    doc = _entry(A, 2.0)
    after = doc["responseStart"] + 5
    count, chain = _count(_perf(doc, _entry(B + "app.js", after), _entry(C + "hero.webp", after + 1)))
    assert count == 2 and chain is not None and chain[0] == "www.a.example", chain


def test_a_setup_begun_before_any_response_arrived_follows_nothing() -> None:
    """B connects after A's handshake but before A's first response: nothing A carried can
    have named it, so it does not follow A's setup."""
    doc = _entry(A, 2.0)
    early = _entry(B + "app.js", doc["connectEnd"] + 10)
    assert _count(_perf(doc, early))[0] == 1
    late = _entry(B + "app.js", doc["responseStart"])
    assert _count(_perf(doc, late))[0] == 2


def test_one_setup_reported_by_every_request_that_waited_for_it_counts_once() -> None:
    """Requests queued on a connection being set up may all report its connect times."""
    doc = _entry(A, 2.0)
    after = doc["responseStart"] + 5
    waiting = [_entry(B + f"{i}.js", after) for i in range(4)]
    for i, entry in enumerate(waiting):
        entry["responseStart"] += i  # their responses arrive one after another
    assert _count(_perf(doc, *waiting))[0] == 2


def test_reused_connections_and_no_network_entries_are_no_setups() -> None:
    doc = _entry(A, 2.0)
    inline = {"name": "data:image/png;base64,AAAA", "connectStart": 0, "connectEnd": 0, "responseStart": 0}
    reused = _entry(A + "more.js", doc["responseEnd"] + 300, setup=False)
    assert _count(_perf(doc, inline, reused)) == (1, ["www.a.example"])
    assert _count(_perf({})) == (0, [])


@pytest.mark.parametrize("hidden", ["zero", "missing"])
def test_hidden_timings_leave_the_count_unknown(hidden: str) -> None:
    """A cross-origin response without timing-allow-origin reads 0 for its connect and
    response times: it may hide a setup, so the count is unknown, not a guess."""
    doc = _entry(A, 2.0)
    opaque = _entry(B + "app.js", doc["responseStart"] + 5)
    for key in ("connectStart", "connectEnd", "requestStart", "responseStart"):
        if hidden == "zero":
            opaque[key] = 0
        else:
            del opaque[key]
    assert _count(_perf(doc, opaque)) == (None, None)


def test_the_row_carries_the_count_and_its_chain_and_a_playback_does_not() -> None:
    doc = _entry(A, 2.0)
    script = _entry(B + "app.js", doc["responseStart"] + 5)
    perf = _perf({**doc, "nextHopProtocol": "h3", "loadEventEnd": 900.0}, {**script, "nextHopProtocol": "h3"})
    row = bp.build_row(bp.empty_row("quic", A, 0), perf, {"responses": []})
    assert (row["critical_connections"], row["critical_chain"]) == (2, ["www.a.example", "cdn.b.example"])
    # A playback's row is the player's, not its page's setups.
    playback = load_common.BrowserLoad(args=argparse.Namespace(), rep=0, row=row)
    playback.add_playback({"played_s": 6}, 100.0)
    assert (row["critical_connections"], row["critical_chain"]) == (None, None)
