"""The `quicbed` command line: one subcommand per stage, errors as one line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from quicbed.errors import InputError, QuicbedError
from quicbed.labs.lab import LabClosed

if TYPE_CHECKING:
    from quicbed.experiments.options import RunOptions

Handler = Callable[[argparse.Namespace], int]
BACKEND_HELP = "auto, or a link backend by name (`quicbed doctor` lists them and which run here)"


def _link_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile", help="profile name (topology/profiles) or a YAML file")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a link parameter (loss_pct=1, down.rate_mbit=50)",
    )
    p.add_argument(
        "--backend",
        default="auto",
        help="where the netem stage runs: auto (the host kernel's netem if it works, "
        "else a UML router (<= 100 Mbit/s), else a QEMU router with Debian's kernel "
        "(<= 200 Mbit/s), where each boots here, else the delay line), or a link backend by "
        "name (`quicbed doctor` lists them and which run here)",
    )
    p.add_argument("--tcp-cc", default="cubic", help="TCP congestion control in every host")
    p.add_argument("--client-image", default=None, help="client container image")
    p.add_argument("--server-image", default=None, help="server container image")


def _lab_args(p: argparse.ArgumentParser) -> None:
    """`quicbed lab PROFILE [...]` or `quicbed lab check EXERCISE ANSWERS [--solutions]`: one
    subcommand, so that the README's `quicbed lab india` keeps working."""
    _link_args(p)
    p.add_argument(
        "rest",
        nargs="*",
        metavar="EXERCISE ANSWERS",
        help="after `check`: the exercise and the student's answers (YAML)",
    )
    p.add_argument(
        "--id",
        help="the lab's id (default: a fresh one); names its containers "
        "and state, for several labs on one host",
    )
    p.add_argument("--server", default="nginx", help="the server behind the path")
    p.add_argument("--no-calibrate", action="store_true", help="skip the start-up calibration")
    p.add_argument(
        "--solutions", action="store_true", help="with `check`: measure and print the reference answers"
    )


def _testbed_config(args: argparse.Namespace):  # lazy import keeps --help fast
    from quicbed.topology.net import DEFAULT_IMAGE, HostSpec, TestbedConfig
    from quicbed.topology.profiles import load_profile, parse_overrides

    profile = load_profile(args.profile, parse_overrides(args.set))
    client_image = args.client_image or DEFAULT_IMAGE
    return TestbedConfig(
        profile=profile,
        backend=args.backend,
        tcp_cc=args.tcp_cc,
        client=HostSpec(client_image),
        servers=(HostSpec(args.server_image or client_image),),
    )


def cmd_calibrate(args: argparse.Namespace) -> int:
    from quicbed.topology.calibration_table import calibrate_path, progress_printer

    say = progress_printer()
    cal = calibrate_path(
        _testbed_config(args),
        rtt_samples=args.samples,
        udp_packets=args.udp_packets,
        goodput_seconds=args.seconds,
        say=say,
    )
    out = Path(args.json) if args.json else None
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(cal.to_dict(), indent=2))
        say(f"wrote {out}")
    return 0 if cal.passed else 3


def cmd_lab(args: argparse.Namespace) -> int:
    from quicbed.experiments.options import PathOptions
    from quicbed.labs.lab import new_lab_id, run_lab
    from quicbed.topology.profiles import load_profile, parse_overrides

    if args.profile == "check":
        from quicbed.labs.check import main_check

        return main_check(args)
    if args.rest:
        raise InputError(
            f"lab: unexpected {' '.join(args.rest)!r} (quicbed lab PROFILE, "
            "or quicbed lab check EXERCISE ANSWERS)"
        )
    if args.server_image:
        raise InputError(
            "a lab runs a described server: --server NAME (servers/*/server.yaml)", field="--server-image"
        )
    profile = load_profile(args.profile, parse_overrides(args.set))
    return run_lab(
        profile,
        lab_id=args.id or new_lab_id(),
        server=args.server,
        path=PathOptions(backend=args.backend, client_image=args.client_image),
        tcp_cc=args.tcp_cc,
        calibrate_first=not args.no_calibrate,
    )


def cmd_clean(args: argparse.Namespace) -> int:
    from quicbed.topology.clean import CleanLeftSome, clean

    try:
        if args.lab:
            from quicbed.labs.lab import clean_lab

            removed = clean_lab(args.lab, say=print)
        else:
            removed = clean()
    except CleanLeftSome as left:  # what it did remove is said first; the one line ends it
        for line in left.removed:
            print(f"removed {line}")
        raise
    for line in removed:
        print(f"removed {line}")
    print("clean: nothing left" if not removed else f"clean: removed {len(removed)} item(s)")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from quicbed.doctor import run_doctor
    from quicbed.topology.backends import backend_checks

    return run_doctor(commands_only=args.commands_only, backends=backend_checks)


def cmd_run(args: argparse.Namespace) -> int:
    from quicbed.experiments.options import RunOptions

    return run_file(args.file, RunOptions.from_args(args))


def run_file(file: str | Path, opts: RunOptions, on_run_dir: Callable[[Path], None] | None = None) -> int:
    """`quicbed run`, and each experiment of `quicbed reproduce`: the testbed's executor."""
    from quicbed.experiments.commands import cmd_run as run
    from quicbed.experiments.runner import signals_interrupt
    from quicbed.topology.marker import kill_own_helpers

    def factory(exp, run_dir):  # lazy: a dry run never builds it
        from quicbed.experiments.executor import TestbedExecutor

        return TestbedExecutor(exp, run_dir, opts.path)

    # SIGTERM and SIGHUP as Ctrl-C for the whole command, executor set-up included.
    with signals_interrupt():
        try:
            return run(file, factory, opts, on_run_dir)
        finally:
            # A helper a teardown missed (an interrupt mid-calibration) must not outlive it.
            for line in kill_own_helpers():
                print(f"quicbed: stopped a helper the teardown left: {line}", file=sys.stderr)


def cmd_check(args: argparse.Namespace) -> int:
    from quicbed.experiments.commands import cmd_check as check

    return check(args.file, args.run_id, junit=args.junit)


def cmd_merge(args: argparse.Namespace) -> int:
    from quicbed.experiments.commands import cmd_merge as merge

    return merge(args.run_ids, args.out)


def cmd_export(args: argparse.Namespace) -> int:
    from quicbed.experiments.commands import cmd_export as export

    return export(args.run, args.dest, no_secrets=args.no_secrets)


def cmd_compare(args: argparse.Namespace) -> int:
    from quicbed.analysis.compare import main_compare

    return main_compare(
        args.base, args.new, args.max_regress, alpha=args.alpha, json_path=args.json, junit_path=args.junit
    )


def cmd_report(args: argparse.Namespace) -> int:
    from quicbed.analysis.report import main_report

    return main_report(args.run_ids, args.out)


def cmd_explain(args: argparse.Namespace) -> int:
    from quicbed.analysis.explain import main_explain

    return main_explain(args.run, args.trial, as_json=args.json)


def cmd_reproduce(args: argparse.Namespace) -> int:
    """Every experiment in experiments/paper or --experiments DIR (quick unless --full), then
    one report; one Ctrl-C/SIGTERM/SIGHUP stops it all (experiments/reproduce.py)."""
    from quicbed.analysis.report import report_runs
    from quicbed.experiments.options import PathOptions, RunOptions
    from quicbed.experiments.reproduce import experiment_files, plan, reproduce
    from quicbed.paths import REPO

    opts = RunOptions(
        quick=not args.full, progress=not args.no_progress, path=PathOptions(backend=args.backend)
    )

    def run_one(file: Path, on_run_dir: Callable[[Path], None], retry: Path | None = None) -> int:
        # A retry resumes the run and runs its failed trials again (quicbed run --resume
        # RUN --retry-failed); the run keeps the --quick it was started with.
        again = dataclasses.replace(opts, resume=str(retry), retry_failed=True) if retry else opts
        return run_file(file, again, on_run_dir)

    directory = Path(args.experiments) if args.experiments else REPO / "experiments" / "paper"
    if args.dry_run:
        print(plan(experiment_files(directory), quick=not args.full))
        return 0
    return reproduce(
        experiment_files(directory),
        run_one,
        lambda ids: report_runs(ids, args.out),
        quick=not args.full,
        say=_progress_printer(),
    )


def _progress_printer() -> Callable[[str], None]:
    from quicbed.topology.calibration_table import progress_printer

    return progress_printer()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quicbed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("calibrate", help="bring a profile's path up and prove it")
    _link_args(p)
    p.add_argument("--samples", type=int, default=30, help="ping samples (>= 20)")
    p.add_argument(
        "--udp-packets",
        type=int,
        default=20000,
        help="most UDP datagrams per direction (the loss probe stops once decided)",
    )
    p.add_argument(
        "--seconds", type=float, default=1.2, help="goodput measured after slow start, per direction"
    )
    p.add_argument("--json", help="write the calibration as JSON here")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser(
        "lab",
        help="a course lab: the path, a server and a CLI (labs/); "
        "`lab check EXERCISE ANSWERS` grades answers",
    )
    _lab_args(p)
    p.set_defaults(func=cmd_lab)

    p = sub.add_parser("run", help="run an experiment file end to end into results/")
    p.add_argument("file", help="experiment YAML (experiments/...)")
    p.add_argument("--resume", metavar="RUN_ID", help="run only the trials RUN_ID is missing")
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume: run the failed trials again too (their failed rows stay "
        "in rows.jsonl, superseded by the new attempt)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="validate, print the expanded matrix and an estimate; touch nothing",
    )
    p.add_argument("--check", action="store_true", help="evaluate expect: after the run")
    p.add_argument(
        "--junit", metavar="FILE", help="with --check (implied): the expectations as JUnit XML in FILE"
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="run shard I of N: a balanced, deterministic subset of the units "
        "(merge the shards with quicbed merge); with --dry-run, the per-worker plan",
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run each unit on a Ray cluster's worker (one holding the "
        "quicbed_path resource); rows stream back into this run (needs the cluster "
        "extra); with --dry-run, the plan for its workers",
    )
    p.add_argument(
        "--ray-workers",
        type=int,
        metavar="N",
        help="with --dry-run: the per-worker plan for N workers, no cluster needed",
    )
    p.add_argument(
        "--paths-per-worker",
        metavar="K",
        help="with --dry-run and --ray-workers/--ray: each worker runs K units at once (1, 2 or "
        "auto: as many as the workload's measured CPU fits in a 2-core worker; default: what "
        "the cluster's workers offer, else 1)",
    )
    p.add_argument(
        "--ray-retries",
        type=int,
        default=1,
        metavar="N",
        help="with --ray: rerun a lost worker's unit up to N times, skipping "
        "its stored trials (default 1; the rest: --resume)",
    )
    p.add_argument(
        "--parallel",
        metavar="K",
        nargs="?",
        const="auto",
        default=None,
        help="K units at once on this machine, each on its own path (auto, or the flag alone: "
        "from the workload's measured CPU per trial and the cores; default: the file's "
        "parallel:, else 1); with --dry-run, K and the planned wall time",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="use the file's quick: settings")
    size.add_argument("--full", action="store_true", help="the whole file, not its quick: (the default)")
    p.add_argument(
        "--capture",
        metavar="KINDS",
        help="per trial, keep qlog, pcap and/or keys (comma-separated, or none) in "
        "trials/<trial id>/; overrides the file's capture:",
    )
    p.add_argument(
        "--force", action="store_true", help="measure even through a path that failed calibration (recorded)"
    )
    p.add_argument("--backend", default="auto", help=BACKEND_HELP)
    p.add_argument(
        "--client-image",
        default=None,
        help="client container image (default: the tools' own, their descriptors')",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("check", help="evaluate an experiment's expect: against a run")
    p.add_argument("file")
    p.add_argument("run_id")
    p.add_argument("--junit", metavar="FILE", help="also write the verdicts as JUnit XML")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("merge", help="shard runs (run --shard I/N) into one run")
    p.add_argument("run_ids", nargs="+", metavar="RUN", help="shard run ids or directories")
    p.add_argument("--out", metavar="RUN_ID", help="the merged run's id (default: new)")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("export", help="copy a run to share (--no-secrets: without TLS key logs)")
    p.add_argument("run", metavar="RUN", help="a run id (results/) or a run directory")
    p.add_argument("dest", metavar="DEST", help="the new directory to write")
    p.add_argument(
        "--no-secrets", action="store_true", help="leave out every trial's keys.log (capture: [keys])"
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("compare", help="NEW against BASE: regressions, with statistics")
    p.add_argument("base", help="the baseline run (id under results/, or a run directory)")
    p.add_argument("new", help="the run to judge")
    p.add_argument(
        "--max-regress",
        action="append",
        default=[],
        metavar="METRIC=PCT%",
        help="the change of a metric's median that counts as a regression "
        "(default 5%% for every metric; repeatable, e.g. connection_time=5%%)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.01,
        help="family-wise significance level after Holm's correction (0.01)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    p.add_argument("--junit", metavar="FILE", help="also write it as JUnit XML")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", help="HTML and Markdown report of one or more runs")
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID", help="run ids (results/) or paths")
    p.add_argument("--out", help="output directory (default: next to the runs)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("explain", help="one trial's timeline from its capture (run --capture)")
    p.add_argument("run", metavar="RUN", help="a run id (results/) or a run directory")
    p.add_argument("trial", metavar="TRIAL", help="a trial id as in rows.jsonl (c0/nginx/tls1.3-h2/...)")
    p.add_argument("--json", action="store_true", help="print the evidence as JSON")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("reproduce", help="run experiments/paper (quick) and write the report")
    p.add_argument("--full", action="store_true", help="the full repetitions (hours)")
    p.add_argument(
        "--experiments", metavar="DIR", help="run the *.yaml experiments of DIR instead of experiments/paper"
    )
    p.add_argument("--backend", default="auto", help=BACKEND_HELP)
    p.add_argument("--out", help="report directory")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--dry-run", action="store_true", help="each experiment's planned time and their sum; runs nothing"
    )
    p.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("doctor", help="check that this host has everything the testbed needs")
    p.add_argument(
        "--commands-only",
        action="store_true",
        help="only the host commands and files (no kernel, Docker or image checks)",
    )
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("clean", help="remove every namespace, link, container and UML or QEMU router")
    p.add_argument("--lab", metavar="ID", help="remove only this lab (quicbed lab --id)")
    p.set_defaults(func=cmd_clean)
    return parser


def _validate_backend(args: argparse.Namespace) -> None:
    """--backend names auto or a registered backend (topology/backends): said before anything
    is brought up, and without root."""
    from quicbed.topology.backends import check_name

    check_name(getattr(args, "backend", "auto"))


def _validate_profile(args: argparse.Namespace) -> None:
    _validate_backend(args)
    if args.command in ("calibrate", "lab"):
        from quicbed.topology.profiles import load_profile, parse_overrides

        load_profile(args.profile, parse_overrides(args.set))


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # `lab check` reads the answers file first (its errors need no root), then checks.
    lab_check = args.command == "lab" and args.profile == "check"
    needs_root = (args.command in ("calibrate", "lab") and not lab_check) or (
        args.command in ("run", "reproduce") and not args.dry_run
    )
    if needs_root and os.geteuid() != 0:
        try:  # bad input is said first: it needs no root to find, and root would not fix it
            _validate_profile(args)
        except InputError as exc:
            print(f"quicbed: {exc}", file=sys.stderr)
            return exc.exit_code
        print("quicbed: needs root (namespaces, tc, Docker)", file=sys.stderr)
        return 4
    signal.signal(signal.SIGTERM, _on_sigterm)
    handler: Handler = args.func
    try:
        _validate_backend(args)
        return handler(args)
    except InputError as exc:
        print(f"quicbed: {exc}", file=sys.stderr)
        return exc.exit_code
    except QuicbedError as exc:
        print(f"quicbed: {exc}", file=sys.stderr)
        return exc.exit_code
    except (KeyboardInterrupt, LabClosed):
        print("quicbed: interrupted; the topology was torn down", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
