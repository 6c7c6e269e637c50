"""A DASH session whose player abandoned chunks (issue 64, decision 6): a request the player
cancelled is no protocol error, counted in `cancelled_requests`; the chunks that completed
prove the protocol. A synthetic session, through the browser client's own proof
(clients/browser/page_row.py: drop_cancelled, judge, http_problems)."""

from __future__ import annotations

from typing import Any

from browser_module import load_browser_perf

bp = load_browser_perf()
PAGE = "https://server.quicbed/player/index.html?mpd=%2Fvideo%2Fdash%2Fmanifest.mpd&duration=6"
DASH = "https://server.quicbed/video/dash/"
DONE = [DASH + "manifest.mpd", *(DASH + f"chunk-stream5-0000{i}.m4s" for i in (0, 1))]
BEGUN = DASH + "chunk-stream5-00002.m4s"  # its response had begun when the player reset
UNANSWERED = DASH + "chunk-stream3-00002.m4s"  # abandoned before any response


def _session(hop: str = "h2", security: str = "TLS 1.3") -> tuple[dict[str, Any], dict[str, Any]]:
    """(Resource Timing, DevTools) of one playback: completed chunks over `hop`, one chunk
    answered then aborted and one aborted unanswered, both without a protocol in Resource
    Timing (an aborted fetch's entry is a network error's), as Chromium reports them."""
    navigation = {"name": PAGE, "nextHopProtocol": hop}
    resources = [{"name": url, "nextHopProtocol": hop} for url in DONE]
    resources += [{"name": BEGUN, "nextHopProtocol": ""}, {"name": UNANSWERED, "nextHopProtocol": ""}]
    answered = [PAGE, *DONE, BEGUN]
    net = {
        "requests": [*answered, UNANSWERED],
        "responses": [
            {"url": u, "protocol": hop, "securityDetails": {"protocol": security}} for u in answered
        ],
        "failures": [
            {"url": BEGUN, "errorText": "net::ERR_ABORTED", "canceled": True},
            {"url": UNANSWERED, "errorText": "net::ERR_ABORTED", "canceled": True},
        ],
    }
    return {"navigation": navigation, "resources": resources}, net


def test_without_the_cancelled_chunks_the_session_failed_its_proof() -> None:
    """The failure of the issue's run: a chunk whose response had begun, then cancelled."""
    perf, net = _session()
    assert "chunk-stream5-00002.m4s over none" in bp.judge("tls1.3", PAGE, perf, net)


def test_cancelled_chunks_are_counted_and_the_completed_ones_prove_the_protocol() -> None:
    perf, net = _session()
    assert bp.drop_cancelled(perf, net) == 2
    assert bp.judge("tls1.3", PAGE, perf, net) == ""
    assert bp.http_problems(perf, net, PAGE) == ""
    assert [e["name"] for e in perf["resources"]] == DONE
    # The begun chunk's DevTools response is still proven; the unanswered one is no request.
    assert BEGUN in {r["url"] for r in net["responses"]} and UNANSWERED not in net["requests"]


def test_a_completed_chunk_over_another_protocol_still_fails() -> None:
    perf, net = _session()
    perf["resources"][1]["nextHopProtocol"] = "h3"
    bp.drop_cancelled(perf, net)
    assert bp.judge("tls1.3", PAGE, perf, net).endswith("chunk-stream5-00000.m4s over h3")


def test_a_begun_chunk_whose_response_came_over_another_protocol_still_fails() -> None:
    perf, net = _session()
    next(r for r in net["responses"] if r["url"] == BEGUN)["securityDetails"]["protocol"] = "TLS 1.2"
    bp.drop_cancelled(perf, net)
    assert "chunk-stream5-00002.m4s over TLS 1.2" in bp.judge("tls1.3", PAGE, perf, net)


def test_a_chunk_without_a_protocol_that_nobody_cancelled_is_still_an_error() -> None:
    perf, net = _session()
    net["failures"] = [{"url": BEGUN, "errorText": "net::ERR_CONNECTION_RESET", "canceled": False}]
    net["failures"].append({"url": UNANSWERED, "errorText": "net::ERR_ABORTED", "canceled": True})
    assert bp.drop_cancelled(perf, net) == 1
    assert "chunk-stream5-00002.m4s over none" in bp.judge("tls1.3", PAGE, perf, net)
    assert "ERR_CONNECTION_RESET" in bp.http_problems(perf, net, PAGE)
