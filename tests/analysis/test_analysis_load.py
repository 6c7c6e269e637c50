"""Loading run directories (quicbed.analysis.load): fallbacks, clear errors, mixed runs."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from analysis_synthetic import Model, write_run

from quicbed.analysis import AnalysisError, load_runs, main_report
from quicbed.analysis.load import manifest_differences
from quicbed.analysis.manifest import verdict_differences
from quicbed.analysis.tables import pageload_vs_download_table

SMALL = Model(repetitions=3, workloads=("web",), conditions={"india": (80.0, 20.0, 20.0, 0.0)})


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QUICBED_RESULTS", str(tmp_path))
    return tmp_path


def test_loads_parquet_by_run_id_and_adds_derived_columns(results):
    write_run(results, "r1", SMALL)
    df, manifests = load_runs(["r1"])
    assert len(df) == 3 * 3 and manifests[0]["run_id"] == "r1"
    assert {"failed", "facet", "rtt_ref_ms", "object_bytes"} <= set(df.columns)
    assert df["rtt_ref_ms"].iloc[0] == pytest.approx(80.8)
    assert df.attrs["notes"] == [] and df.attrs["manifest_differences"] == []


def test_accepts_a_path_and_falls_back_to_jsonl_ignoring_a_torn_last_line(results):
    run_dir = write_run(results, "r1", SMALL, parquet=False, torn_tail=True)
    df, _ = load_runs([str(run_dir)])
    assert len(df) == 9
    assert any("torn" in n for n in df.attrs["notes"])


def test_failed_rows_are_kept_and_marked(results):
    write_run(results, "r1", SMALL)  # the model fails its first two trials
    df, _ = load_runs(["r1"])
    assert int(df["failed"].sum()) == 2


def test_unknown_run_lists_the_available_ones(results):
    write_run(results, "r1", SMALL)
    write_run(results, "r2", SMALL)
    with pytest.raises(AnalysisError, match=r"unknown run 'nope'.*available runs: r1, r2"):
        load_runs(["nope"])


def test_empty_run_is_an_error(results):
    run_dir = write_run(results, "r1", SMALL, parquet=False)
    (run_dir / "rows.jsonl").write_text("")
    with pytest.raises(AnalysisError, match="run r1 has no rows"):
        load_runs(["r1"])


def test_corrupt_parquet_falls_back_to_jsonl_and_says_so(results):
    run_dir = write_run(results, "r1", SMALL)
    (run_dir / "rows.parquet").write_bytes(b"PAR1 this is not parquet")
    df, _ = load_runs(["r1"])
    assert len(df) == 9
    assert any("rows.parquet is corrupt" in n and "rows.jsonl instead" in n for n in df.attrs["notes"])


def test_corrupt_parquet_without_jsonl_is_an_error(results):
    run_dir = write_run(results, "r1", SMALL)
    (run_dir / "rows.parquet").write_bytes(b"garbage")
    (run_dir / "rows.jsonl").unlink()
    with pytest.raises(AnalysisError, match="corrupt.*no rows.jsonl to fall back to"):
        load_runs(["r1"])


def test_missing_optional_columns_are_tolerated(results):
    run_dir = results / "bare"
    run_dir.mkdir()
    rows = [
        {"condition": "c", "protocol": p, "connection_time_ms": 10.0 * k, "rtt_ms": 10.0}
        for k, p in enumerate(["quic", "tls1.3", "tls1.2"], start=1)
    ]
    (run_dir / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    df, manifests = load_runs(["bare"])
    assert not df["failed"].any() and (df["workload"] == "web").all()
    assert list(df["rtt_ref_ms"]) == [10.0] * 3  # configured RTT when nothing was calibrated
    assert any("no manifest.json" in n for n in df.attrs["notes"])


def test_mixed_manifests_are_flagged_and_kept_apart(results):
    write_run(results, "r1", SMALL)
    write_run(results, "r2", SMALL, versions={"CADDY_VERSION": "v2.10.0", "NGINX_VERSION": "1.26.3"})
    df, manifests = load_runs(["r1", "r2"])
    diffs = df.attrs["manifest_differences"]
    assert len(diffs) == 1 and diffs[0].startswith("versions.CADDY_VERSION")
    assert "r1=v2.11.9" in diffs[0] and "r2=v2.10.0" in diffs[0]
    assert set(df["facet"]) == {"r1 · india", "r2 · india"}  # not pooled


def test_identical_setups_are_pooled(results):
    write_run(results, "r1", SMALL)
    write_run(results, "r2", SMALL)
    df, _ = load_runs(["r1", "r2"])
    assert df.attrs["manifest_differences"] == [] and set(df["facet"]) == {"india"}


def test_manifest_differences_ignore_per_run_fields():
    a = {"run_id": "a", "seed": 1, "kernel": "6.1", "started_at": "x"}
    b = {"run_id": "b", "seed": 2, "kernel": "6.18", "started_at": "y"}
    assert manifest_differences([a, b]) == ["kernel: a=6.1; b=6.18"]


def test_cli_entry_prints_one_line_and_exits_2(results, capsys):
    assert main_report(["missing-run"], None) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("quicbed report: unknown run 'missing-run'") and "\n" not in err


def test_rows_without_a_protocol_are_an_error(results):
    run_dir = results / "odd"
    run_dir.mkdir()
    (run_dir / "rows.jsonl").write_text('{"condition": "c", "connection_time_ms": 1.0}\n')
    with pytest.raises(AnalysisError, match="rows lack the column.*protocol"):
        load_runs(["odd"])


def test_an_unfinished_run_is_noted(results):
    run_dir = write_run(results, "r1", SMALL, parquet=False)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "status": "running"}))
    df, _ = load_runs(["r1"])
    assert any("status 'running'" in n for n in df.attrs["notes"])


def test_runs_of_different_workloads_load_together_without_a_library_warning(results):
    """A streaming run has no throughput and a web run no startup delay: the loaded rows keep
    every column, typed by the runs that have values, and pandas has nothing to warn of (the
    report printed its FutureWarning to the user)."""
    write_run(results, "web", SMALL)
    write_run(results, "play", Model(repetitions=3, workloads=("streaming",), conditions=SMALL.conditions))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df, _ = load_runs(["web", "play"])
    web, play = df[df["run_id"] == "web"], df[df["run_id"] == "play"]
    assert web["startup_delay_ms"].isna().all() and play["startup_delay_ms"].notna().all()
    assert web["connection_time_ms"].notna().any() and df["connection_time_ms"].dtype == float


def test_playback_sessions_count_as_streaming_whatever_their_workload_label(results):
    run_dir = results / "play"
    run_dir.mkdir()
    rows = [
        {
            "protocol": "quic",
            "workload": "video",
            "object": "segments",
            "startup_delay_ms": 700.0,
            "stall_count": 0,
        },
        {"protocol": "quic", "workload": "video", "object": "progressive", "connection_time_ms": 80.0},
    ]
    (run_dir / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    df, _ = load_runs(["play"])
    assert list(df["workload"]) == ["streaming", "video"]


def test_a_run_whose_conditions_ran_on_different_kinds_of_host_is_flagged():
    from quicbed.analysis.manifest import calibration_entries, mixed_hosts

    def cond(label: str, host: str, cpu: str, client_image: str) -> dict:
        return {
            "label": label,
            "calibration": {"rtt_ms": 80, "passed": True},
            "ran_on": {
                "hostname": host,
                "cpu_model": cpu,
                "cpus": 2,
                "machine": "x86_64",
                "kernel": "6.1",
                "images": {"client": client_image},
            },
        }

    same = {
        "run_id": "r",
        "conditions": {
            "c0": cond("india", "vm-a", "EPYC", "sha256:aa"),
            "c1": cond("germany", "vm-b", "EPYC", "sha256:aa"),
        },
    }  # another name, the same kind
    assert mixed_hosts(calibration_entries([same])) == []
    mixed = {
        "run_id": "r",
        "conditions": {**same["conditions"], "c2": cond("lte", "vm-c", "Xeon", "sha256:bb")},
    }
    (flag,) = mixed_hosts(calibration_entries([mixed]))
    assert flag.startswith("Run r: its conditions ran on 2 kinds of host")
    assert "india, germany on EPYC x2" in flag and "lte on Xeon x2" in flag and "bb" in flag


def _unit_calibration(rtt: float, goodput: float, lost: int) -> dict:
    """A unit's calibration as the executor records it, its checks made as calibrate.py
    makes them (the tolerance strings are what the check reads)."""
    from dataclasses import asdict

    from quicbed.topology.calibrate import (
        GOODPUT_CEILING,
        Check,
        _loss_check,
        goodput_floor,
        rtt_tolerance_ms,
    )

    checks = [
        Check("rtt_median_ms", "both", 80.0, rtt, f"±{rtt_tolerance_ms(80.0):.2f} ms", True),
        Check(
            "goodput_mbit",
            "down",
            20.0,
            goodput,
            f"{goodput_floor(20):.0%}..{GOODPUT_CEILING:.1%} of rate",
            True,
        ),
        _loss_check("down", 1.0, lost, 20000, bursty=False),
    ]
    return {"rtt_ms": rtt, "passed": True, "calibration": {"checks": [asdict(c) for c in checks]}}


def test_units_of_a_condition_that_calibrated_unlike_are_flagged():
    from quicbed.analysis.manifest import units_unlike

    def run(*calibrations: dict) -> dict:
        units = {f"c0u{i}": {"condition": "c0", "calibration": c} for i, c in enumerate(calibrations)}
        units["c1u0"] = {"condition": "c1", "calibration": _unit_calibration(40.0, 10.0, 0)}
        return {"run_id": "r", "conditions": {"c0": {"label": "india loss_pct=1"}}, "units": units}

    # Within tolerance: RTT ±0.80 ms, goodput ±0.21 Mbit/s, loss within its interval's half.
    alike = run(_unit_calibration(80.1, 19.0, 200), _unit_calibration(80.6, 19.15, 215))
    assert units_unlike([alike]) == []
    (flag,) = units_unlike([run(_unit_calibration(80.1, 19.0, 200), _unit_calibration(82.0, 18.2, 300))])
    assert flag.startswith("Run r: the units of c0 (india loss_pct=1) calibrated unlike each other")
    assert "rtt_median_ms 80.1 (c0u0) vs 82 (c0u1)" in flag
    assert (
        "goodput_mbit down 18.2 (c0u1) vs 19 (c0u0)" in flag
        and "loss_pct down 1 (c0u0) vs 1.5 (c0u1)" in flag
    )
    assert units_unlike([{"run_id": "old", "conditions": {}}]) == []  # a run made before units


def test_two_browsers_page_loads_are_never_pooled(results):
    """Chromium's and Firefox's loads are two stacks: each gets its own facet, the transfer
    tools beside them keep theirs, and each browser's load meets the same download."""
    run_dir = results / "browsers"
    run_dir.mkdir()
    rows = [
        {
            "protocol": "quic",
            "workload": "web",
            "object": "media",
            "tool": tool,
            "page_load_time_ms": 400.0,
            "connections": 1,
        }
        for tool in ("chromium", "firefox")
    ] + [
        {
            "protocol": "quic",
            "workload": "web",
            "object": "media",
            "tool": "quic_perf",
            "connection_time_ms": 81.0,
            "download_time_ms": 200.0,
        }
    ]
    (run_dir / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    df, _ = load_runs(["browsers"])
    facets = dict(zip(df["tool"], df["facet"], strict=True))
    assert facets["chromium"] != facets["firefox"] and facets["chromium"].endswith("chromium")
    assert "quic_perf" not in facets["quic_perf"]
    table = pageload_vs_download_table(df)
    assert list(table["perf-tool download median (ms) [95% CI]"].str.startswith("200")) == [True, True]


def _manifest(run: str, experiment: str, **fields) -> dict:
    base = {
        "run_id": run,
        "experiment": experiment,
        "versions": {"CADDY_VERSION": "v2.11.9"},
        "executor": {
            "link_backend": "auto",
            "link_backends_here": {"uml": "runs: boots"},
            "server_images": {"caddy": {"id": "sha256:a"}, "nginx": {"id": "sha256:n"}},
            "capture": {"kinds": [], "server_qlog": {"caddy": "writes"}},
        },
    }
    for key, value in fields.items():  # dotted: executor.server_images.nginx.id
        *path, last = key.split(".")
        node = base
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return base


def test_runs_of_different_experiments_differ_without_a_warning():
    """Issue 48: `make reproduce`'s report opened with 167 "setups differ" lines comparing web,
    cloud and video runs; different experiments are expected to differ."""
    web = _manifest("w", "paper-web", **{"executor.capture.kinds": ["pcap"]})
    video = _manifest("v", "paper-video", **{"versions.CADDY_VERSION": "v2.10.0"})
    assert verdict_differences([web, video], {"caddy"}) == []
    assert manifest_differences([web, video])  # they do differ: the Run section shows it


def test_runs_of_one_experiment_warn_once_per_field_that_bears_on_a_measurement():
    a = _manifest("a", "ci")
    b = _manifest(
        "b",
        "ci",
        **{
            "versions.CADDY_VERSION": "v2.10.0",  # bears
            "executor.server_images.caddy.id": "sha256:b",  # a measured server's image: bears
            "executor.server_images.nginx.id": "sha256:m",  # a server not measured: no
            "executor.link_backends_here.uml": "cannot run here",  # what else could run: no
            "executor.capture.server_qlog.caddy": "other words",  # descriptions: no
        },
    )
    warned = verdict_differences([a, b], {"caddy"})
    assert [w.split(" (")[0] for w in warned] == [
        "Runs of ci differ in executor.server_images.caddy.id",
        "Runs of ci differ in versions.CADDY_VERSION",
    ], warned
    assert "a=v2.11.9; b=v2.10.0" in warned[1]
