"""Experiment files: schema errors, the expectation language, matrix expansion, dry run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from bad_experiments import BAD, expected_lines

from quicbed.analysis.expectations import Ref, compile_expectation, evaluate, statistic
from quicbed.clients.tools import TOOLS
from quicbed.experiments import links
from quicbed.experiments.executor import TestbedExecutor, trial_cpu_bound
from quicbed.experiments.matrix import conditions, count_per_condition, trials
from quicbed.experiments.plan import dry_run, trial_seconds
from quicbed.experiments.schema import (
    ExperimentError,
    load_experiment,
    parse_experiment,
)

EXPECTED = expected_lines()

GOOD = """\
name: demo
profiles:
  - {name: lab, rtt_ms: 80, rate_mbit: 20}
  - name: asym
    rtt_ms: 40
    down: {rate_mbit: 10}
    up: {rate_mbit: 2, loss_pct: 1}
sweep:
  loss_pct: [0, 5]
  server.tcp_cc: [cubic, bbr]
servers: [caddy, nginx]
clients:
  - {tool: tls_perf, tls: [1.2, 1.3], http: 2}
  - quic_perf
workload: {kind: web, objects: [index.html, sample.png]}
repetitions: 4
expect:
  - "quic.connection_time.median / rtt < 1.15"
quick:
  repetitions: 1
  sweep: {loss_pct: [0]}
"""


@pytest.fixture(autouse=True)
def fixed_profiles(monkeypatch):
    # The corpus' messages list the known profiles; pin them so topology edits don't matter.
    monkeypatch.setattr(links, "available_profiles", lambda: ["germany", "india"])


def test_corpus_is_big_and_complete():
    files = sorted(p.name for p in BAD.glob("*.yaml"))
    assert len(files) >= 20
    assert sorted(EXPECTED) == files


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_experiment_gives_exact_one_line_error(name, monkeypatch):
    monkeypatch.chdir(BAD)
    with pytest.raises(ExperimentError) as err:
        load_experiment(name)
    assert str(err.value) == EXPECTED[name]
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 2


def test_unreadable_file_is_located_error(tmp_path):
    with pytest.raises(ExperimentError, match=r"^.*/missing.yaml:1: file: cannot read"):
        load_experiment(tmp_path / "missing.yaml")


def test_good_experiment_parses_and_normalises():
    exp = parse_experiment(GOOD)
    assert [c.label for c in exp.clients] == ["tls1.2-h2", "tls1.3-h2", "quic-h3"]
    assert [c.protocol for c in exp.clients] == ["tls1.2", "tls1.3", "quic"]
    asym = exp.profiles[1]
    assert (asym.rtt_ms, asym.down.rate_mbit, asym.up.rate_mbit, asym.up.loss_pct) == (40, 10, 2, 1)
    assert exp.repetitions == 4 and not exp.quick
    quick = parse_experiment(GOOD, quick=True)
    assert quick.quick and quick.repetitions == 1 and quick.sweep["loss_pct"] == [0]
    assert quick.matrix_hash() != exp.matrix_hash()


def test_repository_experiments_parse(monkeypatch):
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.undo()
    for path in (repo / "experiments").rglob("*.yaml"):
        exp = load_experiment(path)
        # CI's experiments judge physics; a paper experiment may have none (the loss sweep:
        # nothing holds trial by trial under 10 % loss), its findings are the report's claims.
        assert exp.expect or path.parent.name == "paper", path


# --- expectations -------------------------------------------------------------------------------


def test_expectation_names_with_dots_and_dashes():
    e = compile_expectation("1.8 < tls1.3-h2.ttfb.p90 / rtt <= caddy-debian.tls13.ttfb.max")
    assert e.refs == (
        Ref(None, "tls1.3-h2", "ttfb", "p90"),
        Ref("caddy-debian", "tls1.3", "ttfb", "max"),
    )


def test_evaluate_chained_and_missing_data():
    e = compile_expectation("0.9 < quic.connection_time.median / rtt < 1.15")
    values = {"quic": 82.0}
    ok = evaluate(e, lambda r: values.get(r.group, math.nan), rtt=80, rate=20)
    assert ok.passed and ok.detail == "0.9 < 1.025 < 1.15"
    values = {}
    assert not evaluate(e, lambda r: values.get(r.group, math.nan), rtt=80, rate=20).passed


def test_protocol_checks_are_judged_over_their_columns():
    import pandas as pd

    from quicbed.analysis.expectations import judge

    rows = pd.DataFrame(
        [
            {
                "protocol": "quic",
                "client": "quic-h3",
                "server": "caddy",
                "server_http": 3.0,
                "server_tcp_retrans": 0,
                "resumed": False,
                "early_data_bytes": 0,
            },
            {
                "protocol": "quic",
                "client": "quic-h3-resume",
                "server": "caddy",
                "server_http": 3.0,
                "server_tcp_retrans": 0,
                "resumed": True,
                "early_data_bytes": 61,
            },
            {
                "protocol": "tls1.3",
                "client": "tls1.3-h2",
                "server": "caddy",
                "server_http": 2.0,
                "server_tcp_retrans": 4,
                "resumed": False,
                "early_data_bytes": None,
            },
        ]
    )

    def holds(text: str) -> bool:
        return judge(compile_expectation(text), rows, 80, 20).passed

    assert holds("quic.server_http.min == 3") and not holds("tls1.3.server_http.min == 3")
    assert holds("quic-h3-resume.resumed.min == 1") and not holds("quic.resumed.min == 1")
    assert holds("caddy.quic-h3-resume.early_data.min > 0")
    assert not holds("tls1.3.tcp_retrans.max == 0")  # 4 retransmissions: a storm fails
    assert holds("quic.tcp_retrans.max == 0")
    # Not a compare metric: a protocol check is judged, never compared.
    from quicbed.rowschema import CHECKS, METRICS

    assert not set(CHECKS) & set(METRICS)


@pytest.mark.parametrize(
    "text",
    [
        "(lambda: 1)() < 2",
        "quic.ttfb.median < [1][0]",
        "True < quic.ttfb.median",
        "quic.ttfb.median < 'a'",
        "quic.ttfb.median if 1 else 2 < 3",
        "rtt < 1 and rtt > 0",
    ],
)
def test_expectation_rejects_anything_but_arithmetic(text):
    with pytest.raises(ValueError):
        compile_expectation(text)


def test_statistics():
    xs = [5, 1, 3, 9, 7, 2]
    assert [statistic(xs, s) for s in ("median", "p25", "p90", "min", "max", "mean", "count")] == [
        4,
        2.25,
        8,
        1,
        9,
        4.5,
        6,
    ]
    assert math.isnan(statistic([], "median")) and statistic([], "count") == 0


# --- matrix -------------------------------------------------------------------------------------


def test_matrix_counts_and_condition_links():
    exp = parse_experiment(GOOD)
    conds = conditions(exp)
    assert len(conds) == 2 * 2 * 2  # profiles x loss x tcp_cc
    assert count_per_condition(exp) == 2 * 3 * 2 * 4
    c = conds[3]  # lab, loss 5, bbr
    assert (c.profile, c.overrides, c.params) == (
        "lab",
        {"loss_pct": 5.0},
        {"server.tcp_cc": "bbr"},
    )
    assert c.link.down.loss_pct == c.link.up.loss_pct == 5
    assert all(len(trials(exp, c)) == count_per_condition(exp) for c in conds)


def test_interleaved_order_alternates_protocols():
    exp = parse_experiment(GOOD)
    ts = trials(exp, conditions(exp)[0])
    assert [t.trial_id for t in ts[:7]] == [
        "c0/caddy/tls1.2-h2/index.html/r0",
        "c0/caddy/tls1.3-h2/index.html/r0",
        "c0/caddy/quic-h3/index.html/r0",
        "c0/nginx/tls1.2-h2/index.html/r0",
        "c0/nginx/tls1.3-h2/index.html/r0",
        "c0/nginx/quic-h3/index.html/r0",
        "c0/caddy/tls1.2-h2/sample.png/r0",
    ]
    protocols = [t.client.protocol for t in ts]
    assert all(a != b for a, b in zip(protocols, protocols[1:], strict=False))


@pytest.mark.parametrize("order", ["blocked", "shuffled"])
def test_orders_keep_the_same_stable_ids(order):
    base = parse_experiment(GOOD)
    other = parse_experiment(GOOD + f"order: {order}\n")
    for cb, co in zip(conditions(base), conditions(other), strict=True):
        ids_b, ids_o = (
            [t.trial_id for t in trials(base, cb)],
            [t.trial_id for t in trials(other, co)],
        )
        assert ids_b != ids_o and sorted(ids_b) == sorted(ids_o)
        assert len(set(ids_o)) == len(ids_o)
        assert ids_o == [t.trial_id for t in trials(other, co)]  # deterministic
    if order == "blocked":
        first = trials(other, conditions(other)[0])[:4]
        assert [t.repetition for t in first] == [0, 1, 2, 3]


def test_dry_run_counts_and_estimate():
    text = dry_run(parse_experiment(GOOD))
    assert "= 48 trials" in text and "8 conditions x 48 = 384 trials" in text
    assert "estimated duration: 0h" in text


def test_estimate_under_loss_uses_the_loss_responsive_rate():
    """At 10 % loss on india a 1 MB transfer takes about 15 s (0.56 Mbit/s), not 0.4 s."""
    text = (Path(__file__).parents[2] / "experiments" / "ci" / "loss-response.yaml").read_text()
    lossy = parse_experiment(text)
    clean = parse_experiment(text.replace("loss_pct: [10]", "loss_pct: [0]"))
    (lossy_cond,), (clean_cond,) = conditions(lossy), conditions(clean)
    tls = lossy.clients[0]
    assert trial_seconds(lossy, lossy_cond, tls, "1MB") > 14
    assert trial_seconds(clean, clean_cond, tls, "1MB") < 2


def test_cloud_workload_and_what_cannot_run_yet():
    cloud = parse_experiment(
        GOOD.replace("{kind: web, objects: [index.html, sample.png]}", "{kind: cloud, files: [1KB, 2GB]}")
    )
    assert cloud.workload.objects == ("1KB", "2GB") and "2GB" in dry_run(cloud)
    # The video workload runs with the video clients only.
    video = GOOD.replace("{kind: web, objects: [index.html, sample.png]}", "{kind: video, duration_s: 60}")
    with pytest.raises(ExperimentError, match="tls_perf cannot run the video workload"):
        parse_experiment(video)
    video = video.replace("  - quic_perf", "  - {tool: video_download, protocol: quic}")
    video = "\n".join(line for line in video.splitlines() if "tls_perf" not in line)
    # video_download fetches the manifest's streams for the workload's duration
    downloaded = parse_experiment(video.replace("protocol: quic}", "protocol: [quic, tls1.2]}"))
    assert [c.label for c in downloaded.clients] == ["video-quic", "video-tls1.2"]
    assert downloaded.timeout_s == 60 + 60
    argv = TestbedExecutor._tool_argv(trials(downloaded, conditions(downloaded)[0])[-1], "10.77.2.10")
    assert argv[0] == "video_download"
    assert argv[argv.index("--url") + 1] == "https://server.quicbed/video/dash/manifest.mpd"
    assert argv[-6:] == ["--transport", "tcp", "--tls", "1.2", "--duration", "60"]
    argv = TestbedExecutor._tool_argv(trials(downloaded, conditions(downloaded)[0])[0], "10.77.2.10")
    assert argv[-6:] == ["--transport", "quic", "--backend", "ngtcp2", "--duration", "60"]
    # The browser loads pages: one variant per protocol, its argv the client contract's.
    chromium = parse_experiment(
        GOOD.replace("  - quic_perf", "  - {tool: chromium, protocol: [quic, tls1.3, tls1.2]}")
    )
    labels = [c.label for c in chromium.clients if c.tool == "chromium"]
    assert labels == ["chromium-quic", "chromium-tls1.3", "chromium-tls1.2"]
    trial = trials(chromium, conditions(chromium)[0])[-1]
    assert trial.client.label == "chromium-tls1.2"
    argv = TestbedExecutor._tool_argv(trial, "10.77.2.10")
    assert argv[0] == "browser_perf" and argv[-4:] == ["--protocol", "tls1.2", "--browser", "chromium-full"]
    assert argv[argv.index("--resolve") + 1] == "server.quicbed:443:10.77.2.10"
    # ... and plays video in dash.js for the workload's duration.
    played = parse_experiment(
        video.replace("{tool: video_download, protocol: quic}", "{tool: chromium, protocol: tls1.3}")
    )
    assert played.workload.objects == ("dash",) and played.timeout_s == 60 + 60
    argv = TestbedExecutor._tool_argv(trials(played, conditions(played)[0])[0], "10.77.2.10")
    assert argv[argv.index("--url") + 1] == "https://server.quicbed/video/dash/manifest.mpd"
    assert argv[-2:] == ["--duration", "60"] and argv[argv.index("--timeout") + 1] == "120"
    with pytest.raises(ExperimentError, match="not longer than the 60 s of video"):
        parse_experiment(played.text + "\ntimeout_s: 60\n")
    # ... and downloads a cloud file, told so by the workload (the perf tools are not).
    fetched = parse_experiment(
        GOOD.replace("  - quic_perf", "  - chromium").replace(
            "{kind: web, objects: [index.html, sample.png]}", "{kind: cloud, files: [1KB]}"
        )
    )
    argv = TestbedExecutor._tool_argv(trials(fetched, conditions(fetched)[0])[-1], "10.77.2.10")
    assert argv[0] == "browser_perf" and argv[-2:] == ["--workload", "cloud"]
    with pytest.raises(ExperimentError, match="firefox cannot run the cloud workload"):
        parse_experiment(
            GOOD.replace("  - quic_perf", "  - firefox").replace(
                "{kind: web, objects: [index.html, sample.png]}", "{kind: cloud, files: [1KB]}"
            )
        )


def test_condition_link_is_the_topology_profile_with_sweep_applied():
    exp = parse_experiment(GOOD.replace("loss_pct: [0, 5]", "rtt_ms: [100]"))
    cond = conditions(exp)[2]  # asym, rtt 100, cubic
    assert (cond.profile, cond.overrides, cond.params) == (
        "asym",
        {"rtt_ms": 100.0},
        {"server.tcp_cc": "cubic"},
    )
    link = cond.link
    assert (link.rtt_ms, link.down.delay_ms, link.down.rate_mbit, link.up.rate_mbit) == (
        100,
        50,
        10,
        2,
    )
    assert link.up.loss_pct == 1 and link.source == "inline in the experiment file"


def test_readme_example_is_a_valid_experiment():
    readme = (Path(__file__).resolve().parents[2] / "experiments/README.md").read_text()
    example = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    exp = parse_experiment(example, "README.md")
    assert len(conditions(exp)) == 3 * 4 * 2 * 2 and exp.expect


def test_quic_backend_and_key_exchange_are_client_variants():
    text = GOOD.replace(
        "- quic_perf", "- {tool: quic_perf, backend: [libcurl, ngtcp2], " "kex: [x25519, x25519mlkem768]}"
    )
    assert text != GOOD
    exp = parse_experiment(text)
    quic = [c for c in exp.clients if c.tool == "quic_perf"]
    assert [c.label for c in quic] == ["quic-h3", "quic-h3-pq", "quic-h3-ngtcp2", "quic-h3-ngtcp2-pq"]
    assert {c.protocol for c in quic} == {"quic"}
    cond = conditions(exp)[0]
    trial = next(t for t in trials(exp, cond) if t.client.label == "quic-h3-ngtcp2-pq")
    argv = TestbedExecutor._tool_argv(trial, "10.77.2.10")
    assert argv[argv.index("--backend") + 1] == "ngtcp2"
    assert argv[argv.index("--groups") + 1] == "X25519MLKEM768:X25519:secp256r1"


def test_resume_is_a_client_variant_that_passes_the_flag():
    text = GOOD.replace("- quic_perf", '- {tool: quic_perf, resume: ["no", "yes"]}')
    assert text != GOOD
    exp = parse_experiment(text)
    quic = [c for c in exp.clients if c.tool == "quic_perf"]
    assert [c.label for c in quic] == ["quic-h3", "quic-h3-resume"]
    by_label = {t.client.label: t for t in trials(exp, conditions(exp)[0])}
    assert "--resume" in TestbedExecutor._tool_argv(by_label["quic-h3-resume"], "10.77.2.10")
    assert "--resume" not in TestbedExecutor._tool_argv(by_label["quic-h3"], "10.77.2.10")


def test_a_trial_calls_its_tool_with_the_client_contract():
    """The fixed arguments of every client (clients/tools.py), then the variant's flags."""
    exp = parse_experiment(GOOD)
    trial = next(t for t in trials(exp, conditions(exp)[0]) if t.client.label == "tls1.2-h2")
    assert TestbedExecutor._tool_argv(trial, "10.77.2.10") == [
        "tls_perf",
        "--url",
        f"https://server.quicbed/web/{trial.object}",
        "--resolve",
        "server.quicbed:443:10.77.2.10",
        "--cacert",
        "/etc/quicbed/pki/ca.pem",
        "-n",
        "1",
        "--cpu",
        "--timeout",
        str(int(trial.timeout_s)),
        "--tls",
        "1.2",
        "--http",
        "2",
        "--groups",
        "X25519:secp256r1",
    ]


PLAYER = """name: p
profiles: [india]
servers: [nginx]
clients:
  - {tool: chromium, protocol: quic}
workload:
  kind: video
  duration_s: 30
  player:
    buffer_time_default_s: 6
    abr_rules: [throughputRule, bolaRule]
    max_bitrate_kbps: 1200
    auto_switch_bitrate: true
"""


def test_player_settings_reach_the_browser_as_dashjs_settings_and_nothing_else():
    exp = parse_experiment(PLAYER)
    assert dict(exp.workload.settings)["abr_rules"] == ("throughputRule", "bolaRule")
    argv = TestbedExecutor._tool_argv(trials(exp, conditions(exp)[0])[0], "10.77.2.10")
    given = json.loads(argv[argv.index("--player-settings") + 1])["streaming"]
    assert given["buffer"] == {"bufferTimeDefault": 6}
    assert given["abr"]["maxBitrate"] == {"video": 1200}
    assert given["abr"]["autoSwitchBitrate"] == {"video": True}
    assert {r for r, v in given["abr"]["rules"].items() if v["active"]} == {"throughputRule", "bolaRule"}
    # A tool that plays no player gets the duration and never the player's settings.
    assert TOOLS["video_download"].argv(
        "u", "r", "c", 90, {"protocol": "quic"}, {"--duration": "30", "--player-settings": "{}"}
    )[-2:] == ["--duration", "30"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("buffer_time_default_s: 6", "buffer_time_default_s: 0 is out of range [1, 120]"),
        ("abr_rules: [throughputRule, bolaRule]", "abr_rules[1]: unknown ABR rule 'bola'"),
        ("auto_switch_bitrate: true", "auto_switch_bitrate: expected true or false, got 'yes'"),
        ("max_bitrate_kbps: 1200", "player.max_bitrate: unknown key"),
        ("- {tool: chromium, protocol: quic}", "workload.player: no client of this experiment takes"),
    ],
)
def test_bad_player_settings_are_one_located_line(change: str, message: str):
    bad = {
        "buffer_time_default_s: 6": "buffer_time_default_s: 0",
        "abr_rules: [throughputRule, bolaRule]": "abr_rules: [throughputRule, bola]",
        "auto_switch_bitrate: true": "auto_switch_bitrate: 'yes'",
        "max_bitrate_kbps: 1200": "max_bitrate: 1200",
        "- {tool: chromium, protocol: quic}": "- {tool: video_download, protocol: quic}",
    }
    text = PLAYER.replace(change, bad[change])
    with pytest.raises(ExperimentError, match=re.escape(message)) as info:
        parse_experiment(text, "p.yaml")
    assert str(info.value).startswith("p.yaml:") and "\n" not in str(info.value)


def test_condition_summary_shows_what_the_rows_measured():
    from types import SimpleNamespace

    from quicbed.experiments.runner import condition_summary

    cond = SimpleNamespace(id="c0", label="india loss_pct=5")
    played = {
        "condition": "c0",
        "protocol": "quic",
        "error": None,
        "connection_time_ms": 92.4,
        "ttfb_ms": 180.0,
        "startup_delay_ms": 310.0,
        "stall_total_ms": 0.0,
    }
    line = condition_summary(cond, [played, {**played, "protocol": "tls1.3", "error": "x"}])
    assert line == (
        "c0 india loss_pct=5: quic conn 92 ttfb 180 startup 310 stall 0 ms | "
        "tls1.3 no successful trials | 1 failed"
    )


@pytest.mark.parametrize(
    ("row", "client_pct", "server_pct", "bound"),
    [
        ({}, 95.0, 10.0, True),  # a perf tool: its container's share of one core
        ({"cpu_bound": False}, 140.0, 10.0, False),  # the browser judged its load: not bound
        ({"cpu_bound": True}, 40.0, 10.0, True),
        ({"cpu_bound": False}, 140.0, 95.0, True),  # the server's share still counts
    ],
)
def test_a_tool_that_judges_its_load_speaks_for_the_client(row, client_pct, server_pct, bound) -> None:
    assert trial_cpu_bound(row, {"client": client_pct, "server": server_pct}, "client") is bound
