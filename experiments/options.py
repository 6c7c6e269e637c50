"""How a run is asked for, beside its experiment file: one typed record from the command line
(`RunOptions.from_args`) through `quicbed reproduce` and `commands.cmd_run` down to the
executor (`PathOptions`). A keyword relayed by hand from layer to layer was missed once
(`reproduce` died on `--capture`); a field added here reaches every layer, and the parser's
names are mapped in one place.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class PathOptions:
    """What the executor is told about the path it builds and the clients it starts."""

    backend: str = "auto"  # a link backend by name, or auto (topology/backends)
    force: bool = False  # measure through a path that failed calibration (recorded)
    client_image: str | None = None  # one image for every tool (default: each tool's own)


@dataclass(frozen=True)
class RunOptions:
    """`quicbed run FILE` besides FILE (the defaults are the command's)."""

    resume: str | None = None  # a run id or directory to continue
    retry_failed: bool = False  # with resume: failed trials too
    dry: bool = False  # plan only
    check_after: bool = False  # judge the file's expect: lines after the run
    junit: str | Path | None = None  # and write them as JUnit XML
    quick: bool = False  # the file's quick: settings
    results: Path | None = None  # where new runs go (default: paths.RESULTS)
    progress: bool = True  # a live progress bar
    shard: str | None = None  # I/N: this machine's share of the units
    ray: str | None = None  # a Ray cluster's address
    ray_workers: int | None = None  # with dry: plan for this many workers
    ray_retries: int = 1  # a lost worker's unit, again, up to this often
    capture: str | None = None  # qlog,pcap,keys (overrides the file's capture:)
    parallel: str | None = None  # K paths at once on this machine, or auto (None: the file's)
    paths_per_worker: str | None = None  # with dry: paths a cluster worker runs at once
    path: PathOptions = field(default_factory=PathOptions)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        """The `run` parser's namespace (cli.build_parser), its names mapped once here."""
        return cls(
            resume=args.resume,
            retry_failed=args.retry_failed,
            dry=args.dry_run,
            check_after=args.check or bool(args.junit),
            junit=args.junit,
            quick=args.quick,
            progress=not args.no_progress,
            shard=args.shard,
            ray=args.ray,
            ray_workers=args.ray_workers,
            ray_retries=args.ray_retries,
            capture=args.capture,
            parallel=args.parallel,
            paths_per_worker=args.paths_per_worker,
            path=PathOptions(backend=args.backend, force=args.force, client_image=args.client_image),
        )
