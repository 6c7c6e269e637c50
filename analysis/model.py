"""Shared vocabulary of the analysis: protocols, their colours, metrics and row columns."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import pandas as pd

from quicbed import rowschema

# QUIC first: every comparison is "QUIC against a TCP stack".
PROTOCOL_ORDER = ["quic", "tls1.3", "tls1.2"]
PROTOCOL_LABELS = {"quic": "QUIC", "tls1.3": "TLS 1.3", "tls1.2": "TLS 1.2"}
# Okabe-Ito colours (colour-blind safe); one per protocol in every figure.
PROTOCOL_COLORS = {"quic": "#0072B2", "tls1.3": "#E69F00", "tls1.2": "#D55E00"}
FALLBACK_COLORS = ["#009E73", "#CC79A7", "#56B4E9", "#000000"]

# Metrics and which rows measure them belong to the workload kinds (workloads/<kind>.py); the
# analysis names them from there.
from quicbed.workloads.base import CONNECTION, Metric  # noqa: E402, F401 - re-exported for the analysis
from quicbed.workloads.cloud import CLOUD_CPU, CLOUD_DOWNLOAD, CLOUD_THROUGHPUT  # noqa: E402, F401
from quicbed.workloads.video import (  # noqa: E402, F401
    STALL_TIME,
    STARTUP,
    STREAMING,
    SWITCHES,
    VIDEO_CONNECTION,
    VIDEO_STALL,
    VIDEO_THROUGHPUT,
)
from quicbed.workloads.web import DOWNLOAD, PAGELOAD, TIMING_METRICS, TTFB  # noqa: E402, F401

# Columns a run may lack (older runners, other workloads); filled so code can rely on them.
OPTIONAL_COLUMNS: dict[str, object] = rowschema.ANALYSIS_DEFAULTS


def protocol_label(protocol: str) -> str:
    return PROTOCOL_LABELS.get(protocol, protocol)


def protocol_color(protocol: str) -> str:
    if protocol in PROTOCOL_COLORS:
        return PROTOCOL_COLORS[protocol]
    # crc32, not hash(): str hashes change between processes, colours must not.
    return FALLBACK_COLORS[zlib.crc32(protocol.encode()) % len(FALLBACK_COLORS)]


def ordered_protocols(values: pd.Series) -> list[str]:
    present = set(values.dropna())
    known = [p for p in PROTOCOL_ORDER if p in present]
    return known + sorted(present - set(known))


def listed(value: object) -> list:
    """A list-valued cell as a list: JSON lines give lists, Parquet arrays, gaps None/NaN."""
    if isinstance(value, str):
        # The runner's Parquet writer stores columns of mixed shapes as JSON text.
        try:
            value = json.loads(value)
        except ValueError:
            return []
    if value is None or isinstance(value, float | str | dict):
        return []
    return list(cast(Iterable[Any], value))  # a list or an array; anything else raises


def truthy(values: pd.Series) -> pd.Series:
    """A flag column as bools; missing (None/NaN) counts as not set."""
    return values.map(lambda v: isinstance(v, bool | int | np.bool_ | np.integer) and bool(v)).astype(bool)


def is_failed(error: object) -> bool:
    if error is None or (isinstance(error, float) and np.isnan(error)):
        return False
    return str(error).strip() != ""


KB, MB, GB = 2**10, 2**20, 2**30
# Binary, as the testbed's content server makes its files ("1MB" is 1 MiB, workloads/cloud.py).
UNITS = {
    "": 1,
    "B": 1,
    "K": KB,
    "KB": KB,
    "KIB": KB,
    "M": MB,
    "MB": MB,
    "MIB": MB,
    "G": GB,
    "GB": GB,
    "GIB": GB,
}


def parse_size(name: object) -> float:
    """'10MB' -> 10 MiB; NaN when the object is not named by its size (e.g. index.html)."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", str(name))
    if not match or match.group(2).upper() not in UNITS:
        return np.nan
    return float(match.group(1)) * UNITS[match.group(2).upper()]


def object_size_bytes(df: pd.DataFrame) -> pd.Series:
    """Size of each row's object: the name if it states a size, else the median bytes
    received for that object (so a failed trial still gets its object's size)."""
    named = df["object"].map(parse_size)
    measured = pd.to_numeric(df["bytes"], errors="coerce").groupby(df["object"]).transform("median")
    return named.fillna(measured)


def size_label(size: float) -> str:
    for unit, factor in (("GB", GB), ("MB", MB), ("KB", KB)):
        if size >= factor:
            return f"{size / factor:.3g} {unit}"
    return f"{size:g} B"


def near(sizes: pd.Series, size: float, tolerance: float = 0.05) -> pd.Series:
    """Sizes within 5% of `size`: "200 MB" matches 200 MiB and 200·10⁶ bytes alike."""
    return (sizes / size - 1).abs() <= tolerance


def recorded_page_loads(df: pd.DataFrame) -> pd.DataFrame:
    """The page loads of recorded pages (their rows carry `page_origins`: workloads/recorded.py)."""
    if "page_origins" not in df:
        return df.iloc[0:0]
    return df[(df["workload"] == PAGELOAD) & df["page_origins"].notna()]
