"""The web workload: landing pages and one object per type, fetched by the perf tools (one GET)
or loaded by a browser (a page load: its rows are the derived kind `pageload`).

Content under web/ of the store (workloads/store.py): web/index.html, which references
web/sample.{css,js,png,json,pdf,svg} (one object per type, sizes near the HTTP Archive's
medians), and web/pages/<site>/index.html + its css/js/img/json/pdf (landing pages, ~40 KB at
the median). Realistic (compressible) text from SHAKE-128 keyed by each file's name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from . import recorded
from .base import CONNECTION, Metric, ReportSection, TrialPath, WorkloadKind
from .store import KiB, is_current, locked, rng_bytes, write_atomic

PAGELOAD = "pageload"  # a web page loaded by a browser (clients/browser)

TTFB = Metric("ttfb_ms", "TTFB", "ms", ("web",))
DOWNLOAD = Metric("download_time_ms", "Download time", "ms", ("web",))
TIMING_METRICS = [CONNECTION, TTFB, DOWNLOAD]
PAGE_CONNECTION = Metric("connection_time_ms", "Connection time", "ms", (PAGELOAD,))
PAGE_TTFB = Metric("ttfb_ms", "TTFB", "ms", (PAGELOAD,))
PAGE_FCP = Metric("fcp_ms", "First contentful paint", "ms", (PAGELOAD,))
PAGE_LOAD = Metric("page_load_time_ms", "Page load time", "ms", (PAGELOAD,))
PAGE_CPU = Metric("browser_cpu_ms", "Browser CPU", "ms", (PAGELOAD,), per_rtt=False)
PAGE_METRICS = [PAGE_CONNECTION, PAGE_TTFB, PAGE_FCP, PAGE_LOAD]


class _Words:
    """Deterministic pseudo-text: realistic (compressible) like real HTML/CSS/JS."""

    VOCAB = (
        "the quick network protocol stream packet latency handshake server client "
        "page image style script cloud video segment bandwidth delay loss window "
        "congestion secure transport layer record browser cache request response "
        "header payload frame connection session router queue buffer rate"
    ).split()

    def __init__(self, name: str):
        self.data = rng_bytes("words:" + name, 1 << 16)
        self.pos = 0

    def byte(self) -> int:
        b = self.data[self.pos % len(self.data)]
        self.pos += 1
        return b

    def word(self) -> str:
        return self.VOCAB[self.byte() % len(self.VOCAB)]

    def sentence(self, n: int = 12) -> str:
        return " ".join(self.word() for _ in range(n)).capitalize() + "."


def _fill(target: int, make: Callable[[int], str], head: str = "", tail: str = "") -> bytes:
    """head + repeated make(i) + tail, cut to exactly target bytes (ASCII only)."""
    parts, size, i = [head], len(head) + len(tail), 0
    while size < target:
        piece = make(i)
        parts.append(piece)
        size += len(piece)
        i += 1
    body = "".join(parts)[: max(0, target - len(tail))]
    return (body + tail).encode()


# Object types: each a function of (name, size) -> exactly reproducible bytes.


def make_css(name: str, size: int) -> bytes:
    w = _Words(name)
    return _fill(
        size,
        lambda i: (
            f".{w.word()}-{i} {{ margin: {w.byte() % 32}px; padding: {w.byte() % 16}px; "
            f"color: #{w.byte():02x}{w.byte():02x}{w.byte():02x}; "
            f"font-size: {10 + w.byte() % 12}px; }}\n"
        ),
        head=f"/* {name} (quicbed synthetic stylesheet) */\n",
    )


def make_js(name: str, size: int) -> bytes:
    w = _Words(name)
    return _fill(
        size,
        lambda i: (
            f"function {w.word()}_{i}(a, b) {{\n  const {w.word()} = a * {w.byte()} + b;\n"
            f"  return '{w.sentence(6)}'.length + {w.word()};\n}}\n"
        ),
        head=f"// {name} (quicbed synthetic script)\n'use strict';\n",
    )


def make_json(name: str, size: int) -> bytes:
    w = _Words(name)
    return _fill(
        size,
        lambda i: (
            ("" if i == 0 else ",\n")
            + json.dumps({"id": i, "title": w.sentence(4), "tags": [w.word(), w.word()], "score": w.byte()})
        ),
        head='{"items": [\n',
        tail="\n]}\n",
    )


def make_svg(name: str, size: int) -> bytes:
    w = _Words(name)
    return _fill(
        size,
        lambda i: (
            f'<circle cx="{w.byte()}" cy="{w.byte()}" r="{1 + w.byte() % 20}" '
            f'fill="#{w.byte():02x}{w.byte():02x}{w.byte():02x}"/>\n'
        ),
        head='<svg xmlns="http://www.w3.org/2000/svg" width="256" height="256">\n',
        tail="</svg>\n",
    )


def make_png(name: str, size: int) -> bytes:
    """A valid RGB PNG of about size bytes; noisy pixels, stored (level 0) deflate, like a photo."""
    width = 128
    row = 1 + 3 * width
    height = max(1, (size - 100) // row)
    raw = rng_bytes("png:" + name, row * height)
    # Filter byte 0 at the start of every row.
    pixels = b"".join(b"\x00" + raw[r * row + 1 : (r + 1) * row] for r in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(pixels, 0))
        + chunk(b"IEND", b"")
    )


def make_pdf(name: str, size: int) -> bytes:
    """A valid one-page PDF with a text stream, padded to about size bytes."""
    w = _Words(name)
    lines: list[str] = []
    text_size = max(200, size - 700)
    while sum(len(x) for x in lines) < text_size:
        lines.append(f"({w.sentence(10)}) Tj T*\n")
    content = ("BT /F1 10 Tf 12 TL 50 780 Td\n" + "".join(lines) + "ET\n").encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"endstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _fill_paragraphs(target: int, head: str, tail: str, text: Callable[[int], str]) -> bytes:
    """head + <p>text</p> paragraphs + tail, exactly target bytes (ASCII only). Whole
    paragraphs while they fit; the last one's text is shortened (never a tag cut in two)."""
    room = target - len(head) - len(tail)
    if room < 0:
        raise ValueError(f"{target} bytes cannot hold the page's {len(head) + len(tail)} bytes of tags")
    parts, size, i = [head], 0, 0
    while True:
        piece = f"<p>{text(i)}</p>\n"
        if size + len(piece) > room:
            break
        parts.append(piece)
        size += len(piece)
        i += 1
    rest = room - size
    empty = len("<p></p>\n")
    # piece did not fit, so its text is longer than rest - empty: a prefix of it fills exactly.
    parts.append(f"<p>{piece[3:3 + rest - empty]}</p>\n" if rest > empty else "\n" * rest)
    parts.append(tail)
    return "".join(parts).encode()


def make_html(name: str, size: int, refs: Iterable[str] = ()) -> bytes:
    """An HTML page that makes a browser fetch every ref: stylesheets in <head> (render-
    blocking), data (json, pdf) preloaded from <head> and linked in the body, images inline,
    scripts at the end of <body>. Text paragraphs fill it to exactly size bytes."""
    w = _Words(name)
    refs = list(refs)
    data = [r for r in refs if r.endswith((".pdf", ".json"))]
    # use-credentials: the same connection as the page's other requests (an anonymous CORS
    # request would go on a connection of its own).
    head = "".join(f'<link rel="stylesheet" href="{r}">\n' for r in refs if r.endswith(".css")) + "".join(
        f'<link rel="preload" href="{r}" as="fetch" crossorigin="use-credentials">\n' for r in data
    )
    body = "".join(
        f'<img src="{r}" alt="{w.word()}" width="128">\n' for r in refs if r.endswith((".png", ".svg"))
    ) + "".join(f'<a href="{r}">{w.word()}</a>\n' for r in data)
    scripts = "".join(f'<script src="{r}"></script>\n' for r in refs if r.endswith(".js"))
    start = (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{name}</title>\n{head}</head>\n<body>\n<h1>{w.sentence(5)}</h1>\n{body}"
    )
    end = f"{scripts}</body>\n</html>\n"
    return _fill_paragraphs(size, start, end, lambda i: w.sentence(14))


# Per-type objects at web/ (sizes near the HTTP Archive's medians per type, rounded).
WEB_OBJECTS = {
    "web/sample.css": (make_css, 20 * KiB),
    "web/sample.js": (make_js, 30 * KiB),
    "web/sample.png": (make_png, 15 * KiB),
    "web/sample.svg": (make_svg, 4 * KiB),
    "web/sample.json": (make_json, 5 * KiB),
    "web/sample.pdf": (make_pdf, 50 * KiB),
}
# Landing pages: (html KiB, [(kind, KiB), ...]). Totals 18/30/40/56/90 KiB: median 40 KiB.
LANDING_PAGES = {
    "news": (8, [("css", 4), ("js", 3), ("png", 3)]),
    "shop": (10, [("css", 6), ("js", 8), ("png", 4), ("json", 2)]),
    "blog": (12, [("css", 6), ("js", 10), ("png", 6), ("svg", 2), ("json", 4)]),
    "portal": (14, [("css", 8), ("js", 16), ("png", 8), ("png", 6), ("json", 4)]),
    "media": (16, [("css", 10), ("js", 24), ("png", 12), ("png", 10), ("svg", 4), ("pdf", 14)]),
}
_MAKERS = {
    "css": make_css,
    "js": make_js,
    "png": make_png,
    "svg": make_svg,
    "json": make_json,
    "pdf": make_pdf,
}


def web_files() -> dict[str, bytes]:
    files = {rel: make(rel, size) for rel, (make, size) in WEB_OBJECTS.items()}
    files["web/index.html"] = make_html(
        "web/index.html",
        12 * KiB,
        ["sample.css", "sample.png", "sample.svg", "sample.json", "sample.pdf", "sample.js"],
    )
    for site, (html_kib, assets) in LANDING_PAGES.items():
        refs = []
        for i, (kind, kib) in enumerate(assets):
            rel = f"asset{i}.{kind}"
            files[f"web/pages/{site}/{rel}"] = _MAKERS[kind](f"{site}/{rel}", kib * KiB)
            refs.append(rel)
        files[f"web/pages/{site}/index.html"] = make_html(site, html_kib * KiB, refs)
    return files


def ensure_web(root: Path) -> None:
    # The web files are made in memory anyway: their digests also catch a cache made by an
    # older generator (same sizes, other bytes, e.g. a landing page whose tag was cut).
    with locked(root) as manifest:
        for rel, data in web_files().items():
            if (
                not is_current(root, manifest, rel)
                or manifest["files"][rel].get("sha256") != hashlib.sha256(data).hexdigest()
            ):
                manifest["files"][rel] = write_atomic(root, rel, [data])


@functools.cache
def _web_sizes() -> dict[str, int]:
    return {rel.removeprefix("web/"): len(data) for rel, data in web_files().items()}


class Web(WorkloadKind):
    kind, order, list_key, what, default = "web", 1, "objects", "object", ("index.html",)
    recorded_key = "pages"  # recorded pages replayed instead: [{har: FILE}] (workloads/recorded.py)
    one_get = True  # a perf tool's trial: one GET of the object (a browser's page load is its own)
    derived = {PAGELOAD: ("page_load_time_ms",)}
    demand_limited = (PAGELOAD,)
    # The medians of cpu_client_pct + cpu_server_pct over the error-free rows of this host's
    # runs (2-core host, delayline router; 2026-11-25/26: paper-web, ci-handshake).
    cpu_cores = {
        "chromium": 1.40,  # 240 page loads: a browser start per trial
        "quic_perf": 0.12,  # 90 trials
        "tls_perf": 0.08,  # 170 trials
    }
    sections = (
        ReportSection(
            "Connection time, TTFB and download time",
            None,
            "Connection time covers every non-streaming trial (a handshake does not depend "
            "on what follows); TTFB and download time cover the web pages.",
            metrics=tuple(TIMING_METRICS),
            figures="timing",
            cdfs=tuple(TIMING_METRICS),
            cdfs_in_rtts=True,
        ),
        ReportSection(
            "Page loads in browsers",
            (PAGELOAD,),
            "One page load per trial in a fresh headless browser, Chromium or Firefox (no "
            "cache, no session, no alt-svc memory); every resource's protocol was checked. "
            "Times from navigation start. Each browser is its own facet, never pooled with "
            "the other. Beside it, the perf tools' download of the same page's HTML, and "
            "the share of loads a CPU rather than the path limited.",
            metrics=(*PAGE_METRICS, PAGE_CPU),
            compared=tuple(PAGE_METRICS),
            figures="pageload",
            cdfs=(PAGE_CONNECTION, PAGE_LOAD),
            cdfs_in_rtts=True,
            plots=("pageload_vs_download",),
            table="pageload_vs_download",
            beside=("web",),
            table_caption="Browser page load beside the perf tools' download of its HTML",
        ),
        ReportSection(
            "Recorded pages: page load against origins",
            (PAGELOAD,),
            "Recorded pages replayed from each of their origins (workload pages: [{har: ...}]; "
            "a one-origin twin serves the same responses from its landing origin alone). QUIC's "
            "handshake takes one RTT and TLS 1.3 over TCP two, so QUIC saves one RTT per "
            "connection setup on the load's critical path: the setups opened in sequence, each "
            "begun after a response arrived over the one before (the browser's Resource "
            "Timing). Setups to different origins opened in parallel overlap and save that RTT "
            "once, so the gain follows the setups in sequence, not the origins. The predicted "
            "gain (those setups × RTT) stands beside the measured one (TLS 1.3's median page "
            "load − QUIC's); a CPU-bound share above 10 % means the loads measure the CPU as "
            "much as the path.",
            figures="origins",
            plots=("pageload_vs_origins",),
            table="pageload_by_origins",
            table_caption=(
                "Per browser and recorded page: connections, those on the critical path, and "
                "QUIC's gain over TLS 1.3 predicted (critical-path setups × the condition's "
                "calibrated RTT; the configured RTT where a run has no calibration, as the RTT "
                "column says) beside the measured gain with its 95% CI"
            ),
        ),
    )

    def choices(self) -> tuple[str, ...]:
        # web/index.html (which references the samples), the per-type samples, and whole
        # landing pages (`pages/<site>`: its index.html plus assets).
        return (
            "index.html",
            *(rel.removeprefix("web/") for rel in WEB_OBJECTS),
            *(f"pages/{site}" for site in LANDING_PAGES),
        )

    def url_path(self, name: str) -> str:
        return f"web/{name}/index.html" if name.startswith("pages/") else f"web/{name}"

    def object_bytes(self, name: str) -> int:
        if recorded.is_recorded(name):
            return recorded.recorded(name).body_bytes
        sizes = _web_sizes()
        return sizes.get(name) or sum(v for k, v in sizes.items() if k.startswith(f"{name}/"))

    def trial_seconds(self, name: str, duration_s: float | None, path: TrialPath) -> float:
        """A recorded page: its bytes at the path's rate, and a round trip more than one GET for
        the document's subresources (their origins' handshakes overlap)."""
        seconds = super().trial_seconds(name, duration_s, path)
        return seconds + path.rtt_s if recorded.is_recorded(name) else seconds

    def make_content(self, root: Path) -> None:
        ensure_web(root)
