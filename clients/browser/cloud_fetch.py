"""The cloud download in a browser (`--workload cloud`): the file at --url fetched by the page's
own fetch() from a blank page of the file's origin, its body read to the end and dropped, and
the row built from the fetch's Resource Timing entry and DevTools' response. Standard library
only (the unit tests load it on the host); the driver (chromium_driver.Load) does the fetching.

Why fetch() from a blank page of the origin: the bytes cross the path and the browser's whole
receive path (network stack, the data pipe into the renderer) and nothing is written to disk
(a navigation to the file would be a download, which Chromium writes to a file). The blank
page is answered inside the browser (Playwright's route, removed before the fetch): no request
reaches the server before the file's, so the fetch opens the one connection, whose handshake
its own timing entry shows, as a perf tool's transfer does. Same origin: the entry is complete
(no Timing-Allow-Origin needed) and there is no CORS.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from page_row import (
    EXPECTED,
    PAGE_ONLY_KEYS,
    _epoch,
    _ms,
    categorize,
    connection_keys,
    http_problems,
    judge,
)

BLANK_PATH = "/__quicbed_blank__.html"  # answered by the browser itself; never on the server
BLANK_HTML = "<!doctype html><meta charset=utf-8><title>quicbed cloud fetch</title>"

# Runs in the blank page: fetch the file, read its body to the end counting bytes (each chunk
# dropped at once: no 100 MB in memory), then hand back the fetch's Resource Timing entry.
# An AbortController bounds it by the load's timeout (the error names how far it got).
FETCH_JS = """
async ([url, timeoutMs]) => {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeoutMs);
  const out = {timeOrigin: performance.timeOrigin, status: 0, bodyBytes: 0, error: ''};
  try {
    const resp = await fetch(url, {cache: 'no-store', signal: ctrl.signal});
    out.status = resp.status;
    const reader = resp.body.getReader();
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      out.bodyBytes += value.byteLength;
    }
  } catch (e) {
    out.error = ctrl.signal.aborted ? 'timeout' : String(e);
  } finally {
    clearTimeout(timer);
  }
  const full = new URL(url, location.href).href;
  let entry = null;
  // The entry is queued when the response completes; give it a few tasks to appear.
  for (let i = 0; i < 100 && !entry; i++) {
    entry = performance.getEntriesByName(full, 'resource').pop() || null;
    if (!entry) await new Promise(r => setTimeout(r, 10));
  }
  out.entry = entry ? entry.toJSON() : null;
  return out;
}
"""


def blank_url(file_url: str) -> str:
    """The blank page of the file's origin that the fetch runs in."""
    u = urlsplit(file_url)
    return f"{u.scheme}://{u.netloc}{BLANK_PATH}"


def file_only(net: dict[str, Any], file_url: str) -> dict[str, Any]:
    """The DevTools record without the blank page (the browser answered it, so no protocol
    to prove): what remains must be the file's request alone."""
    blank = blank_url(file_url)
    return {
        **net,
        "requests": [u for u in net.get("requests", []) if u != blank],
        "responses": [r for r in net.get("responses", []) if r.get("url") != blank],
        "failures": [f for f in net.get("failures", []) if f.get("url") != blank],
    }


def _since(entry: dict[str, Any], key: str) -> float | None:
    """An instant of the fetch in ms from its start (the perf tools' zero point)."""
    start, value = entry.get("startTime"), entry.get(key)
    if not isinstance(start, int | float) or not isinstance(value, int | float) or value <= 0:
        return None
    return _ms(value - start)


def build_cloud_row(row: dict[str, Any], result: dict[str, Any], net: dict[str, Any]) -> dict[str, Any]:
    """Fill a row from the fetch (`result` of FETCH_JS: timeOrigin, status, bodyBytes, entry)
    and the DevTools record of the file (`net`, file_only). The perf tools' keys where they mean
    the same: t_start is the fetch's start, every *_ms counts from it, download_time_ms ends at
    the body's last byte (responseEnd), throughput_mbps = bytes x 8 / download_time. The page
    columns are null: this is a transfer, not a page (and so never a `pageload` row)."""
    entry = result.get("entry") or {}
    origin = result.get("timeOrigin")
    response: dict[str, Any] = next(iter(net.get("responses") or []), {})
    hop = entry.get("nextHopProtocol") or response.get("protocol") or ""
    start = entry.get("startTime")
    connect_start, connect_end = entry.get("connectStart"), entry.get("connectEnd")
    secure_start = entry.get("secureConnectionStart")
    download_ms = _since(entry, "responseEnd")
    body = int(entry.get("encodedBodySize") or 0)
    row.update(
        **connection_keys(row, response, hop),
        bytes=body,
        http_status=int(result.get("status") or entry.get("responseStatus") or response.get("status") or 0),
        t_start=_epoch(origin, start) if origin is not None else None,
        t_connect=_epoch(origin, secure_start if hop != "h3" and secure_start else connect_end),
        t_handshake=_epoch(origin, connect_end),
        t_first_byte=_epoch(origin, entry.get("responseStart")),
        t_done=_epoch(origin, entry.get("responseEnd")),
        connection_time_ms=_ms(connect_end - connect_start)
        if isinstance(connect_start, int | float) and isinstance(connect_end, int | float) and connect_end > 0
        else None,
        ttfb_ms=_since(entry, "responseStart"),
        download_time_ms=download_ms,
        throughput_mbps=round(body * 8 / (download_ms * 1e3), 3) if download_ms and body else None,
        resources=1 if entry else 0,
        resource_protocols={hop: 1} if entry else {},
        connections=len({r["connectionId"] for r in net.get("responses", []) if r.get("connectionId")}),
        **dict.fromkeys(set(PAGE_ONLY_KEYS) - {"t_done", "download_time_ms"}),
    )
    return row


def cloud_error(protocol: str, file_url: str, result: dict[str, Any], net: dict[str, Any]) -> str:
    """The fetch's error ("" when the whole file came over the asked protocol): a timeout, a
    failed fetch, an HTTP status, a body shorter than its entry says, or the protocol proof
    (judge: the file's Resource Timing entry and DevTools response; no other request)."""
    entry = result.get("entry")
    if result.get("error") == "timeout":
        return f"timeout: {result.get('bodyBytes', 0)} bytes of the file before the timeout"
    if result.get("error"):  # the network's reason, in the page loads' categories
        reasons = [f.get("errorText", "") for f in net.get("failures", []) if f.get("errorText")]
        return categorize(reasons[0]) if reasons else f"browser: fetch failed: {result['error']}"
    status = int(result.get("status") or 0)
    if status >= 400 or status == 0:
        return f"http: status {status} for {urlsplit(file_url).path}"
    if not entry:
        return "browser: no Resource Timing entry for the file"
    if int(entry.get("encodedBodySize") or 0) != int(result.get("bodyBytes") or 0):
        return (
            f"http: read {result.get('bodyBytes')} bytes of the body, "
            f"Resource Timing says {entry.get('encodedBodySize')}"
        )
    want_hop = EXPECTED[protocol][0]
    extra = [u for u in net.get("requests", []) if u != file_url]
    if extra:
        return f"protocol: asked only {file_url}, the browser also requested {', '.join(extra[:3])}"
    proof = judge(protocol, file_url, {"navigation": entry, "resources": []}, net)
    proof = proof.replace("document over", f"{urlsplit(file_url).path} over")  # judge's name
    if not proof and not any(r.get("protocol") == want_hop for r in net.get("responses", [])):
        return f"protocol: no DevTools response for {file_url}"
    return proof or http_problems({}, net, file_url)
