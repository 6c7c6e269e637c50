"""The congestion-response check (analysis/loss_response.py): the bound, the verdicts, the rows
the runner writes and the analysis fills in, and the report's section, flag and claims."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from analysis_synthetic import Model, base_row, manifest

from quicbed.analysis import load_runs, write_report
from quicbed.analysis import loss_response as lr
from quicbed.analysis.claims import evaluate
from quicbed.analysis.figures import path_and_server, streaming_panel
from quicbed.analysis.tables import stacks
from quicbed.experiments.matrix import Condition
from quicbed.experiments.runner import run_experiment
from quicbed.experiments.schema import parse_experiment
from quicbed.experiments.store import load_rows
from quicbed.experiments.synthetic import SyntheticExecutor

MiB = 2**20  # the content server's "1MB"
# india at 10 % loss, as calibrated in issue 29: 9.9 % down, 80 ms.
INDIA = lr.PathLoss(loss_pct=9.9, rtt_ms=80.0, rate_mbit=20.0)
# Issue 29's measured 1 MB downloads (Mbit/s, two each) through that path.
MEASURED = {
    "caddy TLS 1.3": (0.29, 0.29),
    "nginx TLS 1.3": (0.29, 0.34),
    "HAProxy TLS 1.3": (0.30, 0.30),
    "caddy QUIC (quic-go)": (0.57, 0.62),
    "nginx QUIC": (5.7, 8.4),
    "HAProxy QUIC": (0.39, 0.43),
}


def test_the_bound_on_india_at_ten_percent_loss():
    # 1448 B x sqrt(3/2) / (80 ms x sqrt(0.099)) = 0.564 Mbit/s: the brief's "0.56".
    assert INDIA.bound_mbit == pytest.approx(0.5636, abs=5e-4)
    # Padhye's formula (timeouts of R + 200 ms) is lower still, near what TCP measured.
    assert INDIA.padhye_mbit == pytest.approx(0.278, abs=2e-3)
    assert INDIA.padhye_mbit < INDIA.bound_mbit
    # CUBIC is in its Reno-friendly region there (and on germany, 20 ms, at 1 %), so the
    # Reno bound holds for the kernel's TCP too.
    assert lr.cubic_reno_friendly(9.9, 80.0) and lr.cubic_reno_friendly(1.0, 20.0)
    # Not everywhere: a long path at little loss leaves it (R^3 > 1.8 p).
    assert not lr.cubic_reno_friendly(0.01, 600.0)


@pytest.mark.parametrize("stack", MEASURED)
def test_issue_29_figures_flag_nginx_quic_alone(stack):
    verdicts = {lr.verdict(rate, MiB, INDIA) for rate in MEASURED[stack]}
    expected = lr.NOT_RESPONSIVE if stack == "nginx QUIC" else lr.RESPONSIVE
    assert verdicts == {expected}


def test_verdict_edge_cases():
    assert lr.verdict(15.0, MiB, lr.PathLoss(0.0, 80.0, 20.0)) == lr.NO_LOSS
    assert lr.mathis_mbit(0.0, 80.0) == float("inf")
    # 0.01 % on india: the bound (17.7 Mbit/s) is above half the link: the link limits.
    assert lr.verdict(17.0, 10 * MiB, lr.PathLoss(0.01, 80.0, 20.0)) == lr.NOT_BINDING
    # 99 full packets are too short; 100 are judged.
    short = lr.MIN_PACKETS * lr.PACKET_BYTES
    assert lr.verdict(8.0, short - 1, INDIA) == lr.TOO_SHORT
    assert lr.verdict(8.0, short, INDIA) == lr.NOT_RESPONSIVE
    # A player's rate below the flag is its demand's, never "responsive"; above it, flagged.
    assert lr.verdict(0.5, 9 * MiB, INDIA, demand_limited=True) == lr.DEMAND_LIMITED
    assert lr.verdict(2.5, 9 * MiB, INDIA, demand_limited=True) == lr.NOT_RESPONSIVE
    # The flag is at twice the bound, not at the bound.
    assert lr.verdict(1.9 * INDIA.bound_mbit, MiB, INDIA) == lr.RESPONSIVE
    assert lr.verdict(2.1 * INDIA.bound_mbit, MiB, INDIA) == lr.NOT_RESPONSIVE


def test_goodput_of_each_tools_row():
    perf = {"tool": "quic_perf", "bytes": MiB, "download_time_ms": 1000.0, "t_start": 0, "t_done": 9}
    assert lr.goodput_mbit(perf) == pytest.approx(8 * MiB / 1e6)
    # A browser's playback: download_time_ms is null; the session is t_start -> t_done.
    playback = {"tool": "chromium", "workload": "video", "bytes": 3e6, "t_start": 100.0, "t_done": 130.0}
    assert lr.goodput_mbit(playback) == pytest.approx(0.8)
    assert lr.is_demand_limited(playback)
    # A browser's page load: download_time_ms is the document's alone, the bytes the page's.
    page = {"tool": "chromium", "bytes": 600_000, "download_time_ms": 50.0, "t_start": 1.0, "t_done": 2.2}
    assert lr.goodput_mbit(page) == pytest.approx(4.0)
    assert lr.is_demand_limited({"tool": "video_download", "workload": "video"})
    assert not lr.is_demand_limited({"tool": "tls_perf", "workload": "cloud"})
    failed = {"tool": "tls_perf", "bytes": 1000, "download_time_ms": None, "t_done": None}
    assert lr.goodput_mbit(failed) is None
    assert lr.row_columns(failed, INDIA)["loss_response"] is None


def test_the_browsers_are_read_from_the_client_descriptors():
    """A page loader is a client that runs the web workload but cannot fetch a cloud file
    (its client.yaml); the other stacks' clients fetch one object, as the perf tools."""
    assert lr.BROWSER_TOOLS == ("chromium", "firefox")
    page = {"tool": "firefox", "bytes": 600_000, "download_time_ms": 50.0, "t_start": 1.0, "t_done": 2.2}
    assert lr.is_demand_limited(page) and lr.goodput_mbit(page) == pytest.approx(4.0)
    for tool in ("aioquic", "quicgo"):
        row = {"tool": tool, "workload": "cloud", "bytes": MiB, "download_time_ms": 1000.0}
        assert not lr.is_demand_limited(row) and lr.goodput_mbit(row) == pytest.approx(8 * MiB / 1e6)


def test_the_calibrated_loss_wins_over_the_configured():
    calib = {
        "rtt_ms": 80.0,
        "calibration": {"checks": [{"metric": "loss_pct", "direction": "down", "measured": 9.9}]},
    }
    row = {"tool": "tls_perf", "bytes": MiB, "download_time_ms": 28900.0, "loss_pct": 10.0}
    row |= {"rtt_ms": 80.0, "rate_down_mbit": 20.0}
    cols = lr.runner_columns(row, calib)
    assert cols == {
        "loss_bound_mbit": 0.5636,
        "loss_response": lr.RESPONSIVE,
        "loss_bound_basis": "calibrated",
    }
    configured = lr.runner_columns(row, {"rtt_ms": 80.0})
    assert configured["loss_bound_basis"] == "configured"
    assert configured["loss_bound_mbit"] == pytest.approx(lr.mathis_mbit(10.0, 80.0), abs=1e-4)


# --- the runner writes the columns ------------------------------------------------------------

EXPERIMENT = """\
name: lossy
profiles:
  - {name: lab, rtt_ms: 80, rate_mbit: 20}
sweep: {loss_pct: [0, 10]}
servers: [nginx]
clients:
  - {tool: quic_perf}
workload: {kind: cloud, files: [1MB]}
repetitions: 2
"""


class CalibratedExecutor(SyntheticExecutor):
    """The synthetic executor (rates at the link's, whatever the loss: a sender that ignores
    it), with the calibration dict shaped as the topology's executor yields it."""

    @contextmanager
    def condition(self, cond: Condition) -> Iterator[dict[str, Any]]:
        with super().condition(cond) as calib:
            measured = 0.99 * cond.link.down.expected_loss_pct
            checks = [{"metric": "loss_pct", "direction": "down", "measured": measured}]
            yield calib | {"calibration": {"checks": checks}}


def test_the_runner_writes_the_verdict_with_each_row(tmp_path):
    exp = parse_experiment(EXPERIMENT, "lossy.yaml")
    run_experiment(exp, CalibratedExecutor(), tmp_path / "run", progress=False)
    rows, _ = load_rows(tmp_path / "run")
    by_loss = {r["loss_pct"]: r for r in rows}
    assert by_loss[0.0]["loss_response"] == lr.NO_LOSS
    lossy = by_loss[10.0]
    assert lossy["loss_response"] == lr.NOT_RESPONSIVE
    assert lossy["loss_bound_basis"] == "calibrated"
    assert lossy["loss_bound_mbit"] == pytest.approx(lr.mathis_mbit(9.9, 80.0), abs=1e-4)


# --- older runs, the report ---------------------------------------------------------------------

SERVERS = {"caddy": 0.6, "nginx": 6.9, "haproxy": 0.4}  # QUIC goodput at 9.9 % (Mbit/s)
TCP_RATE = 0.3
LOSSY = {"india": (80.0, 20.0, 20.0, 10.0)}


def transfer(base: dict, rate: float, i: int) -> dict:
    seconds = MiB * 8 / (rate * 1e6)
    return {
        **base,
        "workload": "cloud",
        "object": "1MB",
        "bytes": MiB,
        "connection_time_ms": base["rtt_ms"] * (1 if base["protocol"] == "quic" else 2),
        "download_time_ms": 1e3 * seconds * (1 + 0.001 * (i - 4.5)),
        "throughput_mbps": rate,
        "t_start": 1000.0,
        "t_done": 1000.0 + seconds,
    }


def playback(base: dict, rate: float, i: int) -> dict:
    # 30 s sessions; the player takes what the sender gives up to its demand (2.6 Mbit/s).
    return {
        **base,
        "workload": "video",
        "object": "dash",
        "tool": "chromium",
        "bytes": int(min(rate, 2.6) * 1e6 / 8 * 30),
        "t_start": 2000.0,
        "t_done": 2030.0,
        "download_time_ms": None,
        "throughput_mbps": None,
        "startup_delay_ms": 700.0 + 10 * i,
        "stall_count": 0 if rate > 2 else 3,
        "stall_durations_ms": [] if rate > 2 else [900.0, 1200.0, 1500.0],
        "stall_total_ms": 0.0 if rate > 2 else 3600.0,
        "quality_switches": 1 if rate > 2 else 6,
        "lowest_quality": "720p" if rate > 2 else "144p",
    }


def lossy_run(root: Path, run_id: str = "lossy", reps: int = 10) -> Path:
    """A run of three servers on india at 10 % loss (9.9 % calibrated), rates as issue 29
    measured them: nginx's QUIC far above the bound, the rest below it. No loss columns: an
    older run's rows."""
    rows = []
    for server, quic_rate in SERVERS.items():
        for protocol in ("quic", "tls1.3"):
            rate = quic_rate if protocol == "quic" else TCP_RATE
            for i in range(reps):
                base = base_row(run_id, "india", LOSSY["india"], protocol, i) | {"server": server}
                rows += [transfer(base, rate, i), playback(base, rate, i)]
    for i, row in enumerate(rows):
        row["trial_id"] = f"{run_id}-{i:04d}"
    info = manifest(run_id, Model(conditions=LOSSY))
    info["conditions"]["india"]["calibration"]["rtt_ms"] = 80.0  # what the loss bound divides by
    calibrated_loss(info, 9.9)
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps(info))
    (run_dir / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return run_dir


def calibrated_loss(info: dict, pct: float) -> None:
    """Set the downlink loss india's calibration measured, where the runner records it."""
    for check in info["conditions"]["india"]["calibration"]["calibration"]["checks"]:
        if check["metric"] == "loss_pct" and check["direction"] == "down":
            check["measured"] = pct


def test_analysis_computes_the_columns_for_older_runs(tmp_path):
    run_dir = lossy_run(tmp_path)
    df, _ = load_runs([str(run_dir)])
    # base_row's calib_rtt_ms is 1 % above the profile: R = 80.8 ms, p = 9.9 % (calibrated).
    assert set(df["loss_bound_basis"]) == {"calibrated"}
    assert df["loss_bound_mbit"].astype(float).round(3).unique().tolist() == [0.558]
    verdicts = df.groupby(["server", "protocol", "workload"])["loss_response"].agg(set)
    assert verdicts["nginx", "quic", "cloud"] == {lr.NOT_RESPONSIVE}
    assert verdicts["nginx", "quic", "streaming"] == {lr.NOT_RESPONSIVE}
    assert verdicts["caddy", "quic", "cloud"] == {lr.RESPONSIVE}
    assert verdicts["haproxy", "tls1.3", "cloud"] == {lr.RESPONSIVE}
    assert verdicts["caddy", "quic", "streaming"] == {lr.DEMAND_LIMITED}


def test_a_row_the_runner_judged_keeps_its_verdict(tmp_path):
    run_dir = lossy_run(tmp_path, reps=1)
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    rows[0] |= {"loss_response": "responsive", "loss_bound_mbit": 0.5, "loss_bound_basis": "configured"}
    (run_dir / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    df, _ = load_runs([str(run_dir)])
    first = df.set_index("trial_id").loc[rows[0]["trial_id"]]
    assert (first["loss_response"], first["loss_bound_basis"]) == ("responsive", "configured")
    assert df["loss_response"].notna().all()


@pytest.fixture(scope="module")
def lossy_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    run_dir = lossy_run(tmp_path_factory.mktemp("results"))
    return write_report([str(run_dir)]).with_suffix(".md").read_text()


def section(markdown: str, title: str) -> str:
    start = markdown.index(f"## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end > 0 else None]


def test_the_report_has_the_section_and_flags_nginx_quic(lossy_report):
    text = section(lossy_report, "Congestion response")
    flag = (
        "india: nginx's QUIC: 6.90 Mbit/s (quic-h3, cloud 1MB, n=10), 2.60 Mbit/s (quic-h3, "
        "streaming dash, n=10) against a bound of 0.56 Mbit/s at 9.9 % loss (calibrated) and "
        "80.8 ms: not loss-responsive"
    )
    assert flag in text
    assert "caddy's QUIC:" not in text and "haproxy's QUIC:" not in text  # no other flag
    table = [line for line in text.splitlines() if line.startswith("| india")]
    nginx = [line for line in table if "| nginx's QUIC |" in line and "| cloud |" in line]
    caddy = [line for line in table if "| caddy's QUIC |" in line and "| cloud |" in line]
    assert len(nginx) == 1 and "| 0.28 |" in nginx[0] and "| not loss-responsive |" in nginx[0]
    assert len(caddy) == 1 and "| responsive |" in caddy[0]
    assert any("kernel TCP (cubic) under haproxy" in line and "| responsive |" in line for line in table)
    assert "(figures/congestion_goodput_vs_bound.png)" in text
    # and the summary warns before any number is read
    assert "Not loss-responsive under loss: nginx's QUIC (20 of 120 trials)" in section(
        lossy_report, "Summary"
    )


def test_claims_resting_on_a_flagged_stack_say_so(lossy_report, tmp_path):
    df, _ = load_runs([str(lossy_run(tmp_path))])
    verdicts = {d.claim: v for d, v in evaluate(df[~df["failed"]])}
    caveat = "rests on nginx's QUIC (10 of 60 trials), not loss-responsive"
    cloud = verdicts["Cloud storage: QUIC has the higher throughput for files ≤ 20 MB"]
    assert any(caveat in f for f in cloud.found)
    stalls = next(
        v for claim, v in verdicts.items() if claim.startswith("Streaming: TLS/TCP stalls last longer")
    )
    assert any("rests on nginx's QUIC" in f for f in stalls.found)
    # A handshake claim rests on no transfer rate: no caveat.
    order = verdicts["Connection time: QUIC < TLS 1.3 < TLS 1.2"]
    assert not any("rests on" in f for f in order.found)
    assert caveat in section(lossy_report, "Against the paper")


def test_the_streaming_section_is_per_server(lossy_report):
    text = section(lossy_report, "Streaming")
    header = next(line for line in text.splitlines() if line.startswith("| loss (%)"))
    assert "| server |" in header
    lines = [line for line in text.splitlines() if line.startswith("| 10 |")]
    assert len(lines) == 6  # 3 servers x 2 protocols, never pooled
    nginx_quic = next(line for line in lines if "| nginx | QUIC |" in line)
    assert "720p" in nginx_quic and "10 not loss-responsive" in nginx_quic
    caddy_quic = next(line for line in lines if "| caddy | QUIC |" in line)
    assert "144p" in caddy_quic and "10 demand-limited" in caddy_quic


def test_no_section_without_loss(tmp_path):
    run_dir = lossy_run(tmp_path, reps=2)
    info = json.loads((run_dir / "manifest.json").read_text())
    calibrated_loss(info, 0.0)
    (run_dir / "manifest.json").write_text(json.dumps(info))
    df = pd.DataFrame([json.loads(x) for x in (run_dir / "rows.jsonl").read_text().splitlines()])
    df.assign(loss_pct=0.0).to_json(run_dir / "rows.jsonl", orient="records", lines=True)
    markdown = write_report([str(run_dir)]).with_suffix(".md").read_text()
    assert "## Congestion response" not in markdown


def test_the_stack_is_the_servers_quic_or_the_kernels_tcp_and_its_cc():
    rows = pd.DataFrame(
        {
            "server": ["nginx", "nginx", "caddy"],
            "protocol": ["quic", "tls1.3", "tls1.2"],
            "param_server.tcp_cc": ["bbr", "bbr", None],
        }
    )
    assert stacks(rows).tolist() == [
        "nginx's QUIC",
        "kernel TCP (bbr) under nginx",
        "kernel TCP (cubic) under caddy",
    ]


def test_streaming_figures_never_pool_servers():
    one = pd.DataFrame({"profile": ["india", "india"], "server": ["nginx", "nginx"], "loss_pct": [5.0, 5.0]})
    two = one.assign(server=["nginx", "caddy"])
    assert path_and_server(one).tolist() == ["india", "india"]
    assert path_and_server(two).tolist() == ["india · nginx", "india · caddy"]
    assert streaming_panel(two).tolist() == ["india · nginx · 5% loss", "india · caddy · 5% loss"]
