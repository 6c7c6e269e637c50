"""The cloud-storage workload: one incompressible file downloaded per trial (1KB ... 2GB).

Content under cloud/ of the store (workloads/store.py): SHAKE-128 keyed by the file's path, so
incompressible and reproducible anywhere. Binary units: "1MB" is 1 MiB; throughput is computed
from the exact sizes. The small files are made with the kind's content, the rest only when a
run (or `--files`) names them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .base import Metric, ReportSection, WorkloadKind
from .store import ContentError, GiB, KiB, MiB, is_current, locked, stream, write_atomic

CLOUD_SIZES = {
    "1KB": KiB,
    "2KB": 2 * KiB,
    "5KB": 5 * KiB,
    "1MB": MiB,
    "2MB": 2 * MiB,
    "5MB": 5 * MiB,
    "10MB": 10 * MiB,
    "20MB": 20 * MiB,
    "50MB": 50 * MiB,
    "100MB": 100 * MiB,
    "200MB": 200 * MiB,
    "500MB": 500 * MiB,
    "1GB": GiB,
    "2GB": 2 * GiB,
}
# Made with the kind's content; the rest only when asked for by name.
CLOUD_DEFAULT = ("1KB", "2KB", "5KB", "1MB", "2MB", "5MB", "10MB", "20MB")

CLOUD_THROUGHPUT = Metric("throughput_mbps", "Throughput", "Mbit/s", ("cloud",), per_rtt=False)
CLOUD_CPU = Metric("transfer_cpu_pct", "Client CPU", "%", ("cloud",), per_rtt=False)
CLOUD_DOWNLOAD = Metric("download_time_ms", "Download time", "ms", ("cloud",), per_rtt=False)


def ensure_files(root: Path, names: Iterable[str]) -> list[Path]:
    """Cloud-storage files by name (1KB ... 2GB), made only if missing. Returns their paths."""
    root = Path(root)
    names = list(names)
    unknown = [n for n in names if n not in CLOUD_SIZES]
    if unknown:
        raise ContentError(f"unknown cloud file(s) {unknown}; valid: {', '.join(CLOUD_SIZES)}")
    with locked(root) as manifest:
        for name in names:
            rel = f"cloud/{name}"
            if not is_current(root, manifest, rel):
                free = shutil.disk_usage(root).free
                if free < CLOUD_SIZES[name] + GiB:
                    raise ContentError(f"{rel} needs {CLOUD_SIZES[name]} bytes; {free} free")
                manifest["files"][rel] = write_atomic(root, rel, stream(rel, CLOUD_SIZES[name]))
    return [root / "cloud" / n for n in names]


class Cloud(WorkloadKind):
    kind, order, list_key, what = "cloud", 2, "files", "file"
    one_get = True
    # Medians of cpu_client_pct + cpu_server_pct, error-free rows (2-core host, delayline
    # router; 2026-11-25/26: paper-cloud, loss-response).
    cpu_cores = {
        "quic_perf": 0.08,  # 41 trials
        "tls_perf": 0.07,  # 65 trials
    }
    sections = (
        ReportSection(
            "Cloud storage",
            ("cloud",),
            "Throughput = size / total download time; CPU = client process.",
            metrics=(CLOUD_THROUGHPUT, CLOUD_DOWNLOAD, CLOUD_CPU),
            keys=("facet", "object_bytes", "protocol"),
            # download time is throughput restated; comparing both adds rows only
            compared=(CLOUD_THROUGHPUT, CLOUD_CPU),
            figures="cloud",
            plots=("throughput_vs_size", "cpu_over_time", "cloud_against_rate"),
        ),
    )

    def choices(self) -> tuple[str, ...]:
        return tuple(CLOUD_SIZES)

    def url_path(self, name: str) -> str:
        return f"cloud/{name}"

    def object_bytes(self, name: str) -> int:
        return CLOUD_SIZES[name]

    def make_content(self, root: Path) -> None:
        ensure_files(root, CLOUD_DEFAULT)

    def prepare_content(self, root: Path, objects: tuple[str, ...]) -> None:
        super().prepare_content(root, objects)
        ensure_files(root, objects)

    def tool_args(self, duration_s: float | None, settings: dict[str, Any]) -> dict[str, str]:
        # A browser must be told the URL is a file to download, not a page to open; the perf
        # tools fetch any URL the same way and do not take the flag.
        return {"--workload": "cloud"}
