"""The report's section on recorded pages (workloads/web.py "Recorded pages: page load against
origins"): per browser and page, the connections on the critical path, QUIC's gain over TLS 1.3
predicted from them (setups × RTT) beside the measured gain with its CI, from rows whose numbers
are known; and no section where no row is a recorded page's. Pure: data frames in, a table and
a PNG out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from quicbed.analysis.figures import pageload_vs_origins
from quicbed.analysis.report import workload_section
from quicbed.analysis.tables import pageload_by_origins_table
from quicbed.workloads import WORKLOADS

SECTION = next(s for s in WORKLOADS["web"].sections if s.table == "pageload_by_origins")
RTT = 80.0
CALIBRATED = 81.0
GAIN = "measured gain (ms) [95% CI]"


def _rows(n: int = 12, seed: int = 3, saved_rtts: dict[str, float] | None = None) -> pd.DataFrame:
    """Chromium on india (configured 80 ms, calibrated 81 ms): a 20-origin page whose loads
    chain two setups (the document's, then its 19 other origins' at once) and a one-origin twin
    that chains one; QUIC saves `saved_rtts` calibrated RTTs on each (by default as many as the
    critical path holds), loads spread by ±20 ms."""
    saved = saved_rtts or {"har/p-1": 2, "har/p-1-one-origin": 1}
    rng = np.random.default_rng(seed)
    rows = []
    for obj, origins, critical in (("har/p-1", 20, 2), ("har/p-1-one-origin", 1, 1)):
        for protocol, extra in (("quic", 0.0), ("tls1.3", saved[obj] * CALIBRATED)):
            for _ in range(n):
                rows.append(
                    {
                        "workload": "pageload",
                        "facet": "india / chromium",
                        "object": obj,
                        "protocol": protocol,
                        "page_load_time_ms": 2000 + extra + rng.uniform(-20, 20),
                        "page_origins": origins,
                        "connections": 31 if origins > 1 else 2,
                        "critical_connections": critical,
                        "rtt_ms": RTT,
                        "calib_rtt_ms": CALIBRATED + rng.uniform(-0.5, 0.5),
                        "cpu_bound": False,
                    }
                )
    return pd.DataFrame(rows)


def _ms(cell: str) -> tuple[float, float, float]:
    value, ci = cell.split(" [")
    lo, hi = ci.rstrip("]").split(", ")
    return float(value), float(lo), float(hi)


def test_the_predicted_gain_is_the_critical_path_setups_times_the_calibrated_rtt() -> None:
    table = pageload_by_origins_table(_rows())
    assert list(table["page"]) == ["har/p-1-one-origin", "har/p-1"]  # fewest origins first
    assert list(table["origins"]) == ["1", "20"]
    assert list(table["connections (median)"]) == ["2.00", "31.0"]
    assert list(table["critical-path connections (median)"]) == ["1.00", "2.00"]
    one, many = table.iloc[0], table.iloc[1]
    rtt, source = one["RTT (ms)"].split()
    assert float(rtt) == pytest.approx(CALIBRATED, abs=0.5) and source == "calibrated"
    assert float(one["predicted gain (ms)"]) == pytest.approx(CALIBRATED, abs=0.5)
    assert float(many["predicted gain (ms)"]) == pytest.approx(2 * CALIBRATED, abs=1)
    gain_one, gain_many = _ms(one[GAIN]), _ms(many[GAIN])
    assert gain_one[0] == pytest.approx(CALIBRATED, abs=15) and gain_one[1] < CALIBRATED < gain_one[2]
    assert gain_many[0] == pytest.approx(2 * CALIBRATED, abs=15)
    assert list(table["prediction in the CI"]) == ["yes", "yes"]
    assert not any("per added origin" in column for column in table.columns)  # no linear fit


def test_a_measured_gain_off_the_prediction_says_on_which_side() -> None:
    """QUIC gains 5 RTT on the 20-origin page, whose critical path holds 2 setups; on the twin
    it gains nothing against 1 setup predicted."""
    table = pageload_by_origins_table(_rows(saved_rtts={"har/p-1": 5, "har/p-1-one-origin": 0}))
    assert list(table["prediction in the CI"]) == ["no: measured less", "no: measured more"]


def test_without_a_calibration_the_configured_rtt_predicts_and_says_so() -> None:
    rows = _rows()
    rows["calib_rtt_ms"] = np.nan
    table = pageload_by_origins_table(rows)
    assert set(table["RTT (ms)"]) == {"80.0 configured"}
    assert list(table["predicted gain (ms)"]) == ["80.0", "160"]


def test_protocols_that_chain_differently_are_shown_each_and_old_rows_predict_nothing() -> None:
    rows = _rows()
    rows.loc[(rows["object"] == "har/p-1") & (rows["protocol"] == "quic"), "critical_connections"] = 3
    table = pageload_by_origins_table(rows)
    assert table.iloc[1]["critical-path connections (median)"] == "2.50 (QUIC 3.00, TLS 1.3 2.00)"
    older = pageload_by_origins_table(_rows().drop(columns=["critical_connections"]))
    assert set(older["predicted gain (ms)"]) == set(older["prediction in the CI"]) == {"–"}
    assert older.iloc[1][GAIN] != "–"  # the measurement stands without its explanation


def test_no_recorded_page_no_section_and_a_figure_where_there_are(tmp_path) -> None:
    plain = _rows().drop(columns=["page_origins"])
    assert pageload_by_origins_table(plain).empty
    assert workload_section(SECTION, plain, []) is None
    assert pageload_vs_origins(plain, tmp_path, "origins") == []
    (figure,) = pageload_vs_origins(_rows(), tmp_path, "origins")
    assert figure.png.is_file() and figure.png.stat().st_size > 10_000
    section = workload_section(SECTION, _rows(), [])
    assert section is not None and section.title == "Recorded pages: page load against origins"
