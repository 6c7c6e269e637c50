"""A recorded page (workloads/har.py) laid out for a replay server: every origin its own site,
with its own address on the server LAN and its own certificate name, and every response a
file beside a manifest the server reads (`replay.json`).

`plan_replay(page)` is pure: which address each origin takes, which body file each response
serves, and what of the record a replay changes. `write_site(plan, page, root)` writes the
site under root: `replay.json` and `bodies/<sha256>` (one file per distinct body: a recorded
body's sha256, a made-up body's of its generator's name and size).

What the plan changes of the record, besides what `load_har` drops:
- **bodies are served as they decode**: the HAR holds the decoded body (`content.text`) and
  its decoded size (`content.size`), never the bytes the wire carried. A body is served with
  no `content-encoding` (the header is dropped: a made-up body is no gzip stream), so a
  compressed resource costs its decoded size on the path, as every file of the testbed's
  own content does (servers/nginx/nginx.conf: `gzip off`). `Response.transfer_bytes` keeps
  what the record says the wire carried, for the report to set beside it.
- **a body the HAR does not hold is made up** to its size from SHAKE-128 of the response's
  origin, target and entry index (workloads/store.py's `stream`): the same bytes on every
  machine, and incompressible. A raster image's (`image/*` but SVG) is a valid PNG of exactly
  that size (a 1x1 picture and a private chunk of those bytes): a browser stops reading an
  image it cannot decode (Firefox cancels it, NS_BINDING_ABORTED), and the page would not
  load what was recorded. Browsers sniff an image's format, so a PNG under a recorded
  `image/webp` is decoded all the same. A stylesheet, script or JSON body is the testbed's
  own synthetic text of that type and size (workloads/web.py's makers): a browser parses it
  as it would a real one, where random bytes would stop its parser at the first byte and
  cost the page's CPU nothing.
- **a request recorded twice** (method, origin and target alike) is answered as first
  recorded: a server matches a request by those alone.
- **every response allows its timing to be read** (`timing-allow-origin: *`, unless the record
  has its own): a browser hides a cross-origin resource's Resource Timing without it, its
  `nextHopProtocol` among it, and that is how every resource's protocol is proven
  (clients/browser page_row.judge; Firefox's BiDi names no protocol of its own). A header of
  some 25 bytes, and nothing a load waits on.

The server answers each response no sooner than its think time (`wait_ms`) after the request
arrived; the replay server's own time beside it is what its bench measures.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from quicbed.topology.net import SERVER_NET

from . import web
from .har import Entry, Origin, Page
from .store import rng_bytes, write_atomic

MANIFEST = "replay.json"
BODIES = "bodies"
FORMAT = 1  # of replay.json: a server refuses another
# Origins take the server LAN's addresses from here up (.10-.49 are the testbed's named
# servers, topology/net.py's server_address): 205 addresses, above har.MAX_ORIGINS.
FIRST_HOST = 50
LAST_HOST = 254
DROPPED_HEADERS = ("content-encoding",)
ENTRY_STRIDE = 10_000  # plan_pages: the k-th page's entries from k x this (above har.MAX_ENTRIES)
ADDED_HEADERS = (("timing-allow-origin", "*"),)  # the module's text: what a replay adds


class ReplayError(ValueError):
    """A page this testbed cannot replay (more origins than the LAN has addresses)."""


@dataclass(frozen=True)
class Site:
    name: str  # the origin's host: the name the browser resolves and the certificate's
    port: int
    scheme: str
    address: str  # on the server LAN, the origin's own


@dataclass(frozen=True)
class Response:
    entry: int  # the HAR entry it answers (rows and errors name it)
    site: int  # index into ReplayPlan.sites
    method: str
    target: str  # path and query, as recorded
    status: int
    headers: tuple[tuple[str, str], ...]
    body_bytes: int
    transfer_bytes: int | None
    wait_ms: float
    body: str  # the body's name in bodies/: its sha256, or "" for an empty body


@dataclass(frozen=True)
class ReplayPlan:
    page: str  # the HAR file
    sites: tuple[Site, ...]  # the landing document's first
    responses: tuple[Response, ...]
    repeated: tuple[int, ...]  # entries answered by an earlier entry's response

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(site.name for site in self.sites))

    def hosts(self) -> dict[str, str]:
        """Name -> address, for the client's resolver (no name leaves the testbed)."""
        return {site.name: site.address for site in self.sites}

    def resolves(self, port: int = 443) -> list[str]:
        """The clients' --resolve NAME:PORT:ADDRESS of every origin, the landing one's first."""
        return [f"{name}:{port}:{address}" for name, address in self.hosts().items()]


def site_address(index: int) -> str:
    if FIRST_HOST + index > LAST_HOST:
        raise ReplayError(
            f"{index + 1} origins: the server LAN has addresses for {LAST_HOST - FIRST_HOST + 1}"
        )
    return f"{SERVER_NET}.{FIRST_HOST + index}"


def plan_replay(page: Page) -> ReplayPlan:
    """The sites and responses a replay of `page` serves (see the module's text)."""
    return plan_pages([page])


def plan_pages(pages: Sequence[Page]) -> ReplayPlan:
    """One site of several pages, served at once: each page's origins take the next addresses,
    and the k-th page's entries are numbered from k x ENTRY_STRIDE (the access log's `entry`
    names the page and its entry). Two pages may not share a host: each name answers one
    page's responses, and a recorded response is not another page's."""
    owner: dict[str, int] = {}
    for k, page in enumerate(pages):
        for host in dict.fromkeys(origin.host for origin in page.origins):
            first = owner.setdefault(host, k)
            if first != k:
                raise ReplayError(
                    f"{host} is an origin of both pages {first} and {k} ({pages[first].file}, {page.file})"
                )
    sites: dict[Origin, int] = {}
    for page in pages:
        for origin in page.origins:
            sites[origin] = len(sites)
    # http and https of one host, or two ports of it: one name, one address, as on the
    # Internet, where a name resolves the same whatever the scheme.
    addresses: dict[str, str] = {}
    for origin in sites:
        if origin.host not in addresses:
            addresses[origin.host] = site_address(len(addresses))
    site_list = [Site(o.host, o.port, o.scheme, addresses[o.host]) for o in sites]
    responses, repeated, seen = [], [], set()
    for k, page in enumerate(pages):
        for entry in page.entries:
            key = (entry.method, entry.origin, entry.path)
            if key in seen:
                repeated.append(k * ENTRY_STRIDE + entry.index)
                continue
            seen.add(key)
            responses.append(_response(entry, sites[entry.origin], k * ENTRY_STRIDE))
    files = ", ".join(page.file for page in pages)
    return ReplayPlan(files, tuple(site_list), tuple(responses), tuple(repeated))


def _response(entry: Entry, site: int, entry_offset: int = 0) -> Response:
    headers = tuple((k, v) for k, v in entry.headers if k not in DROPPED_HEADERS)
    headers += tuple((k, v) for k, v in ADDED_HEADERS if entry.header(k) is None)
    return Response(
        entry=entry_offset + entry.index,
        site=site,
        method=entry.method,
        target=entry.path,
        status=entry.status,
        headers=headers,
        body_bytes=len(entry.body) if entry.body is not None else entry.body_bytes,
        transfer_bytes=entry.transfer_bytes,
        wait_ms=entry.wait_ms,
        body=_body_name(entry),
    )


# A made-up text body's maker by its content type (workloads/web.py: exactly the size asked).
TEXT_MAKERS = {
    "text/css": web.make_css,
    "application/javascript": web.make_js,
    "text/javascript": web.make_js,
    "application/json": web.make_json,
}


def _body(entry: Entry) -> bytes:
    if entry.body is not None:
        return entry.body
    name, generator = _made_up_name(entry), _generator(entry)
    if generator == "png":
        return made_up_png(name, entry.body_bytes) or b""
    if generator in TEXT_MAKERS:
        text = TEXT_MAKERS[generator](name, entry.body_bytes)
        if len(text) == entry.body_bytes:  # a JSON body of 1-3 bytes cannot hold its brackets
            return text
    return rng_bytes(name, entry.body_bytes)


def _generator(entry: Entry) -> str:
    """What makes up a body the HAR does not hold: "png" for a raster image that fits one, a
    TEXT_MAKERS content type for text of that type, else "bytes"."""
    content_type = (entry.header("content-type") or "").split(";")[0].strip().lower()
    if content_type in TEXT_MAKERS:
        return content_type
    raster = content_type.startswith("image/") and content_type != "image/svg+xml"
    return "png" if raster and entry.body_bytes >= MIN_PNG_BYTES else "bytes"


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PADDING_CHUNK = b"qbPd"  # ancillary, private, safe to copy: every decoder skips it
MIN_PNG_BYTES = 81  # made_up_png's smallest: signature, IHDR, IDAT, an empty padding chunk, IEND


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def made_up_png(name: str, size: int) -> bytes | None:
    """A valid PNG of exactly `size` bytes: one white pixel, then a private chunk of SHAKE-128
    bytes (incompressible, as a photo's). None when `size` cannot hold the smallest one."""
    head = (
        PNG_SIGNATURE
        + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + _png_chunk(b"IDAT", zlib.compress(b"\x00\xff\xff\xff", 9))
    )
    tail = _png_chunk(b"IEND", b"")
    room = size - len(head) - len(tail) - 12  # the padding chunk's length, type and CRC
    if room < 0:
        return None
    return head + _png_chunk(PADDING_CHUNK, rng_bytes(name, room)) + tail


def _made_up_name(entry: Entry) -> str:
    return f"replay/{entry.origin}{entry.path}#{entry.index}"


def _body_name(entry: Entry) -> str:
    """A recorded body's file is named by its sha256; a made-up one by a sha256 of what makes
    it (its generator's name and size), so planning never generates a body: write_site does,
    once (a 256 MB page would otherwise be made up twice)."""
    if entry.body is not None:
        return hashlib.sha256(entry.body).hexdigest() if entry.body else ""
    if entry.body_bytes == 0:
        return ""
    made = f"made-up\0{_made_up_name(entry)}\0{entry.body_bytes}\0{_generator(entry)}"
    return hashlib.sha256(made.encode()).hexdigest()


def write_site(plan: ReplayPlan, pages: Page | Sequence[Page], root: Path) -> Path:
    """root/replay.json and root/bodies/: what a replay server of `plan` (of these pages, in
    its order) serves. Bodies are written once each, atomically; the manifest last, so a site
    with a manifest is whole."""
    root.mkdir(parents=True, exist_ok=True)
    listed = [pages] if isinstance(pages, Page) else list(pages)
    entries = {k * ENTRY_STRIDE + e.index: e for k, page in enumerate(listed) for e in page.entries}
    for response in plan.responses:
        if response.body and not (root / BODIES / response.body).is_file():
            write_atomic(root, f"{BODIES}/{response.body}", [_body(entries[response.entry])])
    manifest = {
        "format": FORMAT,
        "page": plan.page,
        "sites": [asdict(site) for site in plan.sites],
        "responses": [asdict(response) for response in plan.responses],
    }
    partial = root / f".{MANIFEST}.{os.getpid()}.part"
    partial.write_text(json.dumps(manifest, indent=1) + "\n")
    partial.replace(root / MANIFEST)
    return root / MANIFEST
