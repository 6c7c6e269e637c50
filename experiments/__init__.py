"""Experiments: a validated YAML format, its expansion into trials, and resumable runs.

Entry points for the CLI: `commands.cmd_run`, `commands.cmd_check`; for code: the names below.
"""

from .check import check
from .commands import cmd_check, cmd_run
from .plan import dry_run
from .runner import Executor, RunSummary, TrialError, run_experiment
from .schema import Experiment, ExperimentError, load_experiment

__all__ = [
    "Executor",
    "Experiment",
    "ExperimentError",
    "RunSummary",
    "TrialError",
    "check",
    "cmd_check",
    "cmd_run",
    "dry_run",
    "load_experiment",
    "run_experiment",
]
