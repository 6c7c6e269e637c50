"""Shards for batch schedulers (experiments/shard.py, merge.py) with the network-free synthetic
executor: plans, runs of each shard, and merging them into one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quicbed.errors import InputError
from quicbed.experiments.commands import cmd_merge, cmd_run
from quicbed.experiments.matrix import conditions, trials
from quicbed.experiments.schema import parse_experiment
from quicbed.experiments.shard import assign, condition_seconds, parse_shard
from quicbed.experiments.store import load_rows, read_manifest
from quicbed.experiments.synthetic import SyntheticExecutor

TEXT = """
name: shards
profiles: [india, germany]
sweep: {loss_pct: [0, 1, 5]}
servers: [caddy]
clients: [{tool: tls_perf, tls: ["1.3"]}, quic_perf]
workload: {kind: web, objects: [index.html]}
repetitions: 3
seed: SEED
"""


def _file(tmp: Path, seed: int = 1, extra: str = "") -> Path:
    path = tmp / f"shards-{seed}{'-x' if extra else ''}.yaml"
    path.write_text(TEXT.replace("SEED", str(seed)) + extra)
    return path


def _run(file: Path, results: Path, **kw) -> Path:
    before = set(results.iterdir()) if results.exists() else set()
    code = cmd_run(file, lambda exp, run_dir: SyntheticExecutor(), results=results, progress=False, **kw)
    assert code == 0
    (new,) = set(results.iterdir()) - before
    return new


def _trial_ids(run_dir: Path) -> set[str]:
    return {r["trial_id"] for r in load_rows(run_dir)[0] if r.get("error") is None}


def test_a_plan_covers_every_condition_once_balanced_and_deterministic():
    exp = parse_experiment(TEXT.replace("SEED", "1"))
    for n in (1, 2, 4, 16):
        bins = assign(exp, n)
        ids = [c.id for b in bins for c in b]
        assert sorted(ids) == sorted(c.id for c in conditions(exp)) and len(bins) == n
        assert assign(exp, n) == bins  # every machine computes the same plan
    loads = [sum(condition_seconds(exp, c) for c in b) for b in assign(exp, 2)]
    longest = max(condition_seconds(exp, c) for c in conditions(exp))
    assert max(loads) - min(loads) <= longest
    for bad in ("0/2", "3/2", "2", "a/b", "1/0"):
        with pytest.raises(InputError, match="--shard"):
            parse_shard(bad)


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
    assert manifest["status"] == "complete" and manifest["trials_total"] == 36
    ran_in = {c["ran_in"]["shard"] for c in manifest["conditions"].values()}
    assert ran_in == {"1/2", "2/2"} and all(c["calibration"] for c in manifest["conditions"].values())
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
            file, lambda exp, run_dir: SyntheticExecutor(), results=results, resume="partial", progress=False
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
            results=results,
            resume=shard.name,
            shard="2/2",
            progress=False,
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
