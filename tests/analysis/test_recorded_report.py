"""The report's section on recorded pages (workloads/web.py "Recorded pages: page load against
origins"): per browser and page, QUIC's gain over TLS 1.3 and how much more it gains per added
origin, with CIs, from rows whose numbers are known; and no section where no row is a recorded
page's. Pure: data frames in, a table and a PNG out."""

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


def _rows(n: int = 12, seed: int = 3) -> pd.DataFrame:
    """Chromium on india: a 20-origin page where QUIC saves 5 RTT, a one-origin twin where it
    saves 1 RTT, loads spread by ±20 ms."""
    rng = np.random.default_rng(seed)
    rows = []
    for obj, origins, saved_rtts in (("har/p-1", 20, 5), ("har/p-1-one-origin", 1, 1)):
        for protocol, extra in (("quic", 0.0), ("tls1.3", saved_rtts * RTT)):
            for _ in range(n):
                rows.append(
                    {
                        "workload": "pageload",
                        "facet": "india / chromium",
                        "object": obj,
                        "protocol": protocol,
                        "page_load_time_ms": 2000 + extra + rng.uniform(-20, 20),
                        "page_origins": origins,
                        "connections": 31 if origins > 1 else 1,
                        "cpu_bound": False,
                    }
                )
    return pd.DataFrame(rows)


def _ms(cell: str) -> tuple[float, float, float]:
    value, ci = cell.split(" [")
    lo, hi = ci.rstrip("]").split(", ")
    return float(value), float(lo), float(hi)


def test_the_gain_and_the_gain_per_added_origin_are_the_rows_with_cis() -> None:
    table = pageload_by_origins_table(_rows())
    assert list(table["page"]) == ["har/p-1-one-origin", "har/p-1"]  # fewest origins first
    assert list(table["origins"]) == ["1", "20"]
    one, many = table.iloc[0], table.iloc[1]
    gain_one, gain_many = _ms(one["QUIC's gain (ms) [95% CI]"]), _ms(many["QUIC's gain (ms) [95% CI]"])
    assert gain_one[0] == pytest.approx(RTT, abs=15) and gain_one[1] < RTT < gain_one[2]
    assert gain_many[0] == pytest.approx(5 * RTT, abs=15) and gain_many[1] < 5 * RTT < gain_many[2]
    column = "more gain per added origin (ms), against 1"
    assert one[column] == "–"
    per_origin = _ms(many[column])
    # (5 - 1) RTT more over 19 added origins.
    assert per_origin[0] == pytest.approx(4 * RTT / 19, abs=1.5), per_origin
    assert per_origin[1] < 4 * RTT / 19 < per_origin[2] and per_origin[1] > 0
    assert (float(one["connections (median)"]), float(many["connections (median)"])) == (1, 31)


def test_no_recorded_page_no_section_and_a_figure_where_there_are(tmp_path) -> None:
    plain = _rows().drop(columns=["page_origins"])
    assert pageload_by_origins_table(plain).empty
    assert workload_section(SECTION, plain, []) is None
    assert pageload_vs_origins(plain, tmp_path, "origins") == []
    (figure,) = pageload_vs_origins(_rows(), tmp_path, "origins")
    assert figure.png.is_file() and figure.png.stat().st_size > 10_000
    section = workload_section(SECTION, _rows(), [])
    assert section is not None and section.title == "Recorded pages: page load against origins"
