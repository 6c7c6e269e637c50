"""What `quicbed run` and `quicbed check` do, as functions returning exit codes.

Every expected failure (bad experiment file, unusable results directory, interruption) ends in
one line on the console and an exit code, never a traceback:
0 ok, 1 failed trials / skipped conditions / failed expectations / store error, 2 bad input,
130 interrupted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from quicbed import paths, rowschema
from quicbed.errors import InputError, QuicbedError

from . import cluster
from .check import check
from .merge import merge_runs
from .options import RunOptions
from .parallel import ParallelLocal, auto_parallel, parallel_plan, parse_parallel
from .plan import dry_run, parse_paths_per_worker, paths_per_worker
from .runner import Dispatcher, Executor, RunAborted, run_experiment
from .schema import Experiment, load_experiment, parse_capture
from .shard import Shard, parse_shard, plan
from .store import load_rows, new_run_id, read_manifest


def cmd_run(
    file: str | Path,
    make_executor: Callable[[Experiment, Path], Executor],
    opts: RunOptions | None = None,
    on_run_dir: Callable[[Path], None] | None = None,
) -> int:
    """`quicbed run FILE [--resume ID [--retry-failed]] [--dry-run] [--check] [--quick]
    [--capture qlog,pcap,keys] ...`, as RunOptions (experiments/options.py).

    make_executor(exp, run_dir) is called once, after the file validated and unless dry; the
    options' `path` belongs to the executor (pass it through your factory). on_run_dir(run_dir)
    is told the run directory before anything runs (reproduce names it in its resume hints)."""
    opts = opts or RunOptions()
    console = Console(highlight=False, soft_wrap=True)
    if opts.retry_failed and not opts.resume:
        console.print("--retry-failed needs --resume RUN_ID (a new run has nothing to retry)", markup=False)
        return 2
    try:
        exp, run_dir = _experiment(file, opts)
    except QuicbedError as exc:  # bad file, bad profile, missing run: one line, no traceback
        console.print(str(exc), markup=False)
        return 2
    try:
        part, k = _where(exp, opts)
        if opts.dry:
            cluster_plan = _cluster_plan(exp, part, opts)  # refused first
            console.print(dry_run(exp), markup=False)
            console.print(parallel_plan(exp, k, _parallel(exp, opts) == "auto"), markup=False)
            if cluster_plan:
                console.print(cluster_plan, markup=False)
            return 0
    except QuicbedError as exc:
        console.print(str(exc), markup=False)
        return exc.exit_code
    make: Callable[[Experiment, Path], Executor | Dispatcher] = make_executor
    if opts.ray:
        make = cluster.dispatcher(opts.ray, make_executor, opts.ray_retries)
    elif k > 1:
        make = lambda e, d: ParallelLocal(make_executor(e, d), e, k)  # noqa: E731
    results = opts.results or paths.RESULTS
    name = f"{exp.name}-shard{part.index}of{part.count}" if part else exp.name
    run_dir = run_dir or results / new_run_id(name, results)
    if on_run_dir:
        on_run_dir(run_dir)
    # A resume after --retry-failed must retry the rest too, or they would count as done.
    resume_cmd = f"quicbed run {file} --resume {run_dir.name}" + (
        " --retry-failed" if opts.retry_failed else ""
    )
    try:
        summary = run_experiment(
            exp,
            make(exp, run_dir),
            run_dir,
            resume=bool(opts.resume),
            progress=opts.progress,
            console=console,
            retry_failed=opts.retry_failed,
            shard=part,
        )
    except QuicbedError as exc:
        console.print(f"error: {exc}", markup=False)
        if isinstance(exc, RunAborted):
            console.print(f"fix that, then resume with {resume_cmd}", markup=False)
        return exc.exit_code
    if summary.interrupted:
        console.print(f"interrupted: resume with {resume_cmd}", markup=False)
        return 130
    if summary.stopped:
        console.print(f"error: {summary.stopped}", markup=False)
        console.print(f"fix that, then resume with {resume_cmd}", markup=False)
        return summary.exit_code
    _hint_retry(file, run_dir, console)
    if opts.check_after:
        return max(summary.exit_code, check(exp, run_dir, console, opts.junit))
    return summary.exit_code


def _experiment(file: str | Path, opts: RunOptions) -> tuple[Experiment, Path | None]:
    """The file's experiment as this run measures it, and the run to resume (None: a new run).
    A resumed run keeps the --quick it was started with; --capture overrides the file's."""
    run_dir = run_dir_for(opts.resume, opts.results) if opts.resume else None
    quick = bool(read_manifest(run_dir).get("quick")) if run_dir is not None else opts.quick
    exp = load_experiment(file, quick=quick)
    if opts.capture is not None:
        try:
            exp.capture = parse_capture(opts.capture)
        except ValueError as exc:
            raise InputError(f"--capture: {exc}") from None
    return exp, run_dir


def _parallel(exp: Experiment, opts: RunOptions) -> str:
    """--parallel, else the file's `parallel:` (a cluster's workers run the paths they offer)."""
    if opts.parallel is not None:
        return opts.parallel
    return "1" if opts.ray else exp.parallel


def _where(exp: Experiment, opts: RunOptions) -> tuple[Shard | None, int]:
    """This run's shard (None: every unit) and its paths at once (K), or InputError."""
    part = parse_shard(opts.shard) if opts.shard else None
    if part and opts.ray:
        raise InputError("--shard and --ray: choose one (a cluster schedules every condition)")
    k = parse_parallel(_parallel(exp, opts))
    if opts.ray and k != 1:
        raise InputError(
            "--parallel and --ray: choose one (a Ray worker runs the paths it offers: "
            "quicbed_path, docs/cluster/README.md)"
        )
    if exp.auto and (part or opts.ray):
        raise InputError(
            f"{'--shard' if part else '--ray'}: this experiment's repetitions are auto, and "
            "a cell's rounds are asked one after another by the run that holds them all; "
            "run it without (--parallel K runs whole cells on K paths)"
        )
    if opts.paths_per_worker is not None and not opts.dry:
        raise InputError("--paths-per-worker plans (with --dry-run); a Ray worker runs the paths it offers")
    return part, k or auto_parallel(exp)


def _hint_retry(file: str | Path, run_dir: Path, console: Console) -> None:
    failed = sum(row.get("error") is not None for row in load_rows(run_dir)[0])
    if failed:
        console.print(
            f"{failed} trial(s) failed: retry them with quicbed run {file} "
            f"--resume {run_dir.name} --retry-failed",
            markup=False,
        )


def cmd_check(
    file: str | Path, run_id: str, results: Path | None = None, junit: str | Path | None = None
) -> int:
    """`quicbed check FILE RUN_ID`: 0 all expectations pass, 1 any fails, 2 bad input."""
    console = Console(highlight=False, soft_wrap=True)
    try:
        run_dir = run_dir_for(run_id, results)
        manifest = read_manifest(run_dir)
        exp = load_experiment(file, quick=bool(manifest.get("quick")))
    except QuicbedError as exc:  # bad file, bad profile, missing run: one line, no traceback
        console.print(str(exc), markup=False)
        return 2
    if manifest.get("matrix_hash") != exp.matrix_hash():
        console.print(
            f"error: {run_dir.name} was run from a different version of {file} " "(the matrix changed)",
            markup=False,
        )
        return 2
    return check(exp, run_dir, console, junit)


def run_dir_for(run_id: str, results: Path | None = None) -> Path:
    """A run id under the results directory, or a path to a run directory. Anything else
    (`../x`, a path that is no directory) is refused before it is joined to results/."""
    path = Path(run_id)
    if "/" in run_id and path.is_dir():
        return path
    problem = rowschema.run_id_problem(run_id)
    if problem:
        raise InputError(problem)
    return (results or paths.RESULTS) / run_id


def cmd_merge(run_ids: list[str], out: str | None = None, results: Path | None = None) -> int:
    """`quicbed merge RUN...`: shards into one run; 0 merged, 2 refused (one line why)."""
    results = results or paths.RESULTS
    try:
        dirs = [run_dir_for(r, results) for r in run_ids]
        experiment = read_manifest(dirs[0]).get("experiment", "run")
        out_id = out or new_run_id(f"{experiment}-merged", results)
        problem = rowschema.run_id_problem(out_id)  # the manifest's experiment names it too
        if problem:
            raise InputError(f"--out: {problem}" if out else problem)
        merged = merge_runs(dirs, results / out_id)
    except QuicbedError as exc:
        print(f"quicbed merge: {exc}")
        return 2
    print(f"merged {len(dirs)} shard(s) into {merged.run_dir}: {merged.trials} trials")
    if merged.missing_shards:
        print(f"missing shard(s): {', '.join(map(str, merged.missing_shards))}")
    if merged.trials_to_run:
        print(
            f"{merged.trials_to_run} trial(s) still to run: quicbed run FILE --resume "
            f"{merged.run_dir.name}"
        )
    return 0


def cmd_export(run: str, dest: str, no_secrets: bool = False, results: Path | None = None) -> int:
    """`quicbed export RUN DEST [--no-secrets]`: 0 copied, 2 refused (one line why)."""
    from quicbed.experiments.export import export_run, summary

    try:
        run_dir = run_dir_for(run, results)
        done = export_run(run_dir, Path(dest), no_secrets)
    except QuicbedError as exc:
        print(f"quicbed export: {exc}")
        return 2
    except OSError as exc:
        print(f"quicbed export: {exc.filename or dest}: {exc.strerror or exc}")
        return 2
    print("\n".join(summary(done, Path(dest), no_secrets)))
    return 0


def _cluster_plan(exp: Experiment, part: Shard | None, opts: RunOptions) -> str:
    """The dry run's plan for shards or Ray workers (empty without either). A shard's units of
    one condition share its path; Ray's each have their own, `--paths-per-worker` at once."""
    ray, ray_workers, per_worker = opts.ray, opts.ray_workers, opts.paths_per_worker
    if per_worker is not None and part is not None:
        raise InputError("--paths-per-worker is for Ray workers; a shard runs one path (--parallel: local)")
    if part:
        return plan(exp, part.count, shared=True)
    offers = cluster.node_paths(ray) if ray else []
    workers = ray_workers or len(offers)
    if not workers:
        if per_worker is not None:
            raise InputError("--paths-per-worker plans for --ray-workers N or --ray ADDRESS")
        return ""
    if per_worker is None:  # as the cluster's workers offer, else one
        offered: int | None = max(offers, default=1)
    else:
        offered = parse_paths_per_worker(per_worker)
    paths, why = paths_per_worker(exp, offered)
    # Said when asked for, or when the workload runs fewer paths than the workers offer.
    say = per_worker is not None or (offered is not None and paths < offered)
    return plan(exp, workers, shared=False, paths=paths, why=why if say else "")
