"""Workload kinds: one module each (web.py, cloud.py, video.py), each one WorkloadKind subclass
that owns what a trial fetches, its content, its rows and report sections, and its plan cost.
Below servers, clients, analysis and experiments, which all read the registry (the Pantheon
model: one metadata module shared by experiments and analysis).

Every module of this package is imported, so each subclass with a `kind` registers itself
(base.REGISTRY): a new kind is a new module here, and nothing else names it. Kinds from
outside the tree: QUICBED_WORKLOAD_MODULES, colon-separated, each a Python file or a directory
of them, imported after the package's own (as QUICBED_CLIENT_DIRS adds client descriptors).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path

from quicbed.errors import InputError

from .base import (
    ANY_GET,
    CONNECTION,
    REGISTRY,
    Metric,
    ReportSection,
    Setting,
    TrialPath,
    WorkloadKind,
    one_get_kinds,
    transfer_kinds,
)
from .store import ContentError

ENV_MODULES = "QUICBED_WORKLOAD_MODULES"

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def _outside_modules(listed: str) -> list[Path]:
    """The Python files an entry of QUICBED_WORKLOAD_MODULES names, in a stable order."""
    files: list[Path] = []
    for entry in filter(None, listed.split(":")):
        path = Path(entry)
        if path.is_dir():
            files += sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
        elif path.suffix == ".py" and path.is_file():
            files.append(path)
        else:
            raise InputError(f"{entry} is neither a Python file nor a directory", field=ENV_MODULES)
    return files


def _import_outside(path: Path) -> None:
    name = f"{__name__}.outside_{path.stem}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"cannot import {path}", field=ENV_MODULES)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up by name
    spec.loader.exec_module(module)


for _path in _outside_modules(os.environ.get(ENV_MODULES, "")):
    _import_outside(_path)

WORKLOADS: dict[str, WorkloadKind] = REGISTRY


def object_bytes(kind: str, name: str) -> int:
    return WORKLOADS[kind].object_bytes(name)


def report_sections() -> list[ReportSection]:
    """Every workload's report sections, in the kinds' order."""
    return [section for workload in WORKLOADS.values() for section in workload.sections]


def derived_kinds() -> dict[str, tuple[str, ...]]:
    """Derived analysis kind -> the columns that mark its rows, over every workload."""
    return {k: v for workload in WORKLOADS.values() for k, v in workload.derived.items()}


def demand_limited_kinds() -> tuple[str, ...]:
    """Analysis kinds whose rate the workload's demand sets, not the path, over every kind."""
    return tuple(k for workload in WORKLOADS.values() for k in workload.demand_limited)


def ensure_content(root: Path, kinds: set[str] | frozenset[str]) -> Path:
    """Make the standing content of these kinds under root (idempotent; fast when already
    there), in the kinds' order."""
    root = Path(root)
    unknown = set(kinds) - set(WORKLOADS)
    if unknown:
        raise ContentError(f"unknown workload(s) {sorted(unknown)}; valid: {', '.join(WORKLOADS)}")
    for name, workload in WORKLOADS.items():
        if name in kinds:
            workload.make_content(root)
    return root


__all__ = [
    "ANY_GET",
    "CONNECTION",
    "ENV_MODULES",
    "WORKLOADS",
    "ContentError",
    "Metric",
    "ReportSection",
    "Setting",
    "TrialPath",
    "WorkloadKind",
    "demand_limited_kinds",
    "derived_kinds",
    "ensure_content",
    "object_bytes",
    "one_get_kinds",
    "report_sections",
    "transfer_kinds",
]
