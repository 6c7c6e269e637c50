"""The shipped synthetic pages: HAR files of a median web page, desktop and mobile, made from
published HTTP Archive statistics by a seeded (deterministic) generator.

    python -m quicbed.workloads.har_corpus [DIR]   # writes DIR/median-{desktop,mobile}.har

(DIR defaults to workloads/pages/, where the shipped files live; tests/workloads/test_har.py
makes them again and checks they are byte-identical.) Each HAR states its model and source in
`log.comment`, and every page passes workloads/har.py's validator before it is written.

The model, per page: the median page's requests and bytes, split by resource type, and the
hosts it loads from. Figures from the HTTP Archive's Web Almanac 2024, Page Weight chapter
(crawl of October 2024): the median page is 2,652 KB on desktop and 2,311 KB on mobile; the
median desktop page's images are 1,054 KB in 18 requests, its JavaScript 613 KB in 24, fonts
131 KB, CSS 78 KB, HTML 18 KB. The totals of requests (71 desktop, 66 mobile) come from a
secondary summary of that chapter, not checked on the Almanac's own page. ASSUMED, not from a
source checked here: the number of hosts (20 desktop, 18 mobile, near the HTTP Archive's
median `numDomains`), 6 CSS and 3 font requests, mobile's type mix as desktop's scaled to its
totals, the first party's share (45 % of the requests), and the servers' think times.
"Other" (JSON, media) is what the totals leave once the types above are counted.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .har import parse_har

PAGES_DIR = Path(__file__).resolve().parent / "pages"
SOURCE = (
    "HTTP Archive, Web Almanac 2024, Page Weight chapter (October 2024 crawl), "
    "https://almanac.httparchive.org/en/2024/page-weight"
)
KB = 1024  # the HTTP Archive's KB
# Desktop's median bytes and requests per type (the Almanac's where it gives them, see above);
# "other" takes what the totals leave.
DESKTOP_MIX = {"html": (18, 1), "css": (78, 6), "js": (613, 24), "image": (1054, 18), "font": (131, 3)}
TYPES = {  # type -> (MIME type, file suffix)
    "html": ("text/html; charset=utf-8", ".html"),
    "css": ("text/css", ".css"),
    "js": ("application/javascript", ".js"),
    "image": ("image/webp", ".webp"),
    "font": ("font/woff2", ".woff2"),
    "other": ("application/json", ".json"),
}
FIRST_PARTY_SHARE = 0.45
# Third-party hosts by role, each its own domain under the reserved .example (RFC 2606): the
# names resolve nowhere outside the testbed.
THIRD_PARTIES = (
    "cdn.assets", "fonts.typeface", "tags.tagmanager", "stats.analytics", "ads.adserver",
    "consent.cmp", "video.player", "widgets.social", "chat.support", "img.imagecdn",
    "api.reviews", "pixel.adnetwork", "maps.tiles", "js.libcdn", "rum.perfmon",
    "search.sitesearch", "static.payments", "media.newswire", "beacon.metrics",
)  # fmt: skip
# A 1x1 transparent GIF: the analytics beacon, recorded in the HAR as base64.
BEACON = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
START = datetime(2026, 1, 1, tzinfo=UTC)
ALT_SVC = 'h3=":443"; ma=86400'
LAST_MODIFIED = "Thu, 01 Jan 2026 00:00:00 GMT"


@dataclass(frozen=True)
class PageModel:
    name: str
    client: str
    requests: int
    kib: int
    hosts: int
    seed: int

    @property
    def first_party(self) -> str:
        return f"www.{self.name}.example"

    def mix(self) -> dict[str, tuple[int, int]]:
        """type -> (bytes, requests): desktop's mix scaled to this page's totals, the rest
        "other"."""
        desktop_kib, desktop_requests = 2652, 71
        mix = {
            kind: (
                round(kib * self.kib / desktop_kib) * KB,
                max(1, round(n * self.requests / desktop_requests)),
            )
            for kind, (kib, n) in DESKTOP_MIX.items()
        }
        mix["html"] = (mix["html"][0], 1)  # one landing document
        rest = (
            self.kib * KB - sum(b for b, _ in mix.values()),
            self.requests - sum(n for _, n in mix.values()),
        )
        mix["other"] = rest
        return mix

    def comment(self) -> str:
        mix = ", ".join(f"{kind} {n} x {b // KB} KB" for kind, (b, n) in self.mix().items())
        return (
            f"quicbed synthetic page: the median {self.client} page, {self.requests} requests, "
            f"{self.kib} KB (of 1,024 bytes, as the HTTP Archive counts), {self.hosts} hosts; by type "
            f"(requests x bytes): {mix}. Source: {SOURCE}; the request totals from a secondary "
            "summary of it. Assumed: the hosts, the CSS and font requests, the first party's share "
            f"({FIRST_PARTY_SHARE:.0%}), the think times. Only the landing document's and the "
            "beacon's bodies are recorded: a replay makes up the others to content.size. "
            f"Seed {self.seed}; made by workloads/har_corpus.py."
        )


MODELS = (
    PageModel("median-desktop", "desktop", requests=71, kib=2652, hosts=20, seed=2024),
    PageModel("median-mobile", "mobile", requests=66, kib=2311, hosts=18, seed=2025),
)


@dataclass
class _Resource:
    kind: str
    host: str
    path: str
    size: int
    body: bytes | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}{self.path}"


def _split(total: int, count: int, rng: random.Random) -> list[int]:
    """`total` bytes over `count` resources, log-normally (a few large, many small), summing
    exactly."""
    weights = [rng.lognormvariate(0.0, 1.0) for _ in range(count)]
    sizes = [max(1, int(total * w / sum(weights))) for w in weights]
    sizes[sizes.index(max(sizes))] += total - sum(sizes)
    return sizes


def _resources(model: PageModel, rng: random.Random) -> list[_Resource]:
    hosts = [model.first_party, *(f"{name}.example" for name in THIRD_PARTIES[: model.hosts - 1])]
    found: list[_Resource] = []
    for kind, (total, count) in model.mix().items():
        if kind == "html":
            continue
        if kind == "image":  # the beacon is one of the images
            count, total = count - 1, total - len(BEACON)
            found.append(_Resource("beacon", "stats.analytics.example", "/collect?v=1", len(BEACON), BEACON))
        suffix = TYPES[kind][1]
        found += [
            _Resource(kind, "", f"/{kind}/{i}{suffix}", size)
            for i, size in enumerate(_split(total, count, rng))
        ]
    rng.shuffle(found)
    third = hosts[1:]
    unplaced = [r for r in found if not r.host]
    for i, resource in enumerate(unplaced):
        if i < len(third):  # every host serves at least one resource
            resource.host = third[i]
        else:
            resource.host = model.first_party if rng.random() < FIRST_PARTY_SHARE else rng.choice(hosts)
    return found


def _document(model: PageModel, resources: list[_Resource], size: int, rng: random.Random) -> bytes:
    """The landing document: a tag per resource (so a browser fetches every one), padded with
    a comment to `size` bytes."""
    tags = {
        "css": '<link rel="stylesheet" href="{}">',
        "font": '<link rel="preload" href="{}" as="font" type="font/woff2" crossorigin="anonymous">',
        "other": '<link rel="preload" href="{}" as="fetch" crossorigin="anonymous">',
        "image": '<img src="{}" alt="" width="320" height="180">',
        "beacon": '<img src="{}" alt="" width="1" height="1">',
        "js": '<script src="{}" defer></script>',
    }
    links = "\n".join(tags[r.kind].format(r.url) for r in resources)
    head = f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{model.name}</title>\n'
    start, end = f"{head}</head>\n<body>\n{links}\n<!-- ", " -->\n</body>\n</html>\n"
    room = size - len(start) - len(end)
    if room < 0:
        raise ValueError(f"{model.name}: {size} bytes cannot hold the document's tags")
    filler = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz     ") for _ in range(room))
    return (start + filler + end).encode()


def _entry(index: int, resource: _Resource, mime: str, wait: float, cors: bool) -> dict[str, Any]:
    headers = [
        ("content-type", mime),
        ("cache-control", "no-cache" if index == 0 else "public, max-age=31536000"),
        ("etag", '"' + hashlib.sha256(resource.url.encode()).hexdigest()[:16] + '"'),
        ("last-modified", LAST_MODIFIED),
        ("alt-svc", ALT_SVC),
        *([("access-control-allow-origin", "*")] if cors else []),
    ]
    content: dict[str, Any] = {"size": resource.size, "mimeType": mime}
    if resource.body is not None:
        text = resource.body.decode() if index == 0 else base64.b64encode(resource.body).decode()
        content.update({"text": text} if index == 0 else {"text": text, "encoding": "base64"})
    started = START + timedelta(milliseconds=10 * index)
    return {
        "pageref": "page_1",
        "startedDateTime": started.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "time": wait,
        "request": {
            "method": "GET",
            "url": resource.url,
            "httpVersion": "HTTP/2.0",
            "cookies": [],
            "headers": [],
            "queryString": [],
            "headersSize": -1,
            "bodySize": 0,
        },
        "response": {
            "status": 200,
            "statusText": "OK",
            "httpVersion": "HTTP/2.0",
            "cookies": [],
            "headers": [{"name": name, "value": value} for name, value in headers],
            "content": content,
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": resource.size,
        },
        "cache": {},
        "timings": {
            "blocked": -1,
            "dns": -1,
            "connect": -1,
            "ssl": -1,
            "send": 0,
            "wait": wait,
            "receive": 0,
        },
    }


def make_har(model: PageModel) -> bytes:
    """The page's HAR, the same bytes for the same model on every run."""
    rng = random.Random(model.seed)
    resources = _resources(model, rng)
    html_bytes = model.mix()["html"][0]
    landing = _Resource("html", model.first_party, "/", html_bytes)
    landing.body = _document(model, resources, html_bytes, rng)
    entries = []
    for index, resource in enumerate([landing, *resources]):
        mime = "image/gif" if resource.kind == "beacon" else TYPES[resource.kind][0]
        wait = 120.0 if index == 0 else round(rng.uniform(2.0, 40.0), 1)
        entries.append(_entry(index, resource, mime, wait, cors=resource.kind in ("font", "other")))
    har = {
        "log": {
            "version": "1.2",
            "creator": {"name": "quicbed har_corpus", "version": "1", "comment": SOURCE},
            "pages": [
                {
                    "startedDateTime": entries[0]["startedDateTime"],
                    "id": "page_1",
                    "title": f"https://{model.first_party}/",
                    "pageTimings": {"onContentLoad": -1, "onLoad": -1},
                }
            ],
            "entries": entries,
            "comment": model.comment(),
        }
    }
    return (json.dumps(har, indent=1, ensure_ascii=True) + "\n").encode()


def write_corpus(directory: Path = PAGES_DIR) -> list[Path]:
    """Every model's HAR under `directory`, each checked by the validator first."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for model in MODELS:
        path = directory / f"{model.name}.har"
        data = make_har(model)
        parse_har(data, str(path))
        path.write_bytes(data)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the synthetic median pages as HAR files.")
    parser.add_argument("directory", nargs="?", type=Path, default=PAGES_DIR)
    for path in write_corpus(parser.parse_args(argv).directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
