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

from quicbed import paths
from quicbed.errors import QuicbedError

from .check import check
from .plan import dry_run
from .runner import Executor, RunAborted, run_experiment
from .schema import Experiment, load_experiment
from .store import new_run_id, read_manifest


def cmd_run(
    file: str | Path,
    make_executor: Callable[[Experiment, Path], Executor],
    *,
    resume: str | None = None,
    dry: bool = False,
    check_after: bool = False,
    quick: bool = False,
    results: Path | None = None,
    progress: bool = True,
) -> int:
    """`quicbed run FILE [--resume ID] [--dry-run] [--check] [--quick]`.

    make_executor(exp, run_dir) is called once, after the file validated and unless dry; --force belongs to
    the executor (pass it through your factory)."""
    console = Console(highlight=False, soft_wrap=True)
    run_dir = run_dir_for(resume, results) if resume else None
    try:
        if run_dir is not None:  # a resumed run keeps the --quick it was started with
            quick = bool(read_manifest(run_dir).get("quick"))
        exp = load_experiment(file, quick=quick)
    except QuicbedError as exc:  # bad file, bad profile, missing run: one line, no traceback
        console.print(str(exc), markup=False)
        return 2
    if dry:
        console.print(dry_run(exp), markup=False)
        return 0
    results = results or paths.RESULTS
    run_dir = run_dir or results / new_run_id(exp.name, results)
    try:
        summary = run_experiment(
            exp,
            make_executor(exp, run_dir),
            run_dir,
            resume=bool(resume),
            progress=progress,
            console=console,
        )
    except QuicbedError as exc:
        console.print(f"error: {exc}", markup=False)
        if isinstance(exc, RunAborted):
            console.print(
                f"fix that, then resume with quicbed run {file} --resume {run_dir.name}",
                markup=False,
            )
        return exc.exit_code
    if summary.interrupted:
        console.print(
            f"interrupted: resume with quicbed run {file} --resume {run_dir.name}", markup=False
        )
        return 130
    if check_after:
        return max(summary.exit_code, check(exp, run_dir, console))
    return summary.exit_code


def cmd_check(file: str | Path, run_id: str, results: Path | None = None) -> int:
    """`quicbed check FILE RUN_ID`: 0 all expectations pass, 1 any fails, 2 bad input."""
    console = Console(highlight=False, soft_wrap=True)
    run_dir = run_dir_for(run_id, results)
    try:
        manifest = read_manifest(run_dir)
        exp = load_experiment(file, quick=bool(manifest.get("quick")))
    except QuicbedError as exc:  # bad file, bad profile, missing run: one line, no traceback
        console.print(str(exc), markup=False)
        return 2
    if manifest.get("matrix_hash") != exp.matrix_hash():
        console.print(
            f"error: {run_dir.name} was run from a different version of {file} "
            "(the matrix changed)",
            markup=False,
        )
        return 2
    return check(exp, run_dir, console)


def run_dir_for(run_id: str, results: Path | None = None) -> Path:
    """A run id under the results directory, or a path to a run directory."""
    path = Path(run_id)
    if "/" in run_id and path.is_dir():
        return path
    return (results or paths.RESULTS) / run_id
