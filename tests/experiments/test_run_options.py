"""One typed run configuration (experiments/options.py): every option of `quicbed run` reaches
RunOptions, with the command's defaults, and `quicbed reproduce` hands each run the same."""

from __future__ import annotations

import argparse

import pytest

from quicbed import cli
from quicbed.experiments.options import PathOptions, RunOptions

# Not options of a run: the file, the subcommand's handler, and --full (the default's name).
NOT_OPTIONS = {"command", "func", "file", "full"}


def _run_args(*words: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["run", "x.yaml", *words])


def test_the_command_lines_defaults_are_the_dataclasss() -> None:
    assert RunOptions.from_args(_run_args()) == RunOptions()


@pytest.mark.parametrize("dest", sorted(set(vars(_run_args())) - NOT_OPTIONS))
def test_every_option_of_run_is_read_into_run_options(dest: str) -> None:
    """An option added to the parser and not to RunOptions.from_args fails here."""
    args = _run_args()
    delattr(args, dest)
    with pytest.raises(AttributeError, match=dest):
        RunOptions.from_args(args)


def test_options_given_arrive_typed_and_mapped() -> None:
    words = ["--resume", "r1", "--retry-failed", "--junit", "j.xml", "--no-progress"]
    words += ["--backend", "delayline", "--force", "--client-image", "quicbed/x:1", "--parallel"]
    opts = RunOptions.from_args(_run_args(*words))
    assert (opts.resume, opts.retry_failed, opts.junit, opts.progress) == ("r1", True, "j.xml", False)
    assert opts.check_after  # --junit implies --check
    assert opts.parallel == "auto"  # the flag alone
    assert opts.path == PathOptions(backend="delayline", force=True, client_image="quicbed/x:1")
