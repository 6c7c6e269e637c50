"""`repetitions: {auto: {min, max}}` and `decide:` lines, run without a network: the runner
stops a cell once its lines are decided, says why, and a resume stops where one run would."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli_process import start_synthetic, wait_for_rows

from quicbed.analysis.decisions import CAP, DECIDED, all_decided, cell_verdicts, fewest_rounds
from quicbed.analysis.sequential import direction
from quicbed.experiments import stopping
from quicbed.experiments.commands import cmd_run
from quicbed.experiments.matrix import Trial, conditions, trials
from quicbed.experiments.options import RunOptions
from quicbed.experiments.runner import run_experiment
from quicbed.experiments.schema import ExperimentError, parse_experiment
from quicbed.experiments.store import load_rows, read_manifest
from quicbed.experiments.synthetic import SyntheticExecutor

HEAD = """\
name: seq
profiles:
  - {name: lab, rtt_ms: 80, rate_mbit: 20}
servers: [caddy, nginx]
workload: {kind: web, objects: [index.html]}
"""
# QUIC's 1 RTT against TLS 1.3's 2: every round agrees, so each cell decides at the floor.
DECISIVE = (
    HEAD
    + """\
clients: [{tool: tls_perf, tls: "1.3", http: "2"}, {tool: quic_perf}]
repetitions: {auto: {min: 3, max: 40}}
decide:
  - {metric: connection_time, a: quic, b: tls1.3}
"""
)
# Two QUIC clients that the synthetic executor times alike: nothing to find.
NULL = (
    HEAD
    + """\
clients: [{tool: quic_perf}, {tool: quiche}]
repetitions: {auto: {min: 3, max: 30}}
decide:
  - {metric: connection_time, a: quic-h3, b: quiche}
"""
)


def run(text: str, run_dir: Path, executor: Any = None, resume: bool = False):
    exp = parse_experiment(text, "seq.yaml")
    return run_experiment(exp, executor or SyntheticExecutor(), run_dir, progress=False, resume=resume)


def test_a_decisive_comparison_stops_each_cell_at_the_rounds_that_decided_it(tmp_path: Path) -> None:
    floor = fewest_rounds(0.01)
    # The floor is the test's own: one agreeing round fewer does not decide.
    assert not direction([(1.0, 2.0)] * (floor - 1), 0.01).decided
    assert direction([(1.0, 2.0)] * floor, 0.01).decision == "A < B"
    summary = run(DECISIVE, tmp_path / "r")
    rows = load_rows(tmp_path / "r")[0]
    assert len(rows) == 2 * 2 * floor  # servers x clients x the rounds that decided
    assert {r["repetition"] for r in rows} == set(range(floor))
    assert summary.not_needed == 2 * 2 * (40 - floor) and summary.exit_code == 0
    decisions = read_manifest(tmp_path / "r")["decisions"]
    assert [(d["server"], d["decision"], d["rounds"], d["why"]) for d in decisions] == [
        ("caddy", "A < B", floor, DECIDED),
        ("nginx", "A < B", floor, DECIDED),
    ]


def test_no_difference_runs_to_the_cap_and_says_what_a_decision_would_need(tmp_path: Path) -> None:
    run(NULL, tmp_path / "r")
    rows = load_rows(tmp_path / "r")[0]
    assert len(rows) == 2 * 2 * 30
    decisions = read_manifest(tmp_path / "r")["decisions"]
    assert {d["why"] for d in decisions} == {CAP}
    assert all(d["decision"] == "undecided" and d["rounds"] == 30 for d in decisions)
    assert all(d["a_above_b"] + d["a_below_b"] == 30 for d in decisions)


def test_a_similarity_is_decided_by_its_margin(tmp_path: Path) -> None:
    # A 5 MB download at 20 Mbit/s: 2 s, against which one RTT more is within 10 %.
    text = DECISIVE.replace("{kind: web, objects: [index.html]}", "{kind: cloud, files: [5MB]}")
    text = text.replace(
        "a: quic, b: tls1.3}",
        "a: quic, b: tls1.3}\n  - {metric: download_time, a: quic, b: tls1.3, similar_within: 1.1}",
    )
    run(text, tmp_path / "r")
    decisions = read_manifest(tmp_path / "r")["decisions"]
    similar = [d for d in decisions if "similar" in d["decide"]]
    assert [d["decision"] for d in similar] == ["similar", "similar"]
    # The cell ran until both of its lines were decided: the slower of the two.
    rounds = {
        d["server"]: max(e["rounds"] for e in decisions if e["server"] == d["server"]) for d in decisions
    }
    rows = load_rows(tmp_path / "r")[0]
    assert all(r["repetition"] < rounds[r["server"]] for r in rows)
    assert fewest_rounds(0.01, similar=True) <= min(d["rounds"] for d in similar)


class Interrupting(SyntheticExecutor):
    """Stops the run (as Ctrl-C) at its n-th trial."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def run_trial(self, trial: Trial) -> dict[str, Any]:
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt
        return super().run_trial(trial)


@pytest.mark.parametrize("stop_at", [5, 23, 41])
def test_an_interrupted_run_resumed_stops_where_one_run_does(tmp_path: Path, stop_at: int) -> None:
    whole = DECISIVE.replace("max: 40", "max: 14")
    for name, experiment in (("null", NULL.replace("max: 30", "max: 12")), ("decisive", whole)):
        one = tmp_path / f"{name}-one"
        run(experiment, one)
        parts = tmp_path / f"{name}-parts"
        assert run(experiment, parts, Interrupting(stop_at)).interrupted
        run(experiment, parts, resume=True)

        def kept(run_dir: Path) -> list[tuple[str, float]]:
            rows = load_rows(run_dir)[0]
            return sorted((r["trial_id"], r["connection_time_ms"]) for r in rows)

        assert kept(parts) == kept(one)
        strip = ("evidence",)
        decided = [{k: v for k, v in d.items() if k not in strip} for d in read_manifest(parts)["decisions"]]
        assert decided == [
            {k: v for k, v in d.items() if k not in strip} for d in read_manifest(one)["decisions"]
        ]


def test_a_kill_9_then_resume_reaches_the_uninterrupted_decisions(tmp_path: Path) -> None:
    exp_file = tmp_path / "seq.yaml"
    exp_file.write_text(DECISIVE)
    run(DECISIVE, tmp_path / "one")
    results = tmp_path / "results"
    proc = start_synthetic(exp_file, results, "--delay", "0.02")
    run_dir = wait_for_rows(results, 15)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 15 <= len(load_rows(run_dir)[0]) < 44
    proc = start_synthetic(exp_file, results, "--resume", run_dir.name)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert sorted(r["trial_id"] for r in load_rows(run_dir)[0]) == sorted(
        r["trial_id"] for r in load_rows(tmp_path / "one")[0]
    )
    assert read_manifest(run_dir)["decisions"] == read_manifest(tmp_path / "one")["decisions"]
    assert "not needed (decided)" in out


@pytest.mark.parametrize(
    ("change", "where", "says"),
    [
        ("decide:\n  - {metric: connection_time, a: quic, b: tls1.3}\n", "repetitions.auto", "has none"),
        ("order: blocked\n", "order", "use interleaved or shuffled"),
        ("max: 40", "max", "cannot decide at alpha 0.01"),
        ("b: tls1.3}", "b", "compares quic with itself"),
        ("a: quic,", "a", "no client of this experiment is tls1.2"),
        ("metric: connection_time", "metric", "metric"),
        ("min: 3", "min", "integer"),
    ],
)
def test_an_auto_run_that_could_not_decide_is_refused_with_file_line_and_field(
    change: str, where: str, says: str
) -> None:
    replacements = {
        "decide:\n  - {metric: connection_time, a: quic, b: tls1.3}\n": "",
        "order: blocked\n": None,
        "max: 40": "max: 6",
        "b: tls1.3}": "b: quic}",
        "a: quic,": "a: tls1.2,",
        "metric: connection_time": "metric: jitter",
        "min: 3": "min: three",
    }
    text = DECISIVE
    new = replacements[change]
    text = text + change if new is None else text.replace(change, new)
    with pytest.raises(ExperimentError) as err:
        parse_experiment(text, "seq.yaml")
    message = str(err.value)
    assert message.startswith("seq.yaml:") and where in message and says in message, message


def test_auto_repetitions_refuse_shards(tmp_path: Path, capsys) -> None:
    path = tmp_path / "seq.yaml"
    path.write_text(DECISIVE)
    code = cmd_run(
        path,
        lambda e, d: SyntheticExecutor(),
        RunOptions(results=tmp_path / "res", progress=False, shard="1/2"),
    )
    assert code == 2
    assert "repetitions are auto" in capsys.readouterr().out
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").iterdir())


# Two conditions, so two paths have work; each cell whole on one of them.
TWO_PATHS = DECISIVE.replace(
    "  - {name: lab, rtt_ms: 80, rate_mbit: 20}\n",
    "  - {name: lab, rtt_ms: 80, rate_mbit: 20}\n  - {name: near, rtt_ms: 20, rate_mbit: 20}\n",
)


def _cmd_run(text: str, tmp: Path, executor: Any, **kw: Any) -> Path:
    path, results = tmp / "seq.yaml", tmp / "res"
    path.write_text(text)
    before = set(results.iterdir()) if results.exists() else set()
    assert cmd_run(path, lambda e, d: executor, RunOptions(results=results, progress=False, **kw)) == 0
    (run_dir,) = set(results.iterdir()) - before
    return run_dir


def _decided(run_dir: Path) -> list[tuple]:
    return [
        (d["condition"], d["server"], d["decision"], d["rounds"], d["why"])
        for d in read_manifest(run_dir)["decisions"]
    ]


def test_parallel_paths_stop_each_cell_where_the_serial_run_does(tmp_path: Path) -> None:
    serial = _cmd_run(TWO_PATHS, tmp_path, SyntheticExecutor(), parallel="1")
    parallel = _cmd_run(TWO_PATHS, tmp_path, SyntheticExecutor(), parallel="2")
    floor = fewest_rounds(0.01)
    assert _decided(parallel) == _decided(serial)
    assert {d[3] for d in _decided(parallel)} == {floor}
    rows = load_rows(parallel)[0]
    assert sorted(r["trial_id"] for r in rows) == sorted(r["trial_id"] for r in load_rows(serial)[0])
    assert {r["parallel"] for r in rows} == {2} and len({r["unit"] for r in rows}) == 2
    assert read_manifest(parallel)["parallel"] == {"k": 2, "paths": 2}


class _BoundBeside(SyntheticExecutor):
    """Every trial of condition c1 is CPU-bound when another path runs beside it."""

    def __init__(self) -> None:
        super().__init__()
        self.parent = os.getpid()

    def run_trial(self, trial: Trial) -> dict[str, Any]:
        row = super().run_trial(trial)
        return row | {"cpu_bound": trial.condition.id == "c1" and os.getpid() != self.parent}


def test_a_cpu_bound_parallel_unit_is_decided_again_by_its_rows_measured_alone(
    tmp_path: Path, capsys
) -> None:
    run_dir = _cmd_run(TWO_PATHS, tmp_path, _BoundBeside(), parallel="2")
    floor = fewest_rounds(0.01)
    latest = load_rows(run_dir)[0]
    c1 = [r for r in latest if r["condition"] == "c1"]
    assert c1 and all(r["parallel"] == 1 and r["attempt"] == 2 and not r["cpu_bound"] for r in c1)
    assert {r["repetition"] for r in c1} == set(range(floor))
    assert {d[3] for d in _decided(run_dir)} == {floor}
    out = capsys.readouterr().out
    planned = 2 * 2 * 2 * 40
    assert f"{len(latest)}/{planned} trials, {planned - len(latest)} not needed (decided)" in out


def test_the_dry_run_gives_the_floor_and_the_cap(tmp_path: Path, capsys) -> None:
    path = tmp_path / "seq.yaml"
    path.write_text(DECISIVE)
    assert (
        cmd_run(path, lambda e, d: SyntheticExecutor(), RunOptions(dry=True, results=tmp_path / "res")) == 0
    )
    out = capsys.readouterr().out
    assert "up to 40 repetitions (auto: at least 3" in out
    assert f"if every line decides at its floor (rounds: index.html {fewest_rounds(0.01)})" in out
    assert "at the cap of 40" in out and "quic vs tls1.3 connection_time: which is lower?" in out


def test_the_dry_run_gives_each_objects_floor_from_the_lines_that_judge_it() -> None:
    """Cloud files: small ones pooled three to a round (4), bulk ones two (6), one that no
    line judges at min, at the floors and at the cap alike; the estimate at the floors is
    below the one at the cap."""
    from quicbed.experiments.plan import caps, estimate_seconds, floors

    text = DECISIVE.replace(
        "{kind: web, objects: [index.html]}", "{kind: cloud, files: [5KB, 1MB, 10MB, 50MB, 100MB, 2MB]}"
    )
    text = text.replace("{auto: {min: 3, max: 40}}", "{auto: {min: 3, max: 40, per: server}}")
    text = text.replace(
        "  - {metric: connection_time, a: quic, b: tls1.3}\n",
        "  - {metric: throughput, a: quic, b: tls1.3, objects: [5KB, 1MB, 10MB]}\n"
        "  - {metric: throughput, a: quic, b: tls1.3, objects: [50MB, 100MB]}\n",
    )
    exp = parse_experiment(text, "seq.yaml")
    least = floors(exp)
    assert {obj: n for (_, obj), n in least.items()} == {
        "5KB": 4,
        "1MB": 4,
        "10MB": 4,
        "50MB": 6,
        "100MB": 6,
        "2MB": 3,
    }
    assert estimate_seconds(exp, least) < estimate_seconds(exp)
    # At the cap, too, the object no line judges runs min: the runner stops it there.
    most = caps(exp)
    assert {obj: n for (_, obj), n in most.items()} == {obj: 40 for _, obj in least} | {"2MB": 3}
    assert estimate_seconds(exp, least) < estimate_seconds(exp, most) < estimate_seconds(exp)


def test_the_report_shows_each_decision_with_its_rounds(tmp_path: Path) -> None:
    from quicbed.analysis.report import build_report

    run(NULL.replace("max: 30", "max: 12"), tmp_path / "r")
    html = build_report([tmp_path / "r"], tmp_path / "report").html.read_text()
    assert "Decided as it ran" in html and "not decided at the cap" in html
    label = read_manifest(tmp_path / "r")["conditions"]["c0"]["label"]
    assert label and f"<td>c0 {label}</td>" in html  # the condition by its id and label
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert all(str(d["rounds_needed"]) in html for d in manifest["decisions"] if d.get("rounds_needed"))
    assert "48 trials: 2 of 2 decisions not decided (see Decided as it ran)" in html


def test_the_report_summary_counts_the_trials_a_decided_run_did_not_need(tmp_path: Path) -> None:
    from quicbed.analysis.report import build_report

    run(DECISIVE, tmp_path / "r")
    html = build_report([tmp_path / "r"], tmp_path / "report").html.read_text()
    floor, planned = fewest_rounds(0.01), 2 * 2 * 40
    ran = 2 * 2 * floor
    said = f"{ran} trials of {planned} planned at the cap; {planned - ran} not needed: every cell decided"
    assert said in html


def test_sides_that_overlap_are_refused() -> None:
    text = DECISIVE.replace("b: tls1.3}", "b: quic-h3}")
    with pytest.raises(ExperimentError, match="quic-h3 is both quic and quic-h3"):
        parse_experiment(text, "seq.yaml")


def test_tcp_pools_tls_1_2_and_1_3_and_b_times_scales_b(tmp_path: Path) -> None:
    """`b: tcp` is every TLS-over-TCP client (the paper pools them for video); a side of two
    trials takes their median. QUIC's 1 RTT is below TLS/TCP's (2 and 3 RTT) in every round,
    and below 0.6 x TLS/TCP's 2.5 (1.5 RTT) too, but not below 0.3 x (0.75 RTT)."""
    clients = 'clients: [{tool: tls_perf, tls: "1.2", http: "2"}, '
    clients += '{tool: tls_perf, tls: "1.3", http: "2"}, {tool: quic_perf}]'
    text = DECISIVE.replace('clients: [{tool: tls_perf, tls: "1.3", http: "2"}, {tool: quic_perf}]', clients)
    text = text.replace(
        "  - {metric: connection_time, a: quic, b: tls1.3}\n",
        "  - {metric: connection_time, a: quic, b: tcp}\n"
        "  - {metric: connection_time, a: quic, b: tcp, b_times: 0.6}\n"
        "  - {metric: connection_time, a: quic, b: tcp, b_times: 0.3}\n",
    )
    run(text, tmp_path / "r")
    answers = {(d["decide"], d["server"]): d["answer"] for d in read_manifest(tmp_path / "r")["decisions"]}
    for server in ("caddy", "nginx"):
        assert answers[("quic vs tcp connection_time: which is lower?", server)] == "quic lower"
        assert answers[("quic vs 0.6x tcp connection_time: which is lower?", server)] == "quic lower"
        assert answers[("quic vs 0.3x tcp connection_time: which is lower?", server)] == "0.3x tcp lower"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{metric: connection_time, a: quic, b: tcp}", "no client of this experiment is tcp"),
        ("{metric: connection_time, a: quic-h3, b: quiche, b_times: 0}", "b_times"),
        ("{metric: cpu_client, a: quic-h3, b: quiche, b_times: 1.5}", None),
        ("{metric: startup_delay, a: quic-h3, b: quiche}", None),
    ],
)
def test_a_decide_line_names_a_decidable_metric_a_group_and_a_positive_multiple(
    line: str, says: str | None
) -> None:
    text = NULL.replace("{metric: connection_time, a: quic-h3, b: quiche}", line)
    if says is None:
        assert parse_experiment(text, "seq.yaml").decide
        return
    with pytest.raises(ExperimentError, match=says):
        parse_experiment(text, "seq.yaml")


POOLED = DECISIVE.replace(
    "{kind: web, objects: [index.html]}", "{kind: web, objects: [index.html, pages/news, pages/blog]}"
)
POOLED = POOLED.replace("{auto: {min: 3, max: 40}}", "{auto: {min: 1, max: 40, per: condition}}")


def test_per_condition_one_test_pools_every_cell_and_stops_the_condition(tmp_path: Path) -> None:
    """Six cells (2 servers x 3 objects) give six pairs a round: the floor's 11 pairs come in
    2 rounds, where each cell alone would need 11. The condition is one unit, and its decision
    is one manifest entry for all its cells."""
    exp = parse_experiment(POOLED, "seq.yaml")
    from quicbed.experiments.matrix import conditions
    from quicbed.experiments.shard import condition_units

    assert len(condition_units(exp, conditions(exp)[0])) == 1
    summary = run(POOLED, tmp_path / "r")
    rows = load_rows(tmp_path / "r")[0]
    floor = -(-fewest_rounds(0.01) // 6)
    assert floor == 2 and {r["repetition"] for r in rows} == {0, 1}
    assert len(rows) == 2 * 3 * 2 * floor and summary.not_needed == 2 * 3 * 2 * (40 - floor)
    decided = read_manifest(tmp_path / "r")["decisions"]
    assert [
        (d["server"], d["object"], d["decision"], d["rounds"], d["pairs"], d["why"]) for d in decided
    ] == [("all", "all", "A < B", 2, 11, DECIDED)]


@pytest.mark.parametrize("stop_at", [3, 9, 17])
def test_a_pooled_run_interrupted_and_resumed_stops_where_one_run_does(tmp_path: Path, stop_at: int) -> None:
    one, parts = tmp_path / "one", tmp_path / "parts"
    run(POOLED, one)
    assert run(POOLED, parts, Interrupting(stop_at)).interrupted
    run(POOLED, parts, resume=True)
    assert sorted(r["trial_id"] for r in load_rows(parts)[0]) == sorted(
        r["trial_id"] for r in load_rows(one)[0]
    )
    strip = ("evidence",)
    assert [{k: v for k, v in d.items() if k not in strip} for d in read_manifest(parts)["decisions"]] == [
        {k: v for k, v in d.items() if k not in strip} for d in read_manifest(one)["decisions"]
    ]


def test_per_server_pools_a_servers_objects(tmp_path: Path) -> None:
    """Three objects give each server three pairs a round: 11 pairs in 4 rounds."""
    run(POOLED.replace("per: condition", "per: server"), tmp_path / "r")
    rows = load_rows(tmp_path / "r")[0]
    assert {r["repetition"] for r in rows} == {0, 1, 2, 3}
    decided = read_manifest(tmp_path / "r")["decisions"]
    assert [(d["server"], d["object"], d["rounds"], d["pairs"], d["why"]) for d in decided] == [
        ("caddy", "all", 4, 11, DECIDED),
        ("nginx", "all", 4, 11, DECIDED),
    ]


def counting_verdicts(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """The Stopper's cell_verdicts, counted by (deciding cell, round, lines)."""
    calls: Counter = Counter()

    def counted(lines, rows, alpha, cells, before, per):
        calls[(*cells, before, tuple(lines))] += 1
        return cell_verdicts(lines, rows, alpha, cells, before, per)

    monkeypatch.setattr(stopping, "cell_verdicts", counted)
    return calls


@pytest.mark.parametrize(
    ("per", "rounds", "pooled"), [("server", 4, ["caddy", "nginx"]), ("condition", 2, ["all"])]
)
def test_a_pooled_cells_verdict_is_computed_once_a_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per: str, rounds: int, pooled: list[str]
) -> None:
    """Each object's and client's trial of a round asks the pooled cell alike: one answer a
    round, from min (1) to the round that decided, and the same stops as ever."""
    calls = counting_verdicts(monkeypatch)
    run(POOLED.replace("per: condition", f"per: {per}"), tmp_path / "r")
    assert set(calls.values()) == {1}
    assert sorted((cell.server, before) for cell, before, _ in calls) == [
        (server, r) for server in pooled for r in range(1, rounds + 1)
    ]
    assert {r["repetition"] for r in load_rows(tmp_path / "r")[0]} == set(range(rounds))
    decided = read_manifest(tmp_path / "r")["decisions"]
    assert [(d["server"], d["rounds"], d["pairs"], d["why"]) for d in decided] == [
        (server, rounds, 11, DECIDED) for server in pooled
    ]


def test_a_row_of_an_earlier_round_asks_a_pooled_cell_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer kept for round 4 stands while round 4's rows arrive, and is asked afresh when
    a row of rounds 0-3 does: the answer is the one the rows give, as if never kept."""
    text = POOLED.replace("per: condition", "per: server")
    run(text, tmp_path / "r")
    rows = [r for r in load_rows(tmp_path / "r")[0] if r["server"] == "caddy"]
    # One side of two objects' round 3: two pairs short of the floor's 11.
    late = list({r["object"]: r for r in rows if r["repetition"] == 3}.values())[:2]
    exp = parse_experiment(text, "seq.yaml")
    ask = next(t for t in trials(exp, conditions(exp)[0]) if t.server == "caddy" and t.repetition == 4)
    calls = counting_verdicts(monkeypatch)
    early = [r for r in rows if r not in late]
    stopper = stopping.Stopper(exp, early)
    assert not stopper.not_needed(ask) and not stopper.not_needed(ask) and sum(calls.values()) == 1
    stopper.add({**late[0], "trial_id": "c0/caddy/r4", "repetition": 4})  # round 4's: kept
    assert not stopper.not_needed(ask) and sum(calls.values()) == 1
    for row in late:
        stopper.add(row)
    assert stopper.not_needed(ask) and sum(calls.values()) == 2
    (cell, before, lines), *_ = calls
    assert not all_decided(cell_verdicts(lines, early, exp.auto.alpha, [cell], before, "server"))
    assert all_decided(cell_verdicts(lines, rows, exp.auto.alpha, [cell], before, "server"))


def test_per_is_a_cell_or_a_condition_and_its_floor_counts_the_cells() -> None:
    with pytest.raises(ExperimentError, match=r"repetitions\.auto\.per"):
        parse_experiment(POOLED.replace("per: condition", "per: object"), "seq.yaml")
    # Two rounds can decide six cells pooled, not one cell alone.
    assert parse_experiment(POOLED.replace("max: 40", "max: 2"), "seq.yaml").auto
    with pytest.raises(ExperimentError, match="cannot decide at alpha"):
        parse_experiment(
            POOLED.replace("max: 40", "max: 2").replace("per: condition", "per: cell"), "seq.yaml"
        )


def test_a_line_with_objects_is_judged_in_their_cells_only(tmp_path: Path) -> None:
    """A line on 1MB alone: the 5KB cells have nothing to decide and stop at min; the 1MB
    cells run until it is decided. An object the workload lacks is refused by name."""
    text = DECISIVE.replace("{kind: web, objects: [index.html]}", "{kind: cloud, files: [5KB, 1MB]}")
    text = text.replace("a: quic, b: tls1.3}", "a: quic, b: tls1.3, objects: [1MB]}")
    run(text, tmp_path / "r")
    decided = read_manifest(tmp_path / "r")["decisions"]
    assert [(d["server"], d["object"], d["decide"]) for d in decided] == [
        ("caddy", "1MB", "quic vs tls1.3 connection_time of 1MB: which is lower?"),
        ("nginx", "1MB", "quic vs tls1.3 connection_time of 1MB: which is lower?"),
    ]
    assert {d["rounds"] for d in decided} == {fewest_rounds(0.01)}
    reps = {(r["object"], r["repetition"]) for r in load_rows(tmp_path / "r")[0]}
    assert max(rep for obj, rep in reps if obj == "5KB") == 2  # min: 3
    assert max(rep for obj, rep in reps if obj == "1MB") == fewest_rounds(0.01) - 1
    with pytest.raises(ExperimentError, match=r"decide\[0\]\.objects\[0\].*5KB, 1MB"):
        parse_experiment(text.replace("objects: [1MB]", "objects: [2MB]"), "seq.yaml")


def test_a_line_with_where_is_judged_in_those_conditions_only(tmp_path: Path) -> None:
    """A line `where: {loss_pct: [1]}`: the lossless condition has nothing to decide and stops
    at min, the lossy one runs until decided; an axis or a value the experiment does not run
    is refused by name."""
    text = DECISIVE.replace(
        "servers: [caddy, nginx]\n", "servers: [caddy, nginx]\nsweep: {loss_pct: [0, 1]}\n"
    )
    text = text.replace("a: quic, b: tls1.3}", "a: quic, b: tls1.3, where: {loss_pct: [1]}}")
    run(text, tmp_path / "r")
    decided = read_manifest(tmp_path / "r")["decisions"]
    assert [(d["condition"], d["server"], d["decide"]) for d in decided] == [
        ("c1", "caddy", "quic vs tls1.3 connection_time at loss_pct 1: which is lower?"),
        ("c1", "nginx", "quic vs tls1.3 connection_time at loss_pct 1: which is lower?"),
    ]
    reps = {(r["condition"], r["repetition"]) for r in load_rows(tmp_path / "r")[0]}
    assert max(rep for cond, rep in reps if cond == "c0") == 2  # min: 3
    assert max(rep for cond, rep in reps if cond == "c1") == fewest_rounds(0.01) - 1
    with pytest.raises(
        ExperimentError, match=r"decide\[0\]\.where\.loss_pct\[0\]: 5 is not a loss_pct .*\(0, 1\)"
    ):
        parse_experiment(text.replace("where: {loss_pct: [1]}", "where: {loss_pct: [5]}"), "seq.yaml")
    with pytest.raises(ExperimentError, match=r"decide\[0\]\.where\.rate_mbit: unknown key"):
        parse_experiment(text.replace("where: {loss_pct: [1]}", "where: {rate_mbit: [20]}"), "seq.yaml")
    assert parse_experiment(text.replace("{loss_pct: [1]}", "{profile: [lab]}"), "seq.yaml").decide
