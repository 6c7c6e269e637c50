"""The dry run warns before a run where a browser is known to be CPU-bound on a path of this RTT
on this many cores (experiments/cpu_known.py, issue 63 decision 3). Pure: no path."""

from __future__ import annotations

from pathlib import Path

import pytest

from quicbed import cli
from quicbed.experiments import cpu_known
from quicbed.experiments.cpu_known import GERMANY, INDIA, MEASURED, Measured, nearest, warnings
from quicbed.experiments.schema import load_experiment, parse_experiment
from quicbed.paths import REPO

REPLAY = REPO / "experiments" / "replay" / "median-desktop.yaml"
VIDEO = REPO / "experiments" / "paper" / "video.yaml"


def web(profiles: str, clients: str = "{tool: chromium, protocol: [quic, tls1.3]}") -> str:
    return (
        f"name: w\nprofiles: {profiles}\nservers: [caddy]\nclients:\n  - {clients}\n"
        "workload: {kind: web, objects: [pages/news]}\nrepetitions: 2\n"
    )


# The rule against a fixed table: the figures measured before a load waited for a quiet browser
# (--settle, 2026-12-07), when Chromium was CPU-bound; the shipped table has none over the line.
BEFORE_SETTLE = (
    Measured("chromium-full", "web", INDIA, 2, 13 / 60, "pages/media, 13 of 60 loads", "bench/README.md"),
    Measured("chromium-full", "web", INDIA, 2, 0.15, "the median desktop page (20 origins)", "issue 63"),
    Measured("chromium-full", "web", INDIA, 2, 0.25, "its one-origin twin", "issue 63"),
    Measured("chromium-full", "web", GERMANY, 2, 1.0, "8 of 8 loads without --settle", "bench/README.md"),
    Measured("headless-shell", "web", INDIA, 2, 0.0, "pages/media, 0 of 40 loads", "bench/README.md"),
    Measured("firefox", "web", INDIA, 2, 0.0, "the median desktop page and its twin", "issue 63"),
    Measured(
        "chromium-full", "video", INDIA, 2, 0.0, "dash.js at 0 and 5 % loss, 0 of 48", "bench/README.md"
    ),
)


@pytest.fixture
def before_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_known, "MEASURED", BEFORE_SETTLE)


def test_the_shipped_figures_warn_of_no_browser_on_the_replayed_page() -> None:
    assert warnings(load_experiment(REPLAY), cores=2) == []


@pytest.mark.usefixtures("before_settle")
def test_chromium_on_india_on_two_cores_is_warned_with_its_source_figures() -> None:
    (warning,) = warnings(load_experiment(REPLAY), cores=2)  # none for Firefox: 0 % there
    known = "warning: chromium-full is known to be CPU-bound on c0 india (80 ms) on 2 cores: "
    assert warning.startswith(known), warning
    assert "the median desktop page (20 origins): 15 %, its one-origin twin: 25 % (issue 63" in warning
    assert "pages/media, 13 of 60 loads: 22 % (bench/README.md" in warning


@pytest.mark.usefixtures("before_settle")
@pytest.mark.parametrize(("cores", "warned"), [(1, True), (2, True), (4, False)])
def test_a_figure_speaks_for_hosts_of_as_many_cores_or_fewer(cores: int, warned: bool) -> None:
    assert bool(warnings(load_experiment(REPLAY), cores)) is warned


@pytest.mark.usefixtures("before_settle")
def test_the_measured_path_nearest_the_rtt_on_a_ratio_scale() -> None:
    assert {m.path.profile for m in nearest("chromium-full", "web", 6.0, 2)} == {"germany"}
    assert {m.path.profile for m in nearest("chromium-full", "web", 50.0, 2)} == {"india"}  # ×1.6, not ×2.5
    assert {m.path.profile for m in nearest("chromium-full", "web", 300.0, 2)} == {"india"}
    exp = parse_experiment(web("[germany-lab, india]"))
    found = warnings(exp, cores=2)
    assert len(found) == 2 and "c0 germany-lab (6 ms)" in found[0] and "measured on germany" in found[0]
    assert "c1 india (80 ms)" in found[1] and "measured on india" in found[1]


@pytest.mark.usefixtures("before_settle")
def test_no_warning_where_the_measured_share_is_within_the_line() -> None:
    shell = "{tool: chromium, protocol: [quic, tls1.3], browser: headless-shell}"
    assert warnings(parse_experiment(web("[india]", shell)), cores=2) == []
    assert warnings(parse_experiment(web("[india]", "{tool: firefox, protocol: quic}")), cores=2) == []
    assert warnings(parse_experiment(web("[india]", "{tool: quic_perf}")), cores=2) == []
    assert warnings(load_experiment(VIDEO, quick=True), cores=2) == []  # dash.js: 0 of 48 playbacks


def test_every_figure_names_its_source_and_a_browser_the_clients_run() -> None:
    for m in MEASURED:
        assert m.source and m.what and 0.0 <= m.share <= 1.0 and m.cores >= 1, m
        assert m.browser in {"chromium-full", "headless-shell", "firefox"}, m


@pytest.mark.usefixtures("before_settle")
def test_the_dry_run_prints_the_warning(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path) -> None:
    """`quicbed run experiments/replay/median-desktop.yaml --dry-run` on a 2-core host."""
    monkeypatch.setattr("quicbed.experiments.plan.os.cpu_count", lambda: 2)
    monkeypatch.setenv("QUICBED_RESULTS", str(tmp_path))
    assert cli.main(["run", "--dry-run", str(REPLAY)]) == 0
    out = capsys.readouterr().out
    line = next((x for x in out.splitlines() if x.startswith("warning: chromium-full")), None)
    assert line is not None and "c0 india (80 ms) on 2 cores" in line, out
    assert list(tmp_path.iterdir()) == []  # a plan, nothing run
