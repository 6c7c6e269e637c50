"""A recorded web page (HAR 1.2) read into an immutable page model, and refused when hostile.

The foundation of issue 50's replay: `load_har(path)` turns a HAR file into a `Page`, its
`origins` (scheme, host, port) and its `entries` (method, path, status, the response headers
that matter, body size and recorded body, think time). workloads/replay.py lays a `Page` out
for stacks/quicgo's replay server; workloads/recorded.py is how an experiment names one
(`workload: {kind: web, pages: [{har: FILE}]}`).

What a replay of a `Page` keeps:
- every origin under its recorded name, each served by its own server inside the emulated
  network only (so a name must be a valid DNS name, and an IP literal is refused: its address
  is one the testbed cannot take);
- per response: status, the headers in `KEPT_HEADERS` (content type and encoding, cache
  validators, `alt-svc`, `location` of a redirect, the CORS header cross-origin fonts need,
  `timing-allow-origin`),
  the body where the HAR recorded one (`content.text`, plain or base64), else its size
  (`content.size`), for the server to make up deterministically;
- the server's think time, `timings.wait` (ms), for the replay to answer within it;
- redirects, as responses: a 3xx with its `location`, which the browser follows itself.

What it drops:
- cookies (request `cookies`, `Cookie` and `Set-Cookie` headers), auth headers, and every other
  request header: a request is matched by method, origin and path (with query) alone;
- request bodies (`postData`): a POST is answered as recorded, whatever it sends;
- server push: a pushed response is served when the browser asks for it, never pushed;
- websockets (status 101) and requests that got no response (status 0): listed in
  `Page.dropped` with their entry index, never served;
- the other timings (DNS, connect, TLS, send, receive): the emulated path makes its own.

Hostile input is refused in well under a second with one line naming the file and the entry
(`page.har: log.entries[17].request.url: ...`), never a traceback: the file's size is bounded
before it is read (quicbed/limits.py), and every cap below is far above a real page's.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from quicbed.errors import InputError
from quicbed.limits import TooBig, read_bounded
from quicbed.yamlio import PathKey, field_name, one_line

# --- bounds, each far above a real page: the HTTP Archive's median page made about 70 requests
# and weighed about 2.5 MB in 2024 (Web Almanac, Page Weight), its 90th percentile 179 requests
# and over 6 MB in 2019 (the same chapter then) -------------------------------------------------
# A HAR with every body recorded as base64 is 4/3 of the page: 32 MiB holds a 20 MB page, and
# json parses it in about 0.3 s, so a file at the bound is still read in under a second.
MAX_FILE_BYTES = 32 * 1024 * 1024
# json's parse time grows with the values, not the bytes: 2 million empty lists (6 MiB) take
# over a second. Counting the separators (commas, `{` and `[`: 30 ms for 32 MiB) first refuses
# such a file. A real HAR of 2,000 entries has under 200,000 outside its bodies; text bodies
# add theirs (a few per 100 bytes of script), so a page with over 10 MB of recorded script may
# meet the bound: save it without content, or with fewer bodies.
MAX_JSON_SEPARATORS = 1_000_000
MAX_ENTRIES = 2_000  # over ten times the 90th percentile's requests
MAX_ORIGINS = 200  # an origin is a server of its own in the replay
MAX_BODY_BYTES = 32 * 1024 * 1024  # one response, claimed or recorded (a video segment fits)
MAX_PAGE_BYTES = 256 * 1024 * 1024  # the sum of the claimed bodies a replay would make up
MAX_WAIT_MS = 60_000.0  # a server thinking longer than a minute is a broken record
MAX_URL_CHARS = 8_192  # what common servers accept in a request line
MAX_HEADER_CHARS = 8_192

SCHEMES = {"http": 80, "https": 443}
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})
KEPT_HEADERS = (
    "content-type",
    "content-encoding",
    "cache-control",
    "expires",
    "etag",
    "last-modified",
    "alt-svc",
    "location",
    "access-control-allow-origin",
    "timing-allow-origin",
)
_METHODS = ", ".join(sorted(METHODS))
DROPPED_STATUSES = {0: "no response was recorded (status 0)", 101: "a websocket (status 101) is not replayed"}

_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# Printable ASCII but space: what a request line's target may hold (RFC 9112); a browser's HAR
# writer percent-encodes the rest.
_URL_CHARS = re.compile(r"[\x21-\x7e]*")
_DECODE_ROUNDS = 3  # %25252e: a server that decodes twice or thrice must not find a dot segment


class HarError(InputError):
    """A HAR refused: `file: field: message` (or `file:line: json: message`), exit 2."""


class _Refused(Exception):
    """Raised deep in the walk with where (a path in the HAR) and why; load_har adds the file."""

    def __init__(self, where: PathKey, message: str):
        super().__init__(message)
        self.where, self.message = where, message


@dataclass(frozen=True, order=True)
class Origin:
    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        default = SCHEMES[self.scheme] == self.port
        return f"{self.scheme}://{self.host}" + ("" if default else f":{self.port}")


@dataclass(frozen=True)
class Entry:
    index: int  # in log.entries: errors and the replay's rows name it
    method: str
    origin: Origin
    path: str  # the request target: path and query, as recorded (still percent-encoded)
    status: int
    headers: tuple[tuple[str, str], ...]  # KEPT_HEADERS only, names in lower case, in HAR order
    body_bytes: int  # content.size: the decoded body's length
    transfer_bytes: int | None  # bodySize: what the wire carried (compressed), None when unknown
    body: bytes | None  # the recorded body (content.text), None when the HAR holds none
    wait_ms: float  # timings.wait: the server's think time; 0 when the HAR says -1

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key == name), None)


@dataclass(frozen=True)
class Page:
    file: str
    creator: str  # "name version" of the HAR's writer
    comment: str  # log.comment: a synthetic page states its model and source here
    origins: tuple[Origin, ...]  # in order of first use; the landing document's first
    entries: tuple[Entry, ...]  # the ones a replay serves, in HAR order
    dropped: tuple[tuple[int, str], ...]  # (entry index, why) of the entries it does not

    @property
    def landing(self) -> Entry:
        return self.entries[0]

    @property
    def body_bytes(self) -> int:
        return sum(entry.body_bytes for entry in self.entries)


def load_har(path: Path | str) -> Page:
    """The page a HAR file records, or HarError naming the file and the entry at fault."""
    return read_har(path)[1]


def read_har(path: Path | str) -> tuple[bytes, Page]:
    """The HAR file's bytes (bounded before they are read) and the page they record."""
    file = str(path)
    try:
        data = read_bounded(path, MAX_FILE_BYTES)
    except TooBig as exc:
        raise HarError(f"{exc} (the limit for a HAR file)", file, field="file") from None
    except OSError as exc:
        raise HarError(f"cannot read: {exc.strerror or exc}", file, field="file") from None
    return data, parse_har(data, file)


def parse_har(data: bytes, file: str = "<har>") -> Page:
    if len(data) > MAX_FILE_BYTES:
        raise HarError(f"larger than {_mib(MAX_FILE_BYTES)} (the limit for a HAR file)", file, field="file")
    separators = sum(data.count(c) for c in (b",", b"{", b"["))
    if separators > MAX_JSON_SEPARATORS:
        raise HarError(f"{separators} JSON values (the limit is {MAX_JSON_SEPARATORS})", file, field="file")
    document = _json(data, file)
    try:
        return _page(document, file)
    except _Refused as exc:
        raise HarError(one_line(exc.message), file, field=field_name(exc.where)) from None


def _json(data: bytes, file: str) -> Any:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise HarError(f"not UTF-8 text (byte 0x{data[exc.start]:02x})", file, line, "json") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise HarError(one_line(exc.msg), file, exc.lineno, "json") from None
    except RecursionError:  # 100,000 `[` in a row: json's scanner recurses per level
        raise HarError("nested too deep to be a HAR", file, 1, "json") from None
    except ValueError as exc:  # NaN/Infinity (_no_constant), an integer of 5,000 digits
        raise HarError(one_line(str(exc)), file, 1, "json") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _page(document: Any, file: str) -> Page:
    log = _object(_object(document, ("har",)).get("log"), ("log",))
    version = _string(log.get("version"), ("log", "version"))
    if version not in ("1.1", "1.2"):
        raise _Refused(("log", "version"), f"HAR version {version!r}; this reader knows 1.1 and 1.2")
    creator = _object(log.get("creator"), ("log", "creator"))
    made_by = " ".join(
        _string(creator.get(key, ""), ("log", "creator", key)) for key in ("name", "version")
    ).strip()
    comment = _string(log.get("comment", ""), ("log", "comment"))
    raw_entries = _array(log.get("entries"), ("log", "entries"))
    if len(raw_entries) > MAX_ENTRIES:
        raise _Refused(("log", "entries"), f"{len(raw_entries)} entries (the limit is {MAX_ENTRIES})")
    entries: list[Entry] = []
    dropped: list[tuple[int, str]] = []
    origins: dict[Origin, None] = {}
    total = 0
    for index, raw in enumerate(raw_entries):
        where: PathKey = ("log", "entries", index)
        entry, why = _entry(_object(raw, where), index, where)
        if why:
            dropped.append((index, why))
            continue
        assert entry is not None
        origins.setdefault(entry.origin)
        if len(origins) > MAX_ORIGINS:
            raise _Refused((*where, "request", "url"), f"more than {MAX_ORIGINS} origins in one page")
        total += entry.body_bytes
        if total > MAX_PAGE_BYTES:
            raise _Refused((*where, "response", "content", "size"), f"the page passes {_mib(MAX_PAGE_BYTES)}")
        entries.append(entry)
    if not entries:
        raise _Refused(("log", "entries"), "no entry a replay could serve")
    return Page(file, made_by, comment, tuple(origins), tuple(entries), tuple(dropped))


def _entry(raw: dict[str, Any], index: int, where: PathKey) -> tuple[Entry | None, str]:
    request = _object(raw.get("request"), (*where, "request"))
    response = _object(raw.get("response"), (*where, "response"))
    status = _integer(response.get("status"), (*where, "response", "status"))
    if status in DROPPED_STATUSES:  # before its URL: a websocket's is ws:// or wss://
        return None, DROPPED_STATUSES[status]
    method = _string(request.get("method"), (*where, "request", "method"))
    origin, target = _url(request.get("url"), (*where, "request", "url"))
    if method not in METHODS:
        raise _Refused((*where, "request", "method"), f"method {method!r}; a replay answers {_METHODS}")
    if not 200 <= status <= 599:
        raise _Refused((*where, "response", "status"), f"status {status}; a response's is 200 to 599")
    headers = _headers(response.get("headers"), (*where, "response", "headers"))
    body_bytes, body = _content(response.get("content"), (*where, "response", "content"))
    transfer = _size(response.get("bodySize", -1), (*where, "response", "bodySize"))
    timings = _object(raw.get("timings", {}), (*where, "timings"))
    wait = _number(timings.get("wait", -1), (*where, "timings", "wait"))
    if wait != -1 and not 0 <= wait <= MAX_WAIT_MS:
        raise _Refused((*where, "timings", "wait"), f"{wait} ms; think time is -1 or 0 to {MAX_WAIT_MS:.0f}")
    if 300 <= status <= 399 and status != 304 and not any(name == "location" for name, _ in headers):
        raise _Refused((*where, "response", "headers"), f"a {status} redirect without a location header")
    if body is not None:
        body_bytes = len(body)  # what was recorded wins over what was claimed
    elif body_bytes is None:
        body_bytes = transfer or 0
    wait = max(wait, 0.0)
    return Entry(index, method, origin, target, status, headers, body_bytes, transfer, body, wait), ""


def _url(value: Any, where: PathKey) -> tuple[Origin, str]:
    url = _string(value, where)
    if len(url) > MAX_URL_CHARS:
        raise _Refused(where, f"a URL of {len(url)} characters (the limit is {MAX_URL_CHARS})")
    if not _URL_CHARS.fullmatch(url):
        bad = next(c for c in url if not _URL_CHARS.fullmatch(c))
        raise _Refused(where, f"character {bad!r} in the URL; a request target is printable ASCII")
    if "\\" in url:
        raise _Refused(where, "a backslash in the URL (servers read it as a path separator)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _Refused(where, f"not a URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise _Refused(where, f"scheme {parts.scheme or '(none)'!r}; a replay serves http and https only")
    if "@" in parts.netloc:
        raise _Refused(where, "credentials in the URL (user@host): scrub them from the HAR")
    host = _host(parts, where)
    return Origin(scheme, host, port or SCHEMES[scheme]), _target(parts, where)


def _host(parts: SplitResult, where: PathKey) -> str:
    host = (parts.hostname or "").lower()
    if not host:
        raise _Refused(where, "no host in the URL")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        raise _Refused(
            where,
            f"host {host} is an IP address: a replay serves each origin under its name on the "
            "testbed's own addresses, and cannot take a recorded one",
        )
    why = dns_name_problem(host)
    if why:
        raise _Refused(where, f"host {host!r} {why}")
    return host


def dns_name_problem(host: str) -> str:
    """Why `host` is not a name the testbed may serve (empty: it may). A replayed origin keeps
    its recorded name, resolved by the testbed's own resolver to a server on the emulated
    network: it must be a DNS name (RFC 1123 labels), have a domain (one label such as
    `localhost` names the host itself), and not read as an address."""
    if len(host) > 253:
        return "is longer than a DNS name's 253 characters"
    labels = host.split(".")
    if len(labels) < 2:
        return "has no domain (a one-label name is the host's own or the resolver's search list's)"
    if labels[-1] == "localhost":
        return "is under localhost, which names the host itself"
    for label in labels:
        if not _LABEL.fullmatch(label):
            return f"has label {label!r}: a DNS label is 1 to 63 of a-z, 0-9 and '-' (not at an end)"
    if labels[-1].isdigit():
        return "ends in a numeric label, which resolvers may read as an IPv4 address"
    return ""


def _target(parts: SplitResult, where: PathKey) -> str:
    """The request target (path and query); refused where any decoding of it would leave its
    directory: a dot segment, an encoded slash or backslash, a NUL or control character."""
    path = parts.path or "/"
    if not path.startswith("/"):
        raise _Refused(where, "a path that does not start with /")
    seen = path
    for _ in range(_DECODE_ROUNDS):
        for segment in seen.split("/"):
            if segment in (".", ".."):
                raise _Refused(where, f"path {path!r} has a dot segment {segment!r}: path traversal")
        decoded = unquote(seen)  # invalid UTF-8 becomes U+FFFD, printable: a Latin-1 %E9 passes
        if any(c in decoded for c in "\\\0") or not decoded.isprintable():
            raise _Refused(where, f"path {path!r} decodes to a control character or a backslash")
        if decoded.count("/") != seen.count("/"):
            raise _Refused(where, f"path {path!r} has an encoded slash (%2F): some servers split on it")
        if decoded == seen:
            break
        seen = decoded
    else:
        raise _Refused(where, f"path {path!r} is encoded more than {_DECODE_ROUNDS} times over")
    return path + (f"?{parts.query}" if parts.query else "")


def _headers(value: Any, where: PathKey) -> tuple[tuple[str, str], ...]:
    kept: list[tuple[str, str]] = []
    for i, raw in enumerate(_array(value, where)):
        header = _object(raw, (*where, i))
        name = _string(header.get("name"), (*where, i, "name")).lower()
        text = _string(header.get("value"), (*where, i, "value"))
        if name not in KEPT_HEADERS:
            continue
        if len(text) > MAX_HEADER_CHARS or not text.isprintable():
            raise _Refused(
                (*where, i, "value"),
                f"{name}: a control character or over {MAX_HEADER_CHARS} characters (not a header value)",
            )
        kept.append((name, text))
    return tuple(kept)


def _content(value: Any, where: PathKey) -> tuple[int | None, bytes | None]:
    content = _object(value, where)
    size = _size(content.get("size", -1), (*where, "size"))
    if "text" not in content:
        return size, None
    text = _string(content["text"], (*where, "text"))
    encoding = _string(content.get("encoding", ""), (*where, "encoding"))
    if encoding not in ("", "base64"):
        raise _Refused((*where, "encoding"), f"encoding {encoding!r}; HAR bodies are plain text or base64")
    # Measured before decoding: a recorded body over the bound never lands in memory twice.
    claimed = len(text) * 3 // 4 if encoding else len(text)
    if claimed > MAX_BODY_BYTES:
        raise _Refused((*where, "text"), f"a recorded body over {_mib(MAX_BODY_BYTES)}")
    if not encoding:
        return size, text.encode("utf-8", errors="surrogatepass")
    try:
        return size, base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _Refused((*where, "text"), "not valid base64") from None


def _size(value: Any, where: PathKey) -> int | None:
    """A HAR byte count: -1 (unknown) is None; anything else 0 to MAX_BODY_BYTES."""
    size = _integer(value, where)
    if size == -1:
        return None
    if not 0 <= size <= MAX_BODY_BYTES:
        raise _Refused(where, f"{size} bytes; a body is -1 (unknown) or 0 to {_mib(MAX_BODY_BYTES)}")
    return size


def _mib(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"


# --- JSON types, each refused with what it expected ------------------------------------------


def _type(value: Any) -> str:
    if value is None:
        return "nothing (null or missing)"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list"}.get(
        type(value), "an object"
    )


def _object(value: Any, where: PathKey) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Refused(where, f"expected an object, found {_type(value)}")
    return value


def _array(value: Any, where: PathKey) -> list[Any]:
    if not isinstance(value, list):
        raise _Refused(where, f"expected a list, found {_type(value)}")
    return value


def _string(value: Any, where: PathKey) -> str:
    if not isinstance(value, str):
        raise _Refused(where, f"expected a string, found {_type(value)}")
    return value


def _integer(value: Any, where: PathKey) -> int:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)  # some writers print sizes as 1234.0
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Refused(where, f"expected an integer, found {_type(value)}")
    return value


def _number(value: Any, where: PathKey) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise _Refused(where, f"expected a number, found {_type(value)}")
    return float(value)


# --- a page's twin ------------------------------------------------------------------------------
ONE_ORIGIN_PREFIX = "/_origin/"  # one_origin(): where another origin's paths go
REWRITTEN_TYPES = ("text/html", "text/css")  # bodies whose URLs one_origin() rewrites


def one_origin(page: Page, host: str | None = None) -> Page:
    """The same page from its landing origin alone: what a page of the same resources costs
    without its other origins' names, connections and handshakes (the baseline a many-origin
    page's gain is set beside). Another origin's entry keeps its response under
    /_origin/<host><target>; a recorded HTML or CSS body has every other origin's URLs
    rewritten so (its size changes by those URLs' lengths); any other body is unchanged. With
    `host`, the landing origin is that name (its own URLs rewritten too): the twin can then be
    served beside the page itself (plan_pages)."""
    landing = page.landing.origin
    target = replace(landing, host=host) if host else landing
    moved = {o: f"{target}{ONE_ORIGIN_PREFIX}{o.host}" for o in page.origins if o != landing}
    if target != landing:
        moved[landing] = str(target)

    def rewritten(entry: Entry) -> Entry:
        body = entry.body
        content_type = (entry.header("content-type") or "").split(";")[0].strip()
        if body is not None and content_type in REWRITTEN_TYPES:
            text = body.decode("utf-8", errors="surrogateescape")
            for origin, prefix in moved.items():
                text = text.replace(f"{origin}/", f"{prefix}/")
            body = text.encode("utf-8", errors="surrogateescape")
        if entry.origin == landing:
            return replace(
                entry,
                origin=target,
                body=body,
                body_bytes=len(body) if body is not None else entry.body_bytes,
            )
        return replace(
            entry,
            origin=target,
            path=f"{ONE_ORIGIN_PREFIX}{entry.origin.host}{entry.path}",
            body=body,
            body_bytes=len(body) if body is not None else entry.body_bytes,
        )

    return replace(page, origins=(target,), entries=tuple(rewritten(e) for e in page.entries))
