"""Recorded pages an experiment replays: `workload: {kind: web, pages: [{har: FILE}]}`.

Each HAR is read and validated once, when the experiment loads (workloads/har.py: a hostile
file is refused there with its entry index), and is known from then on by its object name,
`har/<stem>-<sha256[:8]>`: the file's own digest is in the name, so an edited HAR is another
page, and a run made with the old one refuses to resume (its matrix changed). The trial fetches
the page's landing document from its landing origin: a browser loads the whole page, a perf tool
one GET of the document, as the paper's tools fetched a landing page.

`{har: FILE, one_origin: true}` is the same page from its landing origin alone, renamed
`one-origin.<landing host>` (workloads/har.py one_origin): the baseline a many-origin page's
gain is set beside, served in the same run (its object name ends in `-one-origin`).

The pages this process has loaded are kept here by name (`recorded(name)`), for the workload
kind's sizes and plan cost and for the executor, which reads the file again (`page_of`) and
refuses it if it changed since it was validated.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .har import HarError, Page, dns_name_problem, one_origin, read_har

PREFIX = "har/"  # a recorded page's object names start so; no shipped object's does
# Pages of one experiment are served at once (replay.plan_pages): their origins take the
# server LAN's addresses and certificates from the run's CA for the whole run.
MAX_PAGES = 8
ONE_ORIGIN = "one-origin"  # the twin's landing host is this label before the page's
_STEM = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class RecordedPage:
    name: str  # the workload's object: har/<stem>-<sha8>
    file: str  # the HAR, resolved
    sha256: str  # of the file's bytes
    origins: int
    requests: int  # the entries a replay serves
    body_bytes: int  # every served body, decoded
    landing_url: str  # the document a trial fetches first
    hosts: tuple[str, ...]  # every origin's name, the landing one's first
    one_origin: bool = False  # the page from its landing origin alone (module text)


_PAGES: dict[str, RecordedPage] = {}


def load_recorded(path: Path, one_origin: bool = False) -> RecordedPage:
    """The HAR at `path` (or its one-origin twin), validated and known by its object name;
    HarError if refused."""
    resolved = path.resolve()
    data, page = read_har(resolved)
    digest = hashlib.sha256(data).hexdigest()
    stem = _STEM.sub("-", resolved.stem).strip("-.")[:40] or "page"
    if one_origin:
        page = _twin(page)
    landing = page.landing
    recorded_page = RecordedPage(
        name=f"{PREFIX}{stem}-{digest[:8]}" + (f"-{ONE_ORIGIN}" if one_origin else ""),
        file=str(resolved),
        sha256=digest,
        origins=len(page.origins),
        requests=len(page.entries),
        body_bytes=page.body_bytes,
        landing_url=f"{landing.origin}{landing.path}",
        hosts=tuple(dict.fromkeys(origin.host for origin in page.origins)),
        one_origin=one_origin,
    )
    _PAGES[recorded_page.name] = recorded_page
    return recorded_page


def _twin(page: Page) -> Page:
    host = f"{ONE_ORIGIN}.{page.landing.origin.host}"
    problem = dns_name_problem(host)
    if problem:
        raise HarError(f"its one-origin twin's name {host!r}: {problem}", page.file, field="one_origin")
    return one_origin(page, host)


def is_recorded(name: str) -> bool:
    return name.startswith(PREFIX)


def recorded(name: str) -> RecordedPage:
    """A page this process loaded (the experiment's schema loads them first)."""
    try:
        return _PAGES[name]
    except KeyError:
        raise HarError(f"no recorded page {name!r} was loaded by this experiment", name) from None


def page_of(recorded_page: RecordedPage) -> Page:
    """The page read again from its file, which must be the one the experiment validated."""
    data, page = read_har(recorded_page.file)
    if hashlib.sha256(data).hexdigest() != recorded_page.sha256:
        raise HarError(
            "changed since the experiment was validated (its sha256 differs); load it again",
            recorded_page.file,
            field="file",
        )
    return _twin(page) if recorded_page.one_origin else page
