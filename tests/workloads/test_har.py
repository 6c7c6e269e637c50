"""The HAR reader (workloads/har.py): a valid HAR becomes the page model; every hostile shape is
refused in under a second with one line naming the file and the entry; the shipped corpus is
what its generator makes, and passes the reader."""

from __future__ import annotations

import copy
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quicbed.workloads import har, har_corpus
from quicbed.workloads.har import HarError, Origin, load_har

TIME_LIMIT_S = 1.0  # each refusal takes milliseconds; a second is the bound
URL = ("log", "entries", 1, "request", "url")


def _entry(url: str, status: int = 200, **response: Any) -> dict[str, Any]:
    return {
        "startedDateTime": "2026-01-01T00:00:00.000Z",
        "time": 12.5,
        "request": {"method": "GET", "url": url, "httpVersion": "h3", "headers": [], "cookies": []},
        "response": {
            "status": status,
            "headers": [
                {"name": "Content-Type", "value": "text/css"},
                {"name": "Set-Cookie", "value": "session=secret"},
                {"name": "alt-svc", "value": 'h3=":443"'},
            ],
            "content": {"size": 1000, "mimeType": "text/css"},
            "bodySize": 400,
            **response,
        },
        "timings": {"send": 0, "wait": 12.5, "receive": 0},
    }


def valid() -> dict[str, Any]:
    """Two origins: the landing document (recorded, plain text) and a stylesheet (size only)."""
    landing = _entry("https://www.site.example/")
    landing["response"]["content"] = {"size": 5, "mimeType": "text/html", "text": "hello"}
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "test", "version": "1"},
            "entries": [landing, _entry("https://cdn.other.example:8443/a/b.css?v=2")],
        }
    }


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "page.har"
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return path


def refused(path: Path, field: str, fragment: str, line: int | None = None) -> str:
    """load_har(path) refuses it as `path: field: ...` (or `path:line: field: ...`) in one line
    holding `fragment`, in under a second."""
    start = time.perf_counter()
    with pytest.raises(HarError) as caught:
        load_har(path)
    elapsed = time.perf_counter() - start
    message = str(caught.value)
    where = f"{path}:{line}: {field}: " if line else f"{path}: {field}: "
    assert message.startswith(where), message
    assert fragment in message, message
    assert "\n" not in message and "\r" not in message, message
    assert elapsed < TIME_LIMIT_S, f"took {elapsed:.2f} s: {message}"
    return message


def mutated(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    data = copy.deepcopy(valid())
    change(data)
    return data


def _set(path: tuple[str | int, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


def _name(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


# --- the model ---------------------------------------------------------------------------------


def test_a_valid_har_becomes_the_page_model(tmp_path):
    page = load_har(write(tmp_path, valid()))
    assert page.origins == (
        Origin("https", "www.site.example", 443),
        Origin("https", "cdn.other.example", 8443),
    )
    assert [str(o) for o in page.origins] == ["https://www.site.example", "https://cdn.other.example:8443"]
    landing, css = page.entries
    assert page.landing is landing and landing.body == b"hello" and landing.body_bytes == 5
    assert css.path == "/a/b.css?v=2" and css.method == "GET" and css.status == 200
    # Only the kept headers, names in lower case; the cookie is dropped.
    assert css.headers == (("content-type", "text/css"), ("alt-svc", 'h3=":443"'))
    assert css.header("set-cookie") is None
    assert (css.body, css.body_bytes, css.transfer_bytes, css.wait_ms) == (None, 1000, 400, 12.5)
    assert page.creator == "test 1" and page.body_bytes == 1005 and page.dropped == ()
    with pytest.raises(AttributeError):
        css.status = 500  # type: ignore[misc]  # immutable


def test_a_base64_body_is_decoded_and_wins_over_its_claimed_size(tmp_path):
    data = mutated(
        _set(("log", "entries", 1, "response", "content"), {"size": 99, "text": "AAEC", "encoding": "base64"})
    )
    entry = load_har(write(tmp_path, data)).entries[1]
    assert (entry.body, entry.body_bytes) == (b"\x00\x01\x02", 3)


def test_websockets_and_unanswered_requests_are_dropped_not_served(tmp_path):
    data = valid()
    data["log"]["entries"] += [
        _entry("wss://www.site.example/ws", 101),
        _entry("https://gone.site.example/x", 0),
    ]
    page = load_har(write(tmp_path, data))
    assert len(page.entries) == 2 and [i for i, _ in page.dropped] == [2, 3]
    assert "websocket" in page.dropped[0][1] and "status 0" in page.dropped[1][1]
    data["log"]["entries"] = data["log"]["entries"][2:]
    refused(write(tmp_path, data), "log.entries", "no entry a replay could serve")


def test_a_redirect_keeps_its_status_and_location(tmp_path):
    location = [{"name": "Location", "value": "https://www.site.example/new"}]
    data = mutated(_set(("log", "entries", 1, "response", "status"), 301))
    data["log"]["entries"][1]["response"]["headers"] = location
    entry = load_har(write(tmp_path, data)).entries[1]
    assert (entry.status, entry.header("location")) == (301, "https://www.site.example/new")
    data["log"]["entries"][1]["response"]["headers"] = []
    refused(write(tmp_path, data), "log.entries[1].response.headers", "redirect without a location")


# --- hostile request URLs: one rule each --------------------------------------------------------

HOSTILE_URLS = {
    "traversal": ("https://www.site.example/a/../../etc/passwd", "dot segment"),
    "dot segment": ("https://www.site.example/./a", "dot segment"),
    "encoded dots": ("https://www.site.example/a/%2e%2e/%2E%2E/etc/passwd", "dot segment"),
    "double-encoded dots": ("https://www.site.example/a/%252e%252e/x", "dot segment"),
    "encoded slash": ("https://www.site.example/a%2Fb", "encoded slash"),
    "thrice encoded": ("https://www.site.example/a%2525252541", "more than 3 times"),
    "raw NUL": ("https://www.site.example/a\x00b", "printable ASCII"),
    "encoded NUL": ("https://www.site.example/a%00b", "control character"),
    "raw backslash": ("https://www.site.example/a\\..\\b", "backslash"),
    "encoded backslash": ("https://www.site.example/a%5c..%5cb", "backslash"),
    "space": ("https://www.site.example/a b", "printable ASCII"),
    "non-ASCII": ("https://www.site.example/caf\u00e9", "printable ASCII"),
    "IPv4 literal": ("https://10.0.0.1/", "IP address"),
    "IPv6 literal": ("https://[::1]:8443/", "IP address"),
    "one label": ("https://localhost/", "no domain"),
    "under localhost": ("https://evil.localhost/", "under localhost"),
    "underscore": ("https://bad_name.site.example/", "DNS label"),
    "empty label": ("https://a..site.example/", "DNS label"),
    "label too long": (f"https://{'a' * 64}.example/", "DNS label"),
    "name too long": ("https://" + ".".join(["abcdefghi"] * 26) + "/", "253 characters"),
    "numeric top label": ("https://1.2.3/", "numeric label"),
    "hex address": ("https://0x7f.1/", "numeric label"),
    "ftp scheme": ("ftp://www.site.example/a", "scheme"),
    "file scheme": ("file:///etc/passwd", "scheme"),
    "javascript scheme": ("javascript:alert(1)", "scheme"),
    "no scheme": ("/relative/path", "scheme"),
    "credentials": ("https://user:secret@www.site.example/", "credentials"),
    "port out of range": ("https://www.site.example:99999/", "not a URL"),
    "no host": ("https:///path", "no host"),
    "URL too long": ("https://www.site.example/" + "a" * 9000, "the limit is 8192"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_URLS))
def test_a_hostile_url_is_refused_at_its_entry(case, tmp_path):
    url, fragment = HOSTILE_URLS[case]
    refused(write(tmp_path, mutated(_set(URL, url))), _name(URL), fragment)


# --- hostile sizes, counts and values ------------------------------------------------------------

GIB = 1024**3
HOSTILE_FIELDS = {
    "1 GB body claimed": (("log", "entries", 1, "response", "content", "size"), GIB, "a body is -1"),
    "1 GB transfer claimed": (("log", "entries", 1, "response", "bodySize"), GIB, "a body is -1"),
    "negative size": (("log", "entries", 1, "response", "content", "size"), -5, "a body is -1"),
    "think time of days": (("log", "entries", 1, "timings", "wait"), 1e9, "think time"),
    "negative think time": (("log", "entries", 1, "timings", "wait"), -3, "think time"),
    "method CONNECT": (("log", "entries", 1, "request", "method"), "CONNECT", "method 'CONNECT'"),
    "status 700": (("log", "entries", 1, "response", "status"), 700, "status 700"),
    "status 102": (("log", "entries", 1, "response", "status"), 102, "status 102"),
    "version 2.0": (("log", "version"), "2.0", "HAR version '2.0'"),
    "header injection": (
        ("log", "entries", 1, "response", "headers", 0, "value"),
        "text/css\r\nSet-Cookie: x=1",
        "control character",
    ),
    "header too long": (("log", "entries", 1, "response", "headers", 0, "value"), "a" * 9000, "8192"),
    "base64 not base64": (
        ("log", "entries", 1, "response", "content"),
        {"text": "@@@", "encoding": "base64"},
        "not valid base64",
        "log.entries[1].response.content.text",
    ),
    "unknown encoding": (
        ("log", "entries", 1, "response", "content"),
        {"text": "x", "encoding": "gzip"},
        "'gzip'",
        "log.entries[1].response.content.encoding",
    ),
    # wrong types, each at its field
    "status as string": (
        ("log", "entries", 1, "response", "status"),
        "200",
        "expected an integer, found a string",
    ),
    "status as boolean": (
        ("log", "entries", 1, "response", "status"),
        True,
        "expected an integer, found a boolean",
    ),
    "size as float": (
        ("log", "entries", 1, "response", "content", "size"),
        1.5,
        "expected an integer, found a number",
    ),
    "url as number": (URL, 7, "expected a string, found a number"),
    "method missing": (("log", "entries", 1, "request", "method"), None, "expected a string, found nothing"),
    "entries as object": (("log", "entries"), {}, "expected a list, found an object"),
    "entry as list": (("log", "entries", 1), [], "expected an object, found a list"),
    "request as string": (("log", "entries", 1, "request"), "GET /", "expected an object, found a string"),
    "headers as object": (("log", "entries", 1, "response", "headers"), {}, "expected a list"),
    "header as string": (("log", "entries", 1, "response", "headers", 0), "a: b", "expected an object"),
    "header value as number": (
        ("log", "entries", 1, "response", "headers", 0, "value"),
        3,
        "expected a string",
    ),
    "wait as string": (("log", "entries", 1, "timings", "wait"), "12", "expected a number, found a string"),
    "content as list": (("log", "entries", 1, "response", "content"), [], "expected an object"),
    "text as number": (("log", "entries", 1, "response", "content", "text"), 5, "expected a string"),
    "creator as string": (("log", "creator"), "me", "expected an object"),
    "comment as list": (("log", "comment"), [], "expected a string"),
    "log as list": (("log",), [], "expected an object, found a list"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_FIELDS))
def test_a_hostile_field_is_refused_where_it_is(case, tmp_path):
    where, value, fragment, *deeper = HOSTILE_FIELDS[case]  # deeper: the field at fault, if not `where`
    refused(write(tmp_path, mutated(_set(where, value))), deeper[0] if deeper else _name(where), fragment)


def test_a_million_entries_are_refused_before_parsing(tmp_path):
    data = valid()
    data["log"]["entries"] = [{}] * 1_000_000
    refused(write(tmp_path, data), "file", "JSON values (the limit is 1000000)")


def test_more_entries_than_the_bound_are_refused_by_count(tmp_path):
    data = valid()
    data["log"]["entries"] = [{}] * (har.MAX_ENTRIES + 1)
    refused(write(tmp_path, data), "log.entries", "2001 entries (the limit is 2000)")


def test_too_many_origins_are_refused_at_the_first_one_over(tmp_path):
    data = valid()
    data["log"]["entries"] = [_entry(f"https://host{i}.site.example/") for i in range(har.MAX_ORIGINS + 5)]
    refused(write(tmp_path, data), f"log.entries[{har.MAX_ORIGINS}].request.url", "more than 200 origins")


def test_a_page_of_too_many_bytes_is_refused(tmp_path):
    data = valid()
    big = _entry("https://www.site.example/big", content={"size": har.MAX_BODY_BYTES})
    data["log"]["entries"] = [big] * 9  # 9 x 32 MiB > 256 MiB
    refused(write(tmp_path, data), "log.entries[8].response.content.size", "passes 256 MiB")


def test_a_recorded_body_over_the_bound_is_refused_before_decoding(tmp_path, monkeypatch):
    monkeypatch.setattr(har, "MAX_BODY_BYTES", 1024)
    content = {"size": 10, "text": "QUFB" * 400, "encoding": "base64"}  # 1,200 bytes decoded
    data = mutated(_set(("log", "entries", 1, "response", "content"), content))
    refused(write(tmp_path, data), "log.entries[1].response.content.text", "recorded body over 1024 bytes")


def test_a_huge_file_is_refused_by_its_size_without_reading_it(tmp_path):
    path = tmp_path / "page.har"
    with open(path, "wb") as f:
        f.truncate(GIB)  # sparse: a gigabyte of zeros that would take seconds to read
    refused(path, "file", "larger than 32 MiB")


def test_a_file_of_millions_of_values_is_refused_before_parsing(tmp_path):
    values = b"1," * (har.MAX_FILE_BYTES // 2 - 64)  # 16 million numbers: json takes ~1 s
    refused(write(tmp_path, b'{"log": {"x": [' + values + b"1]}}"), "file", "JSON values (the limit is")


def test_a_directory_and_a_fifo_are_not_read(tmp_path):
    (tmp_path / "dir.har").mkdir()
    refused(tmp_path / "dir.har", "file", "not a regular file (a directory)")
    os.mkfifo(tmp_path / "fifo.har")
    refused(tmp_path / "fifo.har", "file", "not a regular file (a FIFO)")
    refused(tmp_path / "missing.har", "file", "cannot read")


# --- malformed JSON: the line it is on -------------------------------------------------------------

MALFORMED = {
    "trailing comma": (b'{"log": {\n "version": "1.2",\n "entries": [],\n}}\n', 4, "Expecting property name"),
    "truncated": (b'{"log": {\n "version": "1.2",\n "entries": [\n', 4, "Expecting value"),
    "NaN": (b'{"log": {\n "x": NaN}}', 1, "NaN is not a JSON number"),
    "Infinity": (b'{"log": {"x": -Infinity}}', 1, "-Infinity is not a JSON number"),
    "deep nesting": (b"[" * 100_000, 1, "nested too deep"),
    "not UTF-8": (b'{"log":\n\n {"version": "\xff"}}', 3, "not UTF-8"),
    "huge integer": (b'{"log": {"x": ' + b"9" * 5000 + b"}}", 1, "digits"),
    "empty": (b"", 1, "Expecting value"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_json_is_refused_with_its_line(case, tmp_path):
    data, line, fragment = MALFORMED[case]
    refused(write(tmp_path, data), "json", fragment, line=line)


def test_a_document_that_is_not_an_object_is_refused(tmp_path):
    refused(write(tmp_path, []), "har", "expected an object, found a list")
    refused(write(tmp_path, {"entries": []}), "log", "expected an object, found nothing")


def test_a_refusal_never_prints_a_control_character_of_the_file(tmp_path):
    url = "https://www.site.example/%2e%2e\u001b[2J"
    message = refused(write(tmp_path, mutated(_set(URL, url))), _name(URL), "printable ASCII")
    assert "\x1b" not in message


# --- the shipped corpus --------------------------------------------------------------------------


def test_the_corpus_generator_makes_the_shipped_files_byte_for_byte(tmp_path):
    written = har_corpus.write_corpus(tmp_path)
    assert [p.name for p in written] == ["median-desktop.har", "median-mobile.har"]
    for path in written:
        shipped = har_corpus.PAGES_DIR / path.name
        assert (
            shipped.read_bytes() == path.read_bytes()
        ), f"run python -m quicbed.workloads.har_corpus: {shipped}"


@pytest.mark.parametrize("model", har_corpus.MODELS, ids=lambda m: m.name)
def test_a_shipped_page_is_its_model_and_loads_every_resource(model):
    page = load_har(har_corpus.PAGES_DIR / f"{model.name}.har")
    assert len(page.entries) == model.requests and len(page.origins) == model.hosts >= 10
    assert page.body_bytes == model.kib * 1024
    assert page.origins[0].host == model.first_party and page.landing.path == "/"
    assert "Web Almanac 2024" in page.comment and "Assumed" in page.comment
    # The landing document names every other resource, so a browser fetches them all.
    document = (page.landing.body or b"").decode()
    assert len(page.landing.body or b"") == page.landing.body_bytes
    referenced = set(re.findall(r'(?:href|src)="([^"]+)"', document))
    assert referenced == {f"{e.origin}{e.path}" for e in page.entries[1:]}
    assert all(e.header("alt-svc") for e in page.entries)  # each origin offers h3
