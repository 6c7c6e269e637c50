"""The congestion-response check on the real path (issue 29): 1 MB over QUIC at 10 % random
loss on india. nginx's QUIC moves far more than a loss-responsive sender can (7.6-8.5 Mbit/s
measured against a bound of 0.56); quic-go (caddy) stays near the bound (0.59-0.68). Each row
carries the bound from its own calibration and a verdict, and the report flags nginx alone.
(TCP through the same loss, 0.3-0.44 Mbit/s, is left to experiments/ci/loss-response.yaml: a
1 MB TCP download takes 25 s here.)"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from quicbed import cli, paths
from quicbed.analysis.loss_response import FLAG_FACTOR, mathis_mbit, measured_down_loss

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

EXPERIMENT = """\
name: loss-response-path
profiles: [india]
sweep: {loss_pct: [10]}
servers: [caddy, nginx]
clients: [{tool: quic_perf, backend: ngtcp2}]
workload: {kind: cloud, files: [1MB]}
repetitions: 3
timeout_s: 60
"""


def test_nginx_quic_is_flagged_and_quic_go_is_not(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(paths, "RESULTS", tmp_path / "results")
    file = tmp_path / "experiment.yaml"
    file.write_text(EXPERIMENT)
    assert cli.main(["run", str(file), "--no-progress"]) == 0, capsys.readouterr().out[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    rows = [json.loads(ln) for ln in (run_dir / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["error"] is None for r in rows), rows
    condition = json.loads((run_dir / "manifest.json").read_text())["conditions"]["c0"]
    loss = measured_down_loss(condition["calibration"])
    assert loss is not None and 8 < loss < 12, condition["calibration"]
    bound = mathis_mbit(loss, rows[0]["calib_rtt_ms"])
    assert 0.45 < bound < 0.7, bound  # 9-11 % loss at 80 ms
    for row in rows:
        assert row["loss_bound_mbit"] == pytest.approx(bound, rel=1e-3), row
        assert row["loss_bound_basis"] == "calibrated", row
    goodput = {
        s: statistics.median(r["throughput_mbps"] for r in rows if r["server"] == s)
        for s in ("caddy", "nginx")
    }
    assert goodput["nginx"] > FLAG_FACTOR * bound > goodput["caddy"], (goodput, bound)
    verdicts = {s: [r["loss_response"] for r in rows if r["server"] == s] for s in goodput}
    assert verdicts["caddy"] == ["responsive"] * 3, verdicts
    assert verdicts["nginx"].count("not loss-responsive") >= 2, verdicts

    assert cli.main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    section = text.split("## Congestion response", 1)[1].split("\n## ", 1)[0]
    flagged = [ln for ln in section.splitlines() if "not loss-responsive" in ln and "against a bound" in ln]
    assert flagged and all("nginx's QUIC" in ln for ln in flagged), section
    assert not any("caddy's QUIC" in ln for ln in flagged), section
