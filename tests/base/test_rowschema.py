"""The one row schema (quicbed/rowschema.py) against everything that writes or reads rows:
the C tools' documented row, the runner's rows, the analysis's defaults and metrics."""

from __future__ import annotations

import re
from pathlib import Path

from quicbed import rowschema
from quicbed.analysis import model
from quicbed.experiments import registry
from quicbed.experiments.runner import ROW_DEFAULTS, run_experiment
from quicbed.experiments.schema import parse_experiment
from quicbed.experiments.store import load_rows
from quicbed.experiments.synthetic import SyntheticExecutor

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = """
name: rows
profiles: [india]
sweep: {server.tcp_cc: [cubic]}
servers: [caddy]
clients: [{tool: tls_perf, tls: ["1.2", "1.3"]}, quic_perf]
workload: {kind: web, objects: [index.html]}
repetitions: 2
"""


def _readme_columns() -> list[str]:
    """The keys of clients/perf/README.md's row table (`a`, `b` rows name several)."""
    text = (REPO / "clients" / "perf" / "README.md").read_text()
    table = text.split("## Row schema", 1)[1].split("\n\n", 2)[1]
    keys = []
    for line in table.splitlines()[2:]:
        keys += re.findall(r"`([a-z0-9_]+)`", line.split("|")[1])
    return keys


def test_the_tools_readme_documents_exactly_the_schema() -> None:
    documented = _readme_columns()
    schema = [c.name for c in (*rowschema.TOOL, *rowschema.TOOL_OPTIONAL)]
    assert sorted(documented) == sorted(schema)


def test_runner_rows_have_only_schema_columns(tmp_path: Path) -> None:
    exp = parse_experiment(EXPERIMENT)
    run_experiment(exp, SyntheticExecutor(), tmp_path / "run", progress=False)
    rows, torn = load_rows(tmp_path / "run")
    assert torn == 0
    assert len(rows) == 6
    unknown = {k for row in rows for k in row if not rowschema.is_known(k)}
    assert not unknown, unknown
    assert all(set(ROW_DEFAULTS) <= set(row) for row in rows)
    assert {"param_server.tcp_cc"} <= set(rows[0])


def test_analysis_and_expectations_read_schema_columns() -> None:
    assert all(c in rowschema.COLUMNS for c in model.OPTIONAL_COLUMNS)
    assert all(m.column in rowschema.COLUMNS for m in vars(model).values() if isinstance(m, model.Metric))
    assert all(column in rowschema.COLUMNS for column in registry.METRICS.values())
    assert all(rowschema.unit(column) for column in registry.METRICS.values())
