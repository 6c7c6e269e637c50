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
  machine, and incompressible.
- **a request recorded twice** (method, origin and target alike) is answered as first
  recorded: a server matches a request by those alone.

The server answers each response no sooner than its think time (`wait_ms`) after the request
arrived; the replay server's own time beside it is what its bench measures.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from quicbed.topology.net import SERVER_NET

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


def site_address(index: int) -> str:
    if FIRST_HOST + index > LAST_HOST:
        raise ReplayError(
            f"{index + 1} origins: the server LAN has addresses for {LAST_HOST - FIRST_HOST + 1}"
        )
    return f"{SERVER_NET}.{FIRST_HOST + index}"


def plan_replay(page: Page) -> ReplayPlan:
    """The sites and responses a replay of `page` serves (see the module's text)."""
    sites: dict[Origin, int] = {}
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
    for entry in page.entries:
        key = (entry.method, entry.origin, entry.path)
        if key in seen:
            repeated.append(entry.index)
            continue
        seen.add(key)
        responses.append(_response(entry, sites[entry.origin]))
    return ReplayPlan(page.file, tuple(site_list), tuple(responses), tuple(repeated))


def _response(entry: Entry, site: int) -> Response:
    headers = tuple((k, v) for k, v in entry.headers if k not in DROPPED_HEADERS)
    return Response(
        entry=entry.index,
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


def _body(entry: Entry) -> bytes:
    if entry.body is not None:
        return entry.body
    return rng_bytes(_made_up_name(entry), entry.body_bytes)


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
    return hashlib.sha256(f"made-up\0{_made_up_name(entry)}\0{entry.body_bytes}".encode()).hexdigest()


def write_site(plan: ReplayPlan, page: Page, root: Path) -> Path:
    """root/replay.json and root/bodies/: what a replay server of `plan` serves. Bodies are
    written once each, atomically; the manifest last, so a site with a manifest is whole."""
    root.mkdir(parents=True, exist_ok=True)
    entries = {entry.index: entry for entry in page.entries}
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
