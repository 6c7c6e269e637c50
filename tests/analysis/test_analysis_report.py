"""The report (quicbed.analysis.report) of synthetic runs: figures, tables, directions."""

from __future__ import annotations

import re
from pathlib import Path

import figure_data
import numpy as np
import pandas as pd
import pytest
from analysis_synthetic import Model, write_run
from matplotlib.figure import Figure

from quicbed.analysis import load_runs, main_report, write_report
from quicbed.analysis.claims import FAILS, HOLDS, NO_DATA, NOT_DECIDED, evaluate
from quicbed.analysis.figures import make_figures
from quicbed.analysis.manifest import runner_entry
from quicbed.analysis.report import backend_shown, flags
from quicbed.workloads import CONNECTION
from quicbed.workloads.web import PAGE_CONNECTION, PAGELOAD

FULL = Model(repetitions=12)
WEB_ONLY = Model(repetitions=12, workloads=("web",), conditions={"india": (80.0, 20.0, 20.0, 0.0)})


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Figure]]:
    """The run, its report, and every figure the report drew (by name), as drawn."""
    root = tmp_path_factory.mktemp("results")
    write_run(root, "full", FULL)
    with figure_data.captured() as drawn:
        html = write_report([str(root / "full")])
    return root / "full", html, drawn


@pytest.fixture(scope="module")
def full_report(full_run: tuple[Path, Path, dict[str, Figure]]) -> Path:
    return full_run[1]


def referenced(html: str) -> set[str]:
    return set(re.findall(r"(?:src|href)='([^']+)'", html)) - {""}


def test_report_is_written_next_to_the_run(full_report):
    assert full_report.name == "report.html" and full_report.parent.name == "report"
    assert full_report.with_suffix(".md").is_file()


def test_every_figure_exists_non_empty_and_is_referenced(full_report):
    html = full_report.read_text()
    markdown = full_report.with_suffix(".md").read_text()
    files = sorted((full_report.parent / "figures").iterdir())
    names = {f.stem for f in files}
    assert {
        "cdf_connection_time_timing_ms",
        "cdf_connection_time_timing_rtt",
        "cdf_ttfb_timing_ms",
        "cdf_download_time_timing_rtt",
        "cloud_throughput_vs_size",
        "cloud_cpu_over_time",
        "cdf_connection_time_video_ms",
        "streaming_startup_delay",
        "streaming_stall_durations",
        "streaming_against_loss",
        "streaming_example_traces",
        "pageload_vs_download",
        "cdf_page_load_time_pageload_rtt",
        "cdf_connection_time_pageload_ms",
    } <= names
    for f in files:
        assert f"figures/{f.name}" in referenced(html)
        assert f"(figures/{f.name})" in markdown
    # and nothing referenced is missing
    local = {r for r in referenced(html) if not r.startswith("#")}
    assert all((full_report.parent / r).is_file() for r in local)


def test_every_figure_plots_data_in_every_panel(full_run):
    """Not a file's size (an empty axes with a title is over 1,000 B): each visible panel of
    each figure has a series, or a trace (streaming_example_traces' unlabelled lines), with
    finite points."""
    _, _, drawn = full_run
    assert len(drawn) >= 14
    for name, figure in drawn.items():
        for ax in figure_data.panels(figure):
            drawn_here = [*figure_data.series(ax).values(), *figure_data.traces(ax)]
            assert any(len(figure_data.finite(p)) for p in drawn_here), (name, ax.get_title())


def test_a_cdf_figure_draws_each_protocols_trials(full_run):
    """cdf_ttfb_timing_ms: one panel per condition, one step line per protocol in it, over
    exactly the trials' TTFBs (the first step from 0 at the smallest, 1 at the largest)."""
    run, _, drawn = full_run
    rows, _ = load_runs([str(run)])
    web = rows[~rows["failed"] & (rows["workload"] == "web") & rows["ttfb_ms"].notna()]
    axes = figure_data.panels(drawn["cdf_ttfb_timing_ms"])
    assert [ax.get_title() for ax in axes] == list(dict.fromkeys(web["facet"]))
    for ax in axes:
        mine = web[web["facet"] == ax.get_title()]
        lines = figure_data.series(ax)
        labels = {"quic": "QUIC", "tls1.3": "TLS 1.3", "tls1.2": "TLS 1.2"}
        want = {
            f"{labels[p]} (n={len(g)})": np.sort(g["ttfb_ms"].to_numpy()) for p, g in mine.groupby("protocol")
        }
        assert sorted(lines) == sorted(want), (ax.get_title(), list(lines))
        for label, values in want.items():
            x, y = lines[label][1:, 0], lines[label][:, 1]
            np.testing.assert_allclose(x, values, err_msg=label)
            assert y[0] == 0 and y[-1] == 1 and (np.diff(y) > 0).all(), label


def test_a_figure_against_loss_draws_each_protocols_medians(full_run):
    """streaming_against_loss: per condition and metric one line per protocol, a point per
    loss rate at the trials' median startup delay."""
    run, _, drawn = full_run
    rows, _ = load_runs([str(run)])
    streaming = rows[~rows["failed"] & (rows["workload"] == "streaming")]
    axes = figure_data.panels(drawn["streaming_against_loss"])
    startup = [ax for ax in axes if ax.get_title().endswith(": Startup delay")]
    assert [ax.get_title().split(":")[0] for ax in startup] == list(dict.fromkeys(streaming["profile"]))
    for ax in startup:
        mine = streaming[streaming["profile"] == ax.get_title().split(":")[0]]
        lines = figure_data.series(ax)
        assert len(lines) == mine["protocol"].nunique() == 2, list(lines)
        for protocol, label in (("quic", "QUIC"), ("tls1.3", "TLS 1.3")):
            medians = mine[mine["protocol"] == protocol].groupby("loss_pct")["startup_delay_ms"].median()
            (points,) = [v for k, v in lines.items() if k.startswith(f"{label} (")]
            np.testing.assert_allclose(points, np.c_[medians.index, medians.to_numpy()], err_msg=label)


def test_html_is_self_contained(full_report):
    html = full_report.read_text()
    assert "<style>" in html and "http://" not in html and "https://" not in html


def test_report_has_tables_manifest_and_flags(full_report):
    html = full_report.read_text()
    for text in (
        "Medians per condition and protocol",
        "QUIC against TLS 1.2 and TLS 1.3",
        "Welch p",
        "MWU p",
        "n QUIC / other (pairs)",
        "Against the paper",
        "Calibration: configured against measured",
        "Stalls and quality switches against loss",
        "link backend (why)",
        "Failed trials (excluded from statistics)",
        "CPU-bound trials",
        "are failed: excluded from statistics",
    ):
        assert text in html, text


def test_synthetic_model_directions_hold(full_report):
    df, _ = load_runs([str(full_report.parent.parent)])
    verdicts = {d.claim: v for d, v in evaluate(df[~df["failed"]])}
    not_holding = {c: v for c, v in verdicts.items() if v.status != HOLDS}
    assert not not_holding
    handshake = next(v for c, v in verdicts.items() if c.startswith("Handshake arithmetic"))
    assert "QUIC 1.0" in handshake.found[0] or "QUIC 0.9" in handshake.found[0]


def test_absent_data_is_skipped_not_drawn_empty(tmp_path):
    write_run(tmp_path, "web", WEB_ONLY)
    df, _ = load_runs([str(tmp_path / "web")])
    figures = make_figures(df[~df["failed"]], tmp_path / "figs")
    assert {f.section for f in figures} == {"timing"}
    assert len(figures) == 6  # 3 metrics x (ms, RTTs)
    verdicts = {d.claim: v.status for d, v in evaluate(df[~df["failed"]])}
    assert verdicts["Streaming: startup delay is similar without loss"] == NO_DATA
    assert verdicts[next(c for c in verdicts if c.startswith("QUIC's client uses more CPU"))] == NO_DATA


def test_directions_that_do_not_hold_say_so(tmp_path):
    write_run(tmp_path, "web", WEB_ONLY)
    df, _ = load_runs([str(tmp_path / "web")])
    ok = df[~df["failed"]].copy()
    # Make QUIC's handshake the slowest: the ordering direction must fail.
    quic = ok["protocol"] == "quic"
    ok.loc[quic, "connection_time_ms"] *= 10
    verdicts = {d.claim: v.status for d, v in evaluate(ok)}
    assert verdicts["Connection time: QUIC < TLS 1.3 < TLS 1.2"] == FAILS


def test_cli_entry_writes_to_out(tmp_path, capsys):
    write_run(tmp_path, "web", WEB_ONLY)
    assert main_report([str(tmp_path / "web")], str(tmp_path / "out")) == 0
    assert (tmp_path / "out" / "report.html").is_file()
    assert "report: " in capsys.readouterr().out


def test_an_unshaped_condition_is_left_out_of_the_rtt_figures(tmp_path):
    model = Model(
        repetitions=10,
        workloads=("web",),
        conditions={"india": (80.0, 20.0, 20.0, 0.0), "lan": (0.05, 1e4, 1e4, 0.0)},
    )
    write_run(tmp_path, "lan", model)
    df, _ = load_runs([str(tmp_path / "lan")])
    figures = {f.name: f for f in make_figures(df[~df["failed"]], tmp_path / "figs")}
    assert "Left out" not in figures["cdf_connection_time_timing_ms"].caption
    assert (
        "Left out (no calibrated RTT of 1 ms or more): lan"
        in figures["cdf_connection_time_timing_rtt"].caption
    )


def test_runner_style_manifest_labels_calibration_and_forced_trials(tmp_path):
    model = Model(repetitions=10, workloads=("web",))
    write_run(tmp_path, "runner", model, runner_style=True, failing="germany")
    df, manifests = load_runs([str(tmp_path / "runner")])
    assert set(df["facet"]) == {"india", "germany"}  # labels, not the ids c0/c1
    assert df.loc[df["condition"] == "c0", "rtt_ref_ms"].notna().all()
    report = write_report([str(tmp_path / "runner")]).read_text()
    assert "goodput_mbit down: 250.0 (configured 500.0" in report
    assert "Calibration of germany (run runner) failed and the run went on (forced)" in report
    assert "Trials on a path whose calibration was forced" in report


def test_a_run_whose_trials_all_failed_still_gets_a_report(tmp_path):
    model = Model(repetitions=2, workloads=("web",), failed=6, conditions={"india": (80.0, 20.0, 20.0, 0.0)})
    write_run(tmp_path, "bad", model)
    html = write_report([str(tmp_path / "bad")]).read_text()
    assert "6 of 6 trials are failed" in html and "<img" not in html
    assert "not enough data" in html


def test_too_few_samples_is_not_a_verdict(tmp_path):
    """Two rounds decide nothing: a comparison says "not decided" with its rounds and the
    rounds a decision would need; a fixed-n finding says "not enough data"."""
    model = Model(
        repetitions=2, workloads=("streaming", "video"), conditions={"india": (80.0, 20.0, 20.0, 0.0)}
    )
    write_run(tmp_path, "few", model)
    df, _ = load_runs([str(tmp_path / "few")])
    judged = {d.claim: v for d, v in evaluate(df[~df["failed"]])}
    verdicts = {claim: v.status for claim, v in judged.items()}
    observational = "Streaming: the lowest quality falls to 144p at 5–10% loss"
    assert verdicts.pop(observational) == HOLDS  # a minimum needs no sample size
    assert set(verdicts.values()) == {NO_DATA, NOT_DECIDED}
    video = judged["Video: the overall download rate is higher over TLS/TCP"]
    assert video.status == NOT_DECIDED and "not decided after 2 pairs" in video.found[0]
    # ... and a quick run's numbers are shown beside it, loss rate by loss rate.
    startup = judged["Streaming: with loss QUIC starts faster (≈40% at 5% loss)"].found
    assert [line.split(":")[0] for line in startup[:3]] == ["1% loss", "5% loss", "10% loss"]
    assert "n=2/2" in startup[1] and "not decided after" in startup[3]
    # Judged over 1, 5 and 10 % where the paper states 5 %: the verdict says so.
    assert startup[-1] == "judged at 1/5/10% loss, where the paper states 5%"


def test_browser_page_loads_are_their_own_kind_never_pooled_with_the_perf_tools(full_report):
    df, _ = load_runs([str(full_report.parents[1])])
    pages = df[df["tool"] == "chromium"]
    assert len(pages) and set(pages["workload"]) == {PAGELOAD}
    assert not CONNECTION.rows(df)["tool"].eq("chromium").any()
    assert set(PAGE_CONNECTION.rows(df)["tool"]) == {"chromium"}
    markdown = full_report.with_suffix(".md").read_text()
    section = markdown.split("## Page loads in browsers", 1)[1].split("\n## ", 1)[0]
    section = section.split("Browser page load beside the perf tools' download of its HTML")[1]
    # india's quic row: the page load ≈ the download + 2 RTT + 60 ms, as the model says
    line = next(r for r in section.splitlines() if r.startswith("| india") and "QUIC" in r)
    cells = [c.strip() for c in line.strip("|").split("|")]
    load, download = (float(c.split()[0].replace(",", "")) for c in (cells[3], cells[5]))
    assert 2 * 80 + 40 < load - download < 2 * 80 + 80, line
    # the CPU-bound share beside the figures (none in the model), and what it means
    assert "CPU-bound share" in section and cells[-1] == "0%", line
    assert "the page loads measure the path, not the client's CPU" in section


def test_a_high_cpu_bound_share_says_the_page_loads_measure_the_cpu() -> None:
    import pandas as pd

    from quicbed.analysis.report import cpu_bound_note
    from quicbed.analysis.tables import cpu_bound_groups

    rows = [
        {"workload": PAGELOAD, "facet": "india", "object": "media", "protocol": p, "cpu_bound": i < n}
        for p, n in (("quic", 3), ("tls1.3", 1))
        for i in range(10)
    ]
    df = pd.DataFrame(rows)
    assert cpu_bound_groups(df) == ["india / media / quic (30%)"]  # tls1.3: 10 %, not over
    note = cpu_bound_note(df)
    assert note.warn and "measure this host's CPU" in note.items[0]


@pytest.mark.parametrize(("sessions", "status"), [(2, NO_DATA), (10, FAILS)])
def test_a_protocol_above_144p_is_judged_only_with_enough_sessions(sessions: int, status: str):
    import pandas as pd

    from quicbed.analysis.claims import lowest_144p
    from quicbed.workloads.video import STREAMING

    rows = [
        {"workload": STREAMING, "loss_pct": 5.0, "protocol": p, "lowest_quality": q}
        for p, q in (("quic", "480p"), ("tls1.2", "144p"))
        for _ in range(sessions)
    ]
    judged = lowest_144p(pd.DataFrame(rows))
    assert judged.status == status
    assert f"QUIC 480p (n={sessions})" in judged.found[0]


def test_a_quick_run_marks_the_findings_it_cannot_judge(tmp_path: Path) -> None:
    """Three repetitions judge none of the paper's fixed-n findings: a quick run's report says
    they need the full run, counts its comparisons with rows as "not decided" (judged, with
    their figures), and its opening line adds up to the findings; a full run with as few says
    only 'not enough data'."""
    import json

    from quicbed.analysis.claims import DIRECTIONS
    from quicbed.analysis.report import NEEDS_FULL, Tally, build_report

    run_dir = write_run(tmp_path, "quick", Model(repetitions=3))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "quick": True}))
    written = build_report([str(run_dir)])
    text = written.html.with_suffix(".md").read_text()
    section = text.split("## Against the paper", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    statuses = [row.split(" | ")[1] for row in rows]
    assert len(statuses) == len(DIRECTIONS) and NO_DATA not in statuses
    counted = written.tally
    assert counted == Tally(
        len(DIRECTIONS),
        statuses.count(HOLDS),
        statuses.count(FAILS),
        statuses.count(NOT_DECIDED),
        statuses.count(NEEDS_FULL),
    )
    assert counted.not_decided and counted.needs_full  # both kinds of open finding are here
    assert (
        f"A quick run: {counted.decided} of {len(DIRECTIONS)} findings decided, {counted.not_decided} "
        "not decided (each says the pairs a decision would need), "
        f"{counted.needs_full} marked '{NEEDS_FULL}'"
    ) in section
    assert "`make reproduce FULL=1`" in section
    full_dir = write_run(tmp_path, "few", Model(repetitions=3))
    full = write_report([str(full_dir)]).with_suffix(".md").read_text()
    assert "needs FULL=1" not in full and NO_DATA in full


def test_the_pooled_clients_flag_names_only_clients_whose_trials_share_a_table() -> None:
    """Two perf tools of one protocol on one path are pooled; a browser's page loads (a kind
    of their own) and the same tool on another path are not."""

    def frame(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
        df = pd.DataFrame(rows, columns=["client", "facet", "workload"])
        df["protocol"], df["calib_forced"], df["cpu_bound"], df["failed"] = "quic", False, False, False
        return df

    apart = frame(
        [("quic-h3", "india", "web"), ("chromium-quic", "india", PAGELOAD), ("quic-h3", "germany", "web")]
    )
    assert not [f for f in flags(apart, []) if "several clients" in f]
    pooled = frame([("quic-h3", "india", "web"), ("quic-h3-ngtcp2", "india", "web")])
    (flag,) = [f for f in flags(pooled, []) if "several clients" in f]
    assert "quic-h3, quic-h3-ngtcp2" in flag


@pytest.mark.parametrize("backend", ["delayline", "uml"])
@pytest.mark.parametrize(
    ("priority", "warned"),
    [
        ("SCHED_FIFO 50", False),
        ("default", True),
        (None, False),
    ],
)
def test_a_router_without_real_time_priority_is_said_beside_the_backend(backend, priority, warned):
    """The calibration's link record names the router task's priority (the delay line's, the
    UML kernel's); the report's backend cell says when it ran without SCHED_FIFO (busy
    endpoints then delay packets)."""
    link = {f"{backend}_priority": priority} if priority else {}
    calibration = {"backend": backend, "backend_reason": "no sch_netem", "link": link}
    entry = runner_entry("r1", "c0", {"calibration": {"rtt_ms": 80.0, "calibration": calibration}})
    shown = backend_shown(entry)
    assert shown.startswith(f"{backend} (no sch_netem)")
    assert ("default priority" in shown) == warned, shown


def test_html_in_someone_elses_run_is_shown_not_rendered(tmp_path: Path) -> None:
    """Shared results folders are read by others: an experiment name, a client label or a
    row's error holding HTML is escaped in report.md (outside code spans) as in report.html."""
    import json

    run = write_run(tmp_path, "hostile", WEB_ONLY, parquet=False)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["experiment"] = "<script>alert(1)</script>"
    (run / "manifest.json").write_text(json.dumps(manifest))
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines() if line]
    rows[0].update(error="<img src=x onerror=alert(2)>", client="<b>c</b>")
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_report([str(run)], tmp_path / "out")
    for name in ("report.md", "report.html"):
        text = (tmp_path / "out" / name).read_text()
        for tag in ("<script", "<img src=x", "<b>c"):
            assert tag not in text, (name, tag)
        assert "&lt;script" in text and "&lt;img src=x" in text, name


def test_markdown_leaves_code_spans_as_written() -> None:
    from quicbed.analysis.render import md_text

    assert md_text("a < b & `x < <i>` <i> </i> <!-- x") == "a < b & `x < <i>` &lt;i> &lt;/i> &lt;!-- x"
    assert md_text("``a ` <b>`` <b>") == "``a ` <b>`` &lt;b>"


def _flagged_frame(rows: list[tuple[str, str, str, bool]]) -> pd.DataFrame:
    """Rows of one run: (workload, client, protocol, cpu_bound), each with a connection time."""
    df = pd.DataFrame(rows, columns=["workload", "client", "protocol", "cpu_bound"])
    df["run_id"], df["failed"], df["calib_forced"], df["connection_time_ms"] = "r1", False, False, 100.0
    df["facet"] = "india"
    return df


WEB_QUICK_TEXT = """
name: w
quick:
  decide:
    - {metric: connection_time, a: quic-h3-ngtcp2, b: tls1.3-h2}
"""


def test_cpu_bound_trials_no_verdict_rests_on_are_listed_not_warned() -> None:
    """Page loads that neither a paper finding nor a decide line reads: CPU-bound, they are
    said under Flagged trials, not in the Summary; a CPU-bound row a decide line compares, or
    of a kind a finding reads, is a Summary warning counted against the rows verdicts read."""
    from quicbed.analysis.report import flagged_section, render

    manifest = {"run_id": "r1", "quick": True, "experiment_text": WEB_QUICK_TEXT}
    loads = [(PAGELOAD, "chromium-quic", "quic", True)] * 3 + [("web", "quic-h3-ngtcp2", "quic", False)] * 2
    df = _flagged_frame(loads)
    assert not [f for f in flags(df, [manifest]) if "CPU-bound" in f]
    section = flagged_section(df, [manifest])
    assert section is not None
    text = render.markdown("t", "now", [section], Path("."))
    assert "3 of 5 trials are CPU-bound where no verdict rests on them (pageload 3)" in text

    busy = _flagged_frame(
        [("web", "quic-h3-ngtcp2", "quic", True), (PAGELOAD, "chromium-quic", "quic", True)]
    )
    (warning,) = [f for f in flags(busy, [manifest]) if "CPU-bound" in f]
    assert warning.startswith("1 of 1 trials a verdict rests on are CPU-bound"), warning


def test_a_decide_line_on_a_browser_makes_its_cpu_bound_loads_a_warning() -> None:
    text = "name: b\ndecide:\n  - {metric: connection_time, a: chromium-quic, b: chromium-tls1.3}\n"
    df = _flagged_frame(
        [(PAGELOAD, "chromium-quic", "quic", True), (PAGELOAD, "chromium-tls1.3", "tls1.3", False)]
    )
    (warning,) = [f for f in flags(df, [{"run_id": "r1", "experiment_text": text}]) if "CPU-bound" in f]
    assert warning.startswith("1 of 2 trials are CPU-bound")  # every row is one a verdict reads
    assert not [f for f in flags(df, [{"run_id": "r1", "experiment_text": "name: b\n"}]) if "CPU-bound" in f]


def test_a_run_of_other_questions_leads_with_its_own_expectations(full_report) -> None:
    """The paper's runs (its files, as given to `quicbed run`, relative or absolute) open with
    "Against the paper"; any other run with its own expect lines, and the paper's findings
    that its rows reach come after them."""
    from quicbed.analysis.report import build_sections
    from quicbed.paths import REPO

    df, manifests = load_runs([str(full_report.parent.parent)])
    expect = "expect:\n  - 'quic.connection_time.median / rtt < 2'\n"

    def titles(file: str) -> list[str]:
        ran = [{**m, "file": file, "experiment_text": expect} for m in manifests]
        return [s.title for s in build_sections(df, ran, [], [])]

    for paper in ("experiments/paper/web.yaml", str(REPO / "experiments" / "paper" / "web.yaml")):
        assert titles(paper)[:3] == ["Summary", "Against the paper", "Expectations"], paper
    for other in ("experiments/neighbours/fast.yaml", "/home/me/paper/web.yaml"):
        assert titles(other)[:3] == ["Summary", "Expectations", "Against the paper"], other


def test_against_the_paper_is_left_out_where_no_finding_has_rows(full_report) -> None:
    """A run of other questions (rows of no kind a finding reads) gets no list of fourteen
    "not enough data" verdicts above its own; a run with the paper's rows keeps the section,
    and so does one whose such rows all failed (test above)."""
    from quicbed.analysis.report import build_sections, finding_rows

    df, manifests = load_runs([str(full_report.parent.parent)])
    titles = [s.title for s in build_sections(df, manifests, [], [])]
    assert "Against the paper" in titles
    other = df.assign(workload="cross")  # a kind no finding rests on
    assert not finding_rows(other).any()
    titles = [s.title for s in build_sections(other, manifests, [], [])]
    assert "Against the paper" not in titles and titles[0] == "Summary"
