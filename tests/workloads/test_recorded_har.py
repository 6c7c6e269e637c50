"""A HAR written by another HAR writer (tests/fixtures/har/chromium-playwright.har: Playwright's
recorder in Chromium, of a many-origin page the testbed served) read by workloads/har.py and
laid out by workloads/replay.py as any recorded page: what it keeps, what it drops, and every
body served as recorded."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from quicbed.paths import REPO
from quicbed.workloads.har import KEPT_HEADERS, load_har
from quicbed.workloads.replay import plan_replay, write_site

RECORDED = REPO / "tests" / "fixtures" / "har" / "chromium-playwright.har"


def _raw() -> list[dict]:
    return json.loads(RECORDED.read_text())["log"]["entries"]


def test_the_recorded_page_is_read_whole() -> None:
    page = load_har(RECORDED)
    assert page.creator.startswith("Playwright ") and page.dropped == ()
    assert len(page.entries) == len(_raw()) == 12
    assert [o.host for o in page.origins][:1] == ["www.recorded.example"] and len(page.origins) == 5
    for entry, raw in zip(page.entries, _raw(), strict=True):
        assert f"{entry.origin}{entry.path}" == raw["request"]["url"]
        recorded = {h["name"].lower() for h in raw["response"]["headers"]}
        assert {"content-length", "date"} <= recorded  # a real writer's headers ...
        assert {k for k, _ in entry.headers} == recorded & set(KEPT_HEADERS)  # ... kept as the reader keeps


def test_every_recorded_body_is_served_as_recorded(tmp_path: Path) -> None:
    page = load_har(RECORDED)
    plan = plan_replay(page)
    write_site(plan, page, tmp_path)
    assert len(plan.sites) == 5 and len(plan.responses) == 12
    for response, raw in zip(plan.responses, _raw(), strict=True):
        content = raw["response"]["content"]
        text = content["text"]
        body = base64.b64decode(text) if content.get("encoding") == "base64" else text.encode()
        assert len(body) == content["size"] == response.body_bytes
        assert (tmp_path / "bodies" / response.body).read_bytes() == body
