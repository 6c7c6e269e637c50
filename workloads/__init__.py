"""Workload kinds (web, cloud, video): one class each, in one list; what they fetch, and what
their rows measure and how the report shows them. Below analysis and experiments, which both
iterate WORKLOADS (the Pantheon model: one metadata module shared by experiments and analysis).
"""

from .kinds import WORKLOADS, WorkloadKind, derived_kinds, object_bytes, report_sections
from .metrics import PAGELOAD, STREAMING, TRANSFER_KINDS, Metric, ReportSection

__all__ = [
    "PAGELOAD",
    "STREAMING",
    "TRANSFER_KINDS",
    "WORKLOADS",
    "Metric",
    "ReportSection",
    "WorkloadKind",
    "derived_kinds",
    "object_bytes",
    "report_sections",
]
