"""The workload classes are data the rest of the testbed reads: everything they name exists."""

from __future__ import annotations

from quicbed import rowschema
from quicbed.analysis.figures import PLOTS
from quicbed.analysis.report import TABLES
from quicbed.workloads import WORKLOADS, derived_kinds, report_sections, transfer_kinds


def test_every_section_names_plots_tables_and_columns_that_exist() -> None:
    sections = report_sections()
    assert sections
    for spec in sections:
        assert set(spec.plots) <= set(PLOTS), spec.title
        assert not spec.table or spec.table in TABLES, spec.title
        assert not spec.table or spec.table_caption, spec.title
        for metric in (*spec.metrics, *spec.cdfs, *(spec.compared or ())):
            assert metric.column in rowschema.COLUMNS, (spec.title, metric.column)


def test_every_analysis_kind_is_a_workload_or_derived_from_one() -> None:
    kinds = {*WORKLOADS, *derived_kinds()}
    assert transfer_kinds() == tuple(WORKLOADS)
    for spec in report_sections():
        assert set(spec.kinds or transfer_kinds()) <= kinds, spec.title
    for marks in derived_kinds().values():
        assert all(column in rowschema.COLUMNS for column in marks)
