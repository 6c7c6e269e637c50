"""Units and shards (experiments/shard.py, merge.py) with the network-free synthetic executor:
how conditions split into units, plans, runs of each shard, merging them into one run, and
runs made before units."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from quicbed.errors import InputError
from quicbed.experiments.commands import cmd_merge, cmd_run
from quicbed.experiments.matrix import conditions, trials
from quicbed.experiments.options import RunOptions
from quicbed.experiments.schema import load_experiment, parse_experiment
from quicbed.experiments.shard import (
    UNIT_MAX_S,
    UNIT_MIN_S,
    assign,
    cell_seconds,
    condition_units,
    parse_shard,
    plan,
    unit_seconds,
    unit_trials,
    units,
    worker_seconds,
)
from quicbed.experiments.store import load_rows, read_manifest
from quicbed.experiments.synthetic import SyntheticExecutor

# Six conditions: the lossless ones one unit each, the lossy India ones (100 MB at 5 % loss
# takes 10 minutes a file) split into up to four.
TEXT = """
name: shards
profiles: [india, germany]
sweep: {loss_pct: [0, 1, 5]}
servers: [caddy, nginx]
clients: [{tool: tls_perf, tls: ["1.3"]}, quic_perf]
workload: {kind: cloud, files: [1KB, 10MB, 100MB]}
repetitions: 3
seed: SEED
"""
PAPER = Path(__file__).resolve().parents[2] / "experiments" / "paper"
TOTAL = 216


def _file(tmp: Path, seed: int = 1, extra: str = "") -> Path:
    path = tmp / f"shards-{seed}{'-x' if extra else ''}.yaml"
    path.write_text(TEXT.replace("SEED", str(seed)) + extra)
    return path


def _run(file: Path, results: Path, **kw) -> Path:
    before = set(results.iterdir()) if results.exists() else set()
    code = cmd_run(
        file, lambda exp, run_dir: SyntheticExecutor(), RunOptions(results=results, progress=False, **kw)
    )
    assert code == 0
    (new,) = set(results.iterdir()) - before
    return new


def _trial_ids(run_dir: Path) -> set[str]:
    return {r["trial_id"] for r in load_rows(run_dir)[0] if r.get("error") is None}


def _experiments() -> list:
    full = [load_experiment(f) for f in sorted(PAPER.glob("*.yaml"))]
    return [parse_experiment(TEXT.replace("SEED", "1")), *full]


@pytest.mark.parametrize("exp", _experiments(), ids=lambda e: e.name)
def test_units_split_every_condition_deterministically_balanced_and_whole(exp):
    every = units(exp)
    assert [(u.id, u.cells) for u in units(exp)] == [(u.id, u.cells) for u in every]  # deterministic
    placed = [t.trial_id for u in every for t in unit_trials(exp, u)]
    assert sorted(placed) == sorted(t.trial_id for c in conditions(exp) for t in trials(exp, c))
    assert len(placed) == len(set(placed))  # every trial in exactly one unit
    for cond in conditions(exp):
        mine = condition_units(exp, cond)
        assert all({t.condition.id for t in unit_trials(exp, u)} == {cond.id} for u in mine)  # one condition
        for u in mine:  # a unit keeps every client of its cells' repetitions together
            held = unit_trials(exp, u)
            assert len(held) == sum(end - first for _, _, first, end in u.cells) * len(exp.clients)
            # a (server, object) splits into blocks of repetitions only when it is that long
            assert all(cell_seconds(exp, cond, c) <= UNIT_MAX_S or c[3] - c[2] == 1 for c in u.cells)
        whole = [(s, o, 0, exp.repetitions) for s in exp.servers for o in exp.workload.objects]
        blocks = [c for u in mine for c in u.cells if c[2:] != (0, exp.repetitions)]
        assert all(cell_seconds(exp, cond, (s, o, 0, exp.repetitions)) > UNIT_MAX_S for s, o, _, _ in blocks)
        assert len(whole) <= sum(len(u.cells) for u in mine)
        cost = [unit_seconds(exp, u) for u in mine]
        longest_cell = max(cell_seconds(exp, cond, c) for u in mine for c in u.cells)
        # Balanced as the greedy guarantees, once units under UNIT_MIN_S are merged away.
        assert max(cost) - min(cost) <= longest_cell + UNIT_MIN_S
        assert len(mine) == 1 or min(cost) >= UNIT_MIN_S


def test_a_plan_covers_every_unit_once_balanced_and_deterministic():
    exp = parse_experiment(TEXT.replace("SEED", "1"))
    assert len(units(exp)) > len(conditions(exp))  # the lossy conditions split
    for n in (1, 2, 4, 16):
        bins = assign(exp, n)
        ids = [u.id for b in bins for u in b]
        assert sorted(ids) == sorted(u.id for u in units(exp)) and len(bins) == n
        assert [[u.id for u in b] for b in assign(exp, n)] == [[u.id for u in b] for b in bins]
    loads = [sum(unit_seconds(exp, u) for u in b) for b in assign(exp, 2)]
    longest = max(unit_seconds(exp, u) for u in units(exp))
    assert max(loads) - min(loads) <= longest
    for bad in ("0/2", "3/2", "2", "a/b", "1/0"):
        with pytest.raises(InputError, match="--shard"):
            parse_shard(bad)


def test_the_paper_plans_within_an_hour_for_cloud_on_16_workers(capsys):
    """Issue 34's plan: cloud was bounded by its longest condition (4 h 24 on 16 workers)."""
    exp = load_experiment(PAPER / "cloud.yaml")
    bins = assign(exp, 16)
    assert max(worker_seconds(exp, b, shared=False) for b in bins) <= 3600  # Ray: a path per unit
    text = plan(exp, 16, shared=False)
    assert f"{len(units(exp))} unit(s) in 3 condition(s)" in text and "bound: the longest unit" in text


def test_shards_run_one_after_the_other_merge_into_the_unsharded_run(tmp_path, capsys):
    file, results = _file(tmp_path), tmp_path / "results"
    whole = _run(file, results)
    first = _run(file, results, shard="1/2")
    second = _run(file, results, shard="2/2")
    assert not _trial_ids(first) & _trial_ids(second)
    assert cmd_merge([str(first), str(second)], "merged", results) == 0
    merged = results / "merged"
    assert _trial_ids(merged) == _trial_ids(whole)
    manifest = read_manifest(merged)
    assert manifest["status"] == "complete" and manifest["trials_total"] == TOTAL
    ran_in = {u["ran_in"]["shard"] for u in manifest["units"].values()}
    assert ran_in == {"1/2", "2/2"} and all(c["calibration"] for c in manifest["conditions"].values())
    assert sorted(manifest["units"]) == sorted(read_manifest(whole)["units"])
    assert all(u["calibration"] for u in manifest["units"].values())
    # A condition split over both shards: its units ran in different shards.
    split = {u["condition"] for u in manifest["units"].values() if u["ran_in"]["shard"] == "1/2"} & {
        u["condition"] for u in manifest["units"].values() if u["ran_in"]["shard"] == "2/2"
    }
    assert split
    assert {r["run_id"] for r in load_rows(merged)[0]} == {"merged"}
    assert (merged / "rows.parquet").is_file()


def test_mismatched_shards_are_refused_with_the_reason(tmp_path, capsys):
    results = tmp_path / "results"
    one = _run(_file(tmp_path, seed=1), results, shard="1/2")
    other_seed = _run(_file(tmp_path, seed=2), results, shard="2/2")
    other_text = _run(_file(tmp_path, seed=1, extra="description: changed\n"), results, shard="2/2")
    split_three = _run(_file(tmp_path, seed=1), results, shard="2/3")
    whole = _run(_file(tmp_path, seed=1), results)
    capsys.readouterr()
    for shards, reason in (
        ([one, other_seed], "different seed"),
        ([one, other_text], "different experiment text"),
        ([one, split_three], "different splits"),
        ([one, one], "shard 1 twice"),
        ([one, whole], "not a shard"),
    ):
        assert cmd_merge([str(s) for s in shards], None, results) == 2
        out = capsys.readouterr().out
        assert out.startswith("quicbed merge: cannot merge") and reason in out, out


def test_a_missing_shard_merges_as_partial_and_resume_runs_exactly_the_rest(tmp_path, capsys):
    file, results = _file(tmp_path), tmp_path / "results"
    first = _run(file, results, shard="1/3")
    assert cmd_merge([str(first)], "partial", results) == 0
    out = capsys.readouterr().out
    assert "missing shard(s): 2, 3" in out and "still to run" in out
    assert read_manifest(results / "partial")["status"] == "partial"
    assert (
        cmd_run(
            file,
            lambda exp, run_dir: SyntheticExecutor(),
            RunOptions(results=results, resume="partial", progress=False),
        )
        == 0
    )
    exp = parse_experiment(file.read_text())
    every = {t.trial_id for c in conditions(exp) for t in trials(exp, c)}
    rows = [json.loads(line) for line in (results / "partial" / "rows.jsonl").open()]
    ids = [r["trial_id"] for r in rows]
    assert set(ids) == every and len(ids) == len(every)  # each trial exactly once


def test_a_shard_resumes_as_itself(tmp_path, capsys):
    file, results = _file(tmp_path), tmp_path / "results"
    shard = _run(file, results, shard="1/2")
    assert (
        cmd_run(
            file,
            lambda exp, run_dir: SyntheticExecutor(),
            RunOptions(results=results, resume=shard.name, shard="2/2", progress=False),
        )
        == 1
    )
    assert "is not shard 2/2 (it holds shard 1/2)" in capsys.readouterr().out


CLUSTER = Path(__file__).resolve().parents[2] / "docs" / "cluster"


def test_the_scheduler_examples_parse_and_name_every_shard_once():
    import subprocess

    import yaml

    assert subprocess.run(["bash", "-n", CLUSTER / "slurm-array.sbatch"]).returncode == 0
    sbatch = (CLUSTER / "slurm-array.sbatch").read_text()
    assert '--shard "${SLURM_ARRAY_TASK_ID}/${count}"' in sbatch  # array ids are 1..N
    workflow = yaml.safe_load((CLUSTER / "github-matrix.yml").read_text())
    shards = workflow["jobs"]["shard"]["strategy"]["matrix"]["shard"]
    steps = " ".join(s.get("run", "") for s in workflow["jobs"]["shard"]["steps"])
    assert shards == list(range(1, len(shards) + 1))
    assert f"--shard ${{{{ matrix.shard }}}}/{len(shards)}" in steps
    job = yaml.safe_load((CLUSTER / "k8s-indexed-job.yaml").read_text())
    spec = job["spec"]
    assert (job["kind"], spec["completionMode"]) == ("Job", "Indexed")
    args = spec["template"]["spec"]["containers"][0]["args"][0]
    # JOB_COMPLETION_INDEX counts from 0; shards from 1
    assert f'--shard "$((JOB_COMPLETION_INDEX + 1))/{spec["completions"]}"' in args
    assert all("quicbed run" in text for text in (sbatch, args, steps))


def _before_units(
    run_dir: Path, keep: Callable[[dict], bool], shard_conditions: list[str] | None = None, index: int = 1
) -> None:
    """Make `run_dir` look as a run made before units: no unit in its rows or manifest (and a
    shard that holds whole conditions), with only the rows `keep` says."""
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").open()]
    kept = [{k: v for k, v in r.items() if k != "unit"} for r in rows if keep(r)]
    (run_dir / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (run_dir / "rows.parquet").unlink()
    manifest = read_manifest(run_dir)
    del manifest["units"]
    if shard_conditions is not None:
        manifest["shard"] = {"index": index, "count": 2, "conditions": shard_conditions, "trials_all": TOTAL}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def _resume(file: Path, results: Path, run_dir: Path) -> int:
    return cmd_run(
        file,
        lambda exp, run_dir: SyntheticExecutor(),
        RunOptions(results=results, resume=run_dir.name, progress=False),
    )


def test_a_run_made_before_units_resumes_the_rest_in_units(tmp_path, capsys):
    file, results = _file(tmp_path), tmp_path / "results"
    old = _run(file, results)
    _before_units(old, lambda r: r["condition"] in ("c0", "c1"))
    assert _resume(file, results, old) == 0
    rows = [json.loads(line) for line in (old / "rows.jsonl").open()]
    exp = parse_experiment(file.read_text())
    assert sorted(r["trial_id"] for r in rows) == sorted(
        t.trial_id for u in units(exp) for t in unit_trials(exp, u)
    )
    assert {r.get("unit") is None for r in rows if r["condition"] in ("c0", "c1")} == {True}
    assert all(r["unit"] for r in rows if r["condition"] not in ("c0", "c1"))
    manifest = read_manifest(old)
    assert manifest["status"] == "complete" and sorted(manifest["units"]) == sorted(u.id for u in units(exp))


def test_a_shard_made_before_units_resumes_its_conditions_and_does_not_merge_with_units(tmp_path, capsys):
    file, results = _file(tmp_path), tmp_path / "results"
    old = _run(file, results, shard="1/2")
    _before_units(old, lambda r: False, shard_conditions=["c0", "c2"])
    assert _resume(file, results, old) == 0
    rows = load_rows(old)[0]
    exp = parse_experiment(file.read_text())
    held = {t.trial_id for c in conditions(exp) if c.id in ("c0", "c2") for t in trials(exp, c)}
    assert {r["trial_id"] for r in rows} == held and len(rows) == len(held)
    new = _run(file, results, shard="2/2")
    capsys.readouterr()
    assert cmd_merge([str(old), str(new)], None, results) == 2
    assert "made before units" in capsys.readouterr().out


def test_a_shard_of_units_this_code_does_not_make_is_refused_in_one_line(tmp_path, capsys):
    file, results = _file(tmp_path), tmp_path / "results"
    shard = _run(file, results, shard="1/2")
    manifest = read_manifest(shard)
    manifest["shard"]["units"] = ["c0u7"]  # as another UNIT_MIN_S would have split it
    (shard / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert _resume(file, results, shard) == 1  # as the other refused resumes (StoreError)
    out = capsys.readouterr().out
    assert "is a shard of units this code does not make (c0u7" in out and "Traceback" not in out


def test_shards_made_before_units_still_merge_by_condition(tmp_path, capsys):
    file, results = _file(tmp_path), tmp_path / "results"
    whole = _run(file, results)
    halves = (["c0", "c2", "c4"], ["c1", "c3", "c5"])
    old = []
    for index, mine in enumerate(halves, 1):
        copy = results / f"old-shard-{index}"
        shutil.copytree(whole, copy)
        _before_units(copy, lambda r, mine=mine: r["condition"] in mine, shard_conditions=mine, index=index)
        old.append(copy)
    assert cmd_merge([str(d) for d in old], "merged-old", results) == 0
    assert _trial_ids(results / "merged-old") == _trial_ids(whole)
    assert read_manifest(results / "merged-old")["status"] == "complete"


DECIDED_BY_SHARDS = """
name: decided
profiles: [india, germany]
servers: [caddy, nginx]
clients: [{tool: tls_perf, tls: ["1.3"]}, quic_perf]
workload: {kind: web, objects: [index.html]}
repetitions: 12
decide:
  - {metric: connection_time, a: quic, b: tls1.3}
"""


def test_merged_shards_decide_every_cell_as_the_unsharded_run_does(tmp_path, capsys):
    file, results = tmp_path / "decided.yaml", tmp_path / "results"
    file.write_text(DECIDED_BY_SHARDS)
    whole = _run(file, results)
    shards = [_run(file, results, shard=f"{i}/2") for i in (1, 2)]

    def cells(run: Path) -> list[tuple]:
        return [(d["server"], d["decision"], d["rounds"], d["why"]) for d in read_manifest(run)["decisions"]]

    assert all(len(cells(s)) < len(cells(whole)) for s in shards)  # each shard decided its own
    assert cmd_merge([str(s) for s in shards], "merged", results) == 0
    assert cells(results / "merged") == cells(whole)
    assert {d[1] for d in cells(whole)} == {"A < B"}
