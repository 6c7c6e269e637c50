"""An experiment that replays a recorded page (`workload: {kind: web, pages: [{har: FILE}]}`):
what the schema accepts, what it refuses and where it says so (the experiment's line and the
HAR's entry), and what the dry run's plan tells of the page. Pure: no path, no container."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quicbed import cli
from quicbed.experiments.executor import TestbedExecutor
from quicbed.experiments.matrix import conditions, trials
from quicbed.experiments.plan import dry_run
from quicbed.experiments.schema import ExperimentError, load_experiment
from quicbed.paths import REPO
from quicbed.workloads import WORKLOADS, recorded
from quicbed.workloads.har import HarError
from quicbed.workloads.replay import ENTRY_STRIDE, plan_pages, plan_replay

PAGE = REPO / "workloads" / "pages" / "median-desktop.har"
EXPERIMENT = """\
name: replayed
profiles: [india]
servers: [{server}]
clients:
  - {{tool: chromium, protocol: [quic, tls1.3]}}
  - {{tool: tls_perf, tls: ["1.3"]}}
workload: {workload}
repetitions: 2
"""


def _experiment(
    tmp_path: Path, server: str = "quicgo", workload: str = "{kind: web, pages: [{har: page.har}]}"
):
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.format(server=server, workload=workload))
    return path


def _refused(path: Path) -> str:
    start = time.perf_counter()
    with pytest.raises(ExperimentError) as caught:
        load_experiment(path)
    assert time.perf_counter() - start < 1.0
    message = str(caught.value)
    assert "\n" not in message, message
    return message


@pytest.fixture
def page_here(tmp_path: Path) -> Path:
    shutil.copy(PAGE, tmp_path / "page.har")
    return tmp_path / "page.har"


def test_a_recorded_page_is_one_object_named_by_its_file_and_digest(tmp_path, page_here) -> None:
    exp = load_experiment(_experiment(tmp_path))
    (page,) = exp.workload.pages
    assert exp.workload.objects == (page.name,)
    assert page.name.startswith("har/page-") and len(page.name) == len("har/page-") + 8
    assert (page.origins, page.requests) == (20, 71)
    assert page.landing_url == "https://www.median-desktop.example/"
    assert page.file == str(page_here.resolve())
    # The kind's sizes and plan cost know the page by that name.
    assert WORKLOADS["web"].object_bytes(page.name) == page.body_bytes > 2_000_000
    text = dry_run(exp)
    assert f"{page.name}: {page.file}, 71 requests from 20 origins" in text, text


def test_an_edited_har_is_another_page_and_another_matrix(tmp_path, page_here) -> None:
    first = load_experiment(_experiment(tmp_path))
    data = json.loads(page_here.read_text())
    data["log"]["entries"][1]["response"]["content"]["size"] += 1
    page_here.write_text(json.dumps(data))
    second = load_experiment(_experiment(tmp_path))
    assert first.workload.objects != second.workload.objects
    assert first.matrix_hash() != second.matrix_hash()
    # The executor reads the file again: the one validated first is gone, and it says so.
    with pytest.raises(HarError, match="changed since the experiment was validated"):
        recorded.page_of(first.workload.pages[0])
    assert recorded.page_of(second.workload.pages[0]).body_bytes == second.workload.pages[0].body_bytes
    assert second.workload.pages[0].body_bytes == first.workload.pages[0].body_bytes + 1


def test_a_hostile_har_is_refused_at_the_experiments_line_and_the_hars_entry(tmp_path, page_here) -> None:
    data = json.loads(page_here.read_text())
    data["log"]["entries"][3]["request"]["url"] = "https://www.median-desktop.example/a/../../etc/passwd"
    page_here.write_text(json.dumps(data))
    message = _refused(_experiment(tmp_path))
    assert message.startswith(f"{tmp_path / 'exp.yaml'}:7: workload.pages[0].har: "), message
    assert "log.entries[3].request.url" in message and "dot segment" in message, message


def test_a_har_that_is_not_there_or_not_a_file_is_refused_by_name(tmp_path) -> None:
    message = _refused(_experiment(tmp_path))
    assert "workload.pages[0].har" in message and "page.har" in message and "cannot read" in message
    (tmp_path / "page.har").mkdir()
    assert "workload.pages[0].har" in _refused(_experiment(tmp_path))


@pytest.mark.parametrize(
    ("server", "workload", "fragment"),
    [
        ("nginx", "{kind: web, pages: [{har: page.har}]}", "nginx serves the testbed's content"),
        ("quicgo", "{kind: web, objects: [index.html]}", "quicgo serves a recorded page"),
        ("quicgo", "{kind: web, objects: [index.html], pages: [{har: page.har}]}", "not both"),
        ("quicgo", "{kind: web, pages: [{har: page.har}, {har: copy.har}]}", "is an origin of pages[0] too"),
        ("quicgo", "{kind: web, pages: [{har: page.har, one_origin: 1}]}", "expected true or false"),
        ("quicgo", "{kind: web, pages: [page.har]}", "pages[0]"),
        ("quicgo", "{kind: cloud, pages: [{har: page.har}]}", "pages"),
    ],
)
def test_what_cannot_run_is_refused_and_says_why(tmp_path, page_here, server, workload, fragment) -> None:
    shutil.copy(page_here, tmp_path / "copy.har")
    message = _refused(_experiment(tmp_path, server, workload))
    assert fragment in message, message


def test_a_page_and_its_one_origin_twin_are_served_at_once(tmp_path, page_here) -> None:
    twin = "{kind: web, pages: [{har: page.har}, {har: page.har, one_origin: true}]}"
    exp = load_experiment(_experiment(tmp_path, workload=twin))
    many, one = exp.workload.pages
    assert one.name == f"{many.name}-one-origin" and exp.workload.objects == (many.name, one.name)
    assert (many.origins, one.origins) == (20, 1) and one.requests == many.requests == 71
    assert one.hosts == ("one-origin.www.median-desktop.example",)
    assert one.landing_url == "https://one-origin.www.median-desktop.example/"
    # The same bytes but for the rewritten URLs of the recorded HTML and CSS bodies.
    assert abs(one.body_bytes - many.body_bytes) < 0.01 * many.body_bytes
    plan = plan_pages([recorded.page_of(many), recorded.page_of(one)])
    assert len(plan.names) == 21 and len(set(plan.hosts().values())) == 21
    twin_entries = [r.entry for r in plan.responses if plan.sites[r.site].name == one.hosts[0]]
    assert len(twin_entries) == 71 and min(twin_entries) >= ENTRY_STRIDE, twin_entries[:3]
    # Every subresource of the twin is under its one origin: its landing document names them so.
    landing = recorded.page_of(one).landing.body or b""
    assert b"https://one-origin.www.median-desktop.example/_origin/" in landing
    assert b"https://www.median-desktop.example/" not in landing


def test_two_replay_servers_cannot_share_one_recorded_page(tmp_path, page_here) -> None:
    """A user's second replay server (QUICBED_SERVER_DIRS): the page's addresses are one's."""
    mine = tmp_path / "servers" / "replay2"
    mine.mkdir(parents=True)
    shutil.copy(REPO / "stacks" / "quicgo" / "server.yaml", mine / "server.yaml")
    path = _experiment(tmp_path, "quicgo, replay2")
    env = {**os.environ, "QUICBED_SERVER_DIRS": str(tmp_path / "servers")}
    proc = subprocess.run(
        [sys.executable, "-m", "quicbed.cli", "run", "--dry-run", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        f"{path}:3: servers[1]: a recorded page is replayed by one server" in proc.stdout + proc.stderr
    ), proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_dry_run_prints_the_page_and_touches_nothing(tmp_path, page_here, capsys) -> None:
    path = _experiment(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["run", "--dry-run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "71 requests from 20 origins" in out and "https://www.median-desktop.example/" in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_browser_is_given_every_origin_and_a_perf_tool_the_landing_one(tmp_path, page_here) -> None:
    exp = load_experiment(_experiment(tmp_path))
    plan = plan_replay(recorded.page_of(exp.workload.pages[0]))
    resolves = tuple(plan.resolves())
    by_tool = {t.client.tool: t for t in trials(exp, conditions(exp)[0])}
    browser = TestbedExecutor._tool_argv(by_tool["chromium"], "10.77.2.10", resolves)
    perf = TestbedExecutor._tool_argv(by_tool["tls_perf"], "10.77.2.10", resolves)
    for argv in (browser, perf):
        assert "https://www.median-desktop.example/" in argv, argv
        assert argv[argv.index("--resolve") + 1] == resolves[0] == "www.median-desktop.example:443:10.77.2.50"
    assert [browser[i + 1] for i, a in enumerate(browser) if a == "--resolve"] == list(resolves)
    assert perf.count("--resolve") == 1 and len(resolves) == 20
