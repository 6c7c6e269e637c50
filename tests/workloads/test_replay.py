"""The replay plan of a recorded page (workloads/replay.py): every origin its own site and
address, every response a body file, written the same on every machine."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from quicbed.workloads import replay
from quicbed.workloads.har import load_har, one_origin
from quicbed.workloads.replay import (
    ReplayError,
    plan_pages,
    plan_replay,
    site_address,
    write_site,
)

PAGES = Path(replay.__file__).resolve().parent / "pages"


@pytest.fixture(scope="module")
def page():
    return load_har(PAGES / "median-desktop.har")


def test_every_origin_is_a_site_of_its_own_address(page) -> None:
    plan = plan_replay(page)
    assert [s.name for s in plan.sites] == [o.host for o in page.origins]
    assert plan.sites[0].name == page.landing.origin.host  # the landing document's first
    addresses = [s.address for s in plan.sites]
    assert len(set(addresses)) == len(addresses) == 20
    assert addresses[0] == site_address(0) == "10.77.2.50"
    assert plan.hosts() == dict(zip(plan.names, addresses, strict=True))
    assert plan.resolves()[0] == f"{plan.names[0]}:443:10.77.2.50" and len(plan.resolves()) == 20


def test_one_host_on_two_ports_is_one_name_and_one_address(page) -> None:
    other = replace(page.origins[1], port=8443)
    moved = replace(page.entries[2], origin=other)
    plan = plan_replay(replace(page, origins=(*page.origins, other), entries=(*page.entries[:2], moved)))
    (first, second) = [s for s in plan.sites if s.name == other.host]
    assert first.address == second.address and {first.port, second.port} == {443, 8443}
    assert plan.responses[2].site == len(page.origins)


def test_responses_keep_the_record_and_drop_the_encoding(page) -> None:
    plan = plan_replay(page)
    assert len(plan.responses) == len(page.entries) and plan.repeated == ()
    for response, entry in zip(plan.responses, page.entries, strict=True):
        assert (response.entry, response.method, response.target) == (entry.index, entry.method, entry.path)
        assert response.status == entry.status and response.wait_ms == entry.wait_ms
        assert response.body_bytes == entry.body_bytes
        recorded = {k: v for k, v in entry.headers if k != "content-encoding"}
        assert dict(response.headers) == {**recorded, "timing-allow-origin": "*"}  # its timing readable
        assert plan.sites[response.site].name == entry.origin.host


def test_a_request_recorded_twice_is_answered_as_first_recorded(page) -> None:
    again = replace(page.entries[3], index=len(page.entries), status=304)
    plan = plan_replay(replace(page, entries=(*page.entries, again)))
    assert plan.repeated == (again.index,)
    (answer,) = [r for r in plan.responses if r.target == again.path and r.site == plan.responses[3].site]
    assert answer.status == page.entries[3].status


def test_the_site_is_the_same_bytes_on_every_machine(page, tmp_path: Path) -> None:
    plan = plan_replay(page)
    one, two = write_site(plan, page, tmp_path / "a"), write_site(plan, page, tmp_path / "b")
    assert one.read_bytes() == two.read_bytes()
    manifest = json.loads(one.read_text())
    assert manifest["format"] == replay.FORMAT and len(manifest["responses"]) == len(page.entries)
    for response in plan.responses:
        body = one.parent / replay.BODIES / response.body
        assert body.read_bytes() == (two.parent / replay.BODIES / response.body).read_bytes()
        assert body.stat().st_size == response.body_bytes
    # Written again over itself: nothing changes, and no partial file is left.
    write_site(plan, page, tmp_path / "a")
    assert one.read_bytes() == two.read_bytes()
    assert not [p for p in one.parent.rglob("*") if p.name.startswith(".")]


def test_a_recorded_body_is_served_as_recorded(page, tmp_path: Path) -> None:
    landing = replace(page.entries[0], body=b"<html>recorded</html>", body_bytes=21)
    recorded = replace(page, entries=(landing, *page.entries[1:]))
    plan = plan_replay(recorded)
    write_site(plan, recorded, tmp_path)
    assert (tmp_path / replay.BODIES / plan.responses[0].body).read_bytes() == b"<html>recorded</html>"


def test_planning_makes_up_no_body(page, monkeypatch) -> None:
    """Only write_site generates a made-up body: the plan names it by its generator."""

    def refuse(*_args: object) -> bytes:
        raise AssertionError("a body was made up while planning")

    monkeypatch.setattr(hashlib, "shake_128", refuse)  # what every made-up byte comes from
    plan = plan_replay(replace(page, entries=(replace(page.entries[1], body=None, body_bytes=256 << 20),)))
    (response,) = plan.responses
    assert len(response.body) == 64 and response.body_bytes == 256 << 20


def test_more_origins_than_the_lan_has_addresses_are_refused() -> None:
    assert site_address(replay.LAST_HOST - replay.FIRST_HOST) == "10.77.2.254"
    with pytest.raises(ReplayError, match="206 origins: the server LAN has addresses for 205"):
        site_address(replay.LAST_HOST - replay.FIRST_HOST + 1)


def test_one_origin_serves_every_resource_from_the_landing_origin(page) -> None:
    """The baseline of a many-origin page: the same responses from its landing origin, the
    document's links to other origins rewritten to where those responses now are."""
    single = one_origin(page)
    landing = page.landing.origin
    assert single.origins == (landing,) and {e.origin for e in single.entries} == {landing}
    assert [e.index for e in single.entries] == [e.index for e in page.entries]
    html = single.landing.body.decode()
    for before, after in zip(page.entries[1:], single.entries[1:], strict=True):
        if before.origin == landing:
            assert after.path == before.path
        else:
            assert after.path == f"/_origin/{before.origin.host}{before.path}"
        assert f"{landing}{after.path}" in html  # the document names it where it is served
        assert after.body == before.body and after.body_bytes == before.body_bytes
    assert "widgets.social.example/" not in html.replace("/_origin/widgets.social.example/", "")
    plan = plan_replay(single)
    assert len(plan.sites) == 1 and len(plan.responses) == len(plan_replay(page).responses)


def test_pages_served_at_once_take_addresses_in_turn_and_never_share_a_host(page, tmp_path: Path) -> None:
    twin = one_origin(page, "one-origin.www.median-desktop.example")
    plan = plan_pages([page, twin])
    assert plan.names == (*plan_replay(page).names, "one-origin.www.median-desktop.example")
    assert plan.hosts()["one-origin.www.median-desktop.example"] == site_address(20)
    entries = [r.entry for r in plan.responses]
    assert len(entries) == len(set(entries)) == 2 * len(plan_replay(page).responses)
    assert {e // replay.ENTRY_STRIDE for e in entries} == {0, 1}
    manifest = json.loads(write_site(plan, [page, twin], tmp_path / "site").read_text())
    bodies = {r["body"] for r in manifest["responses"] if r["body"]}
    assert all((tmp_path / "site" / replay.BODIES / b).is_file() for b in bodies)
    with pytest.raises(ReplayError, match="is an origin of both"):
        plan_pages([page, page])


def test_a_made_up_image_is_a_png_of_the_recorded_size(page, tmp_path: Path) -> None:
    """A browser stops reading an image it cannot decode: a made-up raster image is a valid PNG
    of exactly its recorded size (Pillow-free check: the chunks' lengths and CRCs)."""
    import struct
    import zlib

    plan = plan_replay(page)
    write_site(plan, page, tmp_path)
    images = [r for r in plan.responses if dict(r.headers).get("content-type", "").startswith("image/webp")]
    assert len(images) >= 10
    for response in images:
        data = (tmp_path / "bodies" / response.body).read_bytes()
        assert len(data) == response.body_bytes and data.startswith(b"\x89PNG\r\n\x1a\n")
        at, kinds = 8, []
        while at < len(data):
            (length,) = struct.unpack(">I", data[at : at + 4])
            kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
            (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
            assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
            kinds.append(kind)
            at += 12 + length
        assert at == len(data) and kinds == [b"IHDR", b"IDAT", b"qbPd", b"IEND"]
    smallest = replay.MIN_PNG_BYTES
    assert len(replay.made_up_png("x", smallest)) == smallest
    assert replay.made_up_png("x", smallest - 1) is None  # made up as plain bytes instead


def test_made_up_text_is_text_of_its_type_and_size(page, tmp_path: Path) -> None:
    """A script, stylesheet or JSON body the HAR does not hold is synthetic text of that type,
    which a browser parses as it would a real one; exactly its recorded size."""
    plan = plan_replay(page)
    write_site(plan, page, tmp_path)
    seen = set()
    for response in plan.responses[1:]:
        kind = dict(response.headers)["content-type"].split(";")[0]
        data = (tmp_path / "bodies" / response.body).read_bytes()
        assert len(data) == response.body_bytes
        if kind in ("application/javascript", "text/css", "application/json"):
            text = data.decode("ascii")  # text, not random bytes
            assert {"application/javascript": "function ", "text/css": " { margin: "}.get(
                kind, '"id": '
            ) in text
            seen.add(kind)
    assert seen == {"application/javascript", "text/css", "application/json"}
