"""cloud_against_rate with a browser beside the perf tools (analysis/figures.py): one line per
tool and protocol where several tools measured a protocol, and the browser's CPU over its
download, not over its start; analysis/load.py keeps its cloud rows out of the perf tools'
facet. Synthetic frames: what the figure draws is the arithmetic here."""

from __future__ import annotations

from pathlib import Path

import figure_data
import numpy as np
import pandas as pd
import pytest

from quicbed.analysis.figures import cloud_against_rate, tool_series
from quicbed.analysis.load import transfer_cpu_pct
from quicbed.analysis.model import CLOUD_CPU


def _rows(with_browser: bool) -> pd.DataFrame:
    tools = [("tls_perf", "tls1.3"), ("quic_perf", "quic")]
    if with_browser:
        tools += [("chromium", "tls1.3"), ("chromium", "quic")]
    rows = pd.DataFrame(
        [
            {"workload": "cloud", "profile": "fast", "server": "caddy", "tool": tool, "protocol": proto}
            | {"rate_down_mbit": rate, "throughput_mbps": rate * 0.93, "cpu_client_pct": 130.0}
            | {"browser_cpu_pct": 100.0 if tool == "chromium" else None}
            for rate in (50.0, 100.0)
            for tool, proto in tools
            for _ in range(3)
        ]
    )
    return rows.assign(transfer_cpu_pct=transfer_cpu_pct(rows))


def test_a_browser_and_a_perf_tool_of_one_protocol_are_two_lines() -> None:
    assert tool_series(_rows(False)) == [("quic", ""), ("tls1.3", "")]  # one tool each: as before
    assert tool_series(_rows(True)) == [
        ("quic", "chromium"),
        ("quic", "quic_perf"),
        ("tls1.3", "chromium"),
        ("tls1.3", "tls_perf"),
    ]


def test_the_browsers_cpu_is_over_its_download_in_the_figure_and_the_tables() -> None:
    """CLOUD_CPU, the one metric the figure, the tables and the claims read, takes a browser's
    CPU over its download and the perf tools' container CPU."""
    rows = _rows(True)
    browser = rows["tool"] == "chromium"
    cpu = CLOUD_CPU.rows(rows)[CLOUD_CPU.column]
    assert (cpu[browser] == 100.0).all()
    assert (cpu[~browser] == 130.0).all()  # the perf tools' unchanged
    assert (CLOUD_CPU.rows(_rows(False))[CLOUD_CPU.column] == 130.0).all()


def test_the_figure_draws_the_browser_beside_the_perf_tools(tmp_path: Path) -> None:
    with figure_data.captured() as drawn:
        (figure,) = cloud_against_rate(_rows(True), tmp_path, "cloud")
    assert figure.png.is_file() and "browser_cpu_pct" in figure.caption
    # One line per (protocol, tool): four, each a point per rate at the rows' value; the
    # browser's CPU (100 %) is drawn apart from the perf tools' (130 %).
    throughput, cpu = figure_data.panels(drawn["cloud_against_rate"])
    labels = [f"{p} · {t} (n=3)" for p, t in (("QUIC", "chromium"), ("QUIC", "quic_perf"))]
    labels += [f"{p} · {t} (n=3)" for p, t in (("TLS 1.3", "chromium"), ("TLS 1.3", "tls_perf"))]
    for ax in (throughput, cpu):
        assert list(figure_data.series(ax)) == labels
    for label, points in figure_data.series(throughput).items():
        np.testing.assert_allclose(points, [[50.0, 50 * 0.93], [100.0, 100 * 0.93]], err_msg=label)
    for label, points in figure_data.series(cpu).items():
        want = 100.0 if "chromium" in label else 130.0
        np.testing.assert_allclose(points, [[50.0, want], [100.0, want]], err_msg=label)


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QUICBED_RESULTS", str(tmp_path))
    return tmp_path


def test_a_browsers_download_is_never_pooled_with_a_perf_tools(results: Path) -> None:
    """The cloud section's tables group by facet and protocol: the browser's QUIC download
    gets a facet of its own, the perf tool's keeps the condition's."""
    import json

    from quicbed.analysis.load import load_runs

    run_dir = results / "downloads"
    run_dir.mkdir()
    rows = [
        {
            "protocol": "quic",
            "workload": "cloud",
            "object": "100MB",
            "tool": "quic_perf",
            "throughput_mbps": 94.0,
        },
        {
            "protocol": "quic",
            "workload": "cloud",
            "object": "100MB",
            "tool": "chromium",
            "browser": "chromium-full",
            "throughput_mbps": 93.0,
        },
    ]
    (run_dir / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    df, _ = load_runs(["downloads"])
    facets = dict(zip(df["tool"], df["facet"], strict=True))
    assert facets["chromium"].endswith(" · chromium") and "chromium" not in facets["quic_perf"]
    assert set(df["workload"]) == {"cloud"}  # a download is no page load
