"""Analysis of run results: load, statistics, figures, report (see README.md)."""

from .load import AnalysisError, load_runs
from .report import main_report, write_report

__all__ = ["AnalysisError", "load_runs", "main_report", "write_report"]
