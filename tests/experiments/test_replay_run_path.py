"""`quicbed run` of an experiment that replays a recorded page (workload: {kind: web, pages:
[{har: ...}]}) on the real india path: the shipped median desktop page (71 requests from 20
origins) and its one-origin twin, served at once by the replay server (stacks/quicgo), each
loaded by Chromium over HTTP/3 and HTTP/2 and fetched (its landing document) by tls_perf. The
rows say what the page is, and what the browser and the server saw of it: every resource over
the protocol asked for, from every origin, every request of the page at the server, each
origin's connections counted, and the connection setups on the load's critical path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from quicbed import cli, paths
from quicbed.paths import REPO
from quicbed.workloads.har import load_har, one_origin

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

PAGE = REPO / "workloads" / "pages" / "median-desktop.har"
EXPERIMENT = """\
name: replay-run
profiles: [india]
servers: [quicgo]
clients:
  - {tool: chromium, protocol: [quic, tls1.3]}
  - {tool: tls_perf, tls: ["1.3"]}
workload:
  kind: web
  pages: [{har: median-desktop.har}, {har: median-desktop.har, one_origin: true}]
repetitions: 1
"""
HOP = {"quic": "h3", "tls1.3": "h2"}


def test_a_replayed_page_experiment_runs_from_every_origin(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(paths, "RESULTS", tmp_path / "results")
    shutil.copy(PAGE, tmp_path / "median-desktop.har")
    (tmp_path / "experiment.yaml").write_text(EXPERIMENT)
    code = cli.main(["run", str(tmp_path / "experiment.yaml"), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    assert all(r["error"] is None for r in rows), [r["error"] for r in rows]
    many = load_har(PAGE)
    twin = one_origin(many, "one-origin.www.median-desktop.example")
    pages = {False: many, True: twin}
    assert sorted(r["client"] for r in rows) == sorted(["chromium-quic", "chromium-tls1.3", "tls1.3-h2"] * 2)
    for row in rows:
        page = pages[row["object"].endswith("-one-origin")]
        assert row["object"].startswith("har/median-desktop-"), row["object"]
        assert (row["page_origins"], row["page_requests"]) == (len(page.origins), 71), row
        assert row["calib_passed"] is True and 79 <= row["calib_rtt_ms"] <= 82, row
        if row["tool"] == "tls_perf":
            # The perf tool fetches the landing document alone, from its own origin, as recorded.
            assert row["bytes"] == page.landing.body_bytes and row["server_requests"] == 1, row
            assert row["http_version"] == "2" and row["tls_version"] == "TLSv1.3", row
            continue
        assert row["origins"] == len(page.origins), row
        assert row["resource_protocols"] == {HOP[row["protocol"]]: 1 + row["resources"]}, row
        assert row["resources"] == 70 and row["server_requests"] == 71, row
        assert set(row["origin_connections"]) == {o.host for o in page.origins}, row["origin_connections"]
        assert all(n >= 1 for n in row["origin_connections"].values()), row["origin_connections"]
        # The setups on the critical path (clients/browser/critical_path.py): the document's
        # first; every other origin is named by the document, so on the page of many origins their
        # setups follow its response: two at least, however many origins connect in parallel.
        chain, critical = row["critical_chain"], row["critical_connections"]
        print(f"{row['object']} {row['protocol']}: {critical} of {row['connections']} in sequence: {chain}")
        assert chain[0] == page.origins[0].host and len(chain) == critical, row
        assert (2 if len(page.origins) > 1 else 1) <= critical <= row["connections"], row
        # The twin: every response over the one origin's connections; the page: one at least per
        # origin it cannot coalesce, each a handshake.
        assert row["connections"] >= len(page.origins), row["connections"]
        assert row["page_load_time_ms"] > 3 * row["calib_rtt_ms"], row["page_load_time_ms"]
