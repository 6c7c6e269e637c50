"""What each stack did on the wire, as measured in captured trials (issue 29): the initial
congestion window of each server's QUIC and of the kernel's TCP, for the report's Run section
and for the finding it explains ("QUIC's gain shrinks as the connection proceeds").

The evidence is `explain.evidence` of a few captured trials per stack: decoding one capture
costs a tshark run in the client image (about a second), so a report decodes at most
TRIALS_PER_STACK of them, the largest responses of the perf tools first (one connection per
trial; a browser's page opens several).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from quicbed import rowschema
from quicbed.clients.tools import TOOLS

from .load import AnalysisError

TRIALS_PER_STACK = 2
# One GET on one fresh connection per trial: every client but the browsers whose descriptor
# (clients/<name>/client.yaml `workloads`) can fetch a cloud file (tls_perf, quic_perf, aioquic,
# quicgo, and any of QUICBED_CLIENT_DIRS); a browser's page load opens several connections.
PERF_TOOLS = tuple(name for name, tool in TOOLS.items() if "cloud" in tool.workloads and not tool.browser)

Evidence = Callable[[Path, str], dict[str, Any]]


@dataclass(frozen=True)
class StackWindow:
    server: str
    transport: str  # "QUIC" (the server's own stack) or "TCP" (the server host's kernel)
    packets: int  # the median initial window over the trials, in packets
    bytes: int
    reached: bool  # False: every response fit in its first flight, so the window is at least this
    trials: tuple[str, ...]
    flights: int = 1  # the median number of round trips the response's data took
    response_bytes: int = 0  # the median bytes of those flights

    @property
    def label(self) -> str:
        return f"{self.server}'s QUIC" if self.transport == "QUIC" else f"TCP (kernel) under {self.server}"

    def size(self) -> str:
        bound = "" if self.reached else "≥ "
        return f"{bound}{self.packets} packets ({self.bytes / 1000:.1f} KB)"


def transport(protocol: object) -> str:
    return "QUIC" if protocol == "quic" else "TCP"


def captured(ok: pd.DataFrame) -> pd.DataFrame:
    """The rows whose trial has a client capture in its run directory."""
    if "capture_files" not in ok or "run_dir" not in ok:
        return ok.iloc[0:0]
    pcap = rowschema.CAPTURE_FILES["pcap"]

    def has_pcap(files: object) -> bool:
        if not isinstance(files, list | tuple | np.ndarray):
            return False
        return any(str(f).endswith("/" + pcap) for f in files)

    return ok[ok["capture_files"].map(has_pcap)]


def measured_windows(ok: pd.DataFrame, evidence_of: Evidence | None = None) -> list[StackWindow]:
    """The initial window of every server × transport with captured trials."""
    rows = captured(ok)
    if rows.empty:
        return []
    if evidence_of is None:
        from .explain import evidence

        evidence_of = evidence
    rows = rows.assign(
        _transport=rows["protocol"].map(transport),
        _perf=rows["tool"].isin(PERF_TOOLS),
        _bytes=pd.to_numeric(rows.get("bytes"), errors="coerce").fillna(0),
    )
    out = []
    for (server, kind), group in rows.groupby(["server", "_transport"], sort=True):
        picked = group.sort_values(["_perf", "_bytes"], ascending=False).head(TRIALS_PER_STACK)
        window = _window(str(server), str(kind), picked, evidence_of)
        if window:
            out.append(window)
    return out


def _window(server: str, kind: str, picked: pd.DataFrame, evidence_of: Evidence) -> StackWindow | None:
    found = []
    for run_dir, trial_id in zip(picked["run_dir"], picked["trial_id"], strict=True):
        try:
            ev = evidence_of(Path(run_dir), str(trial_id))
        except AnalysisError:  # a capture without the trial's connection: no evidence from it
            continue
        if ev.get("initial_window_packets"):
            found.append((str(trial_id), ev))
    if not found:
        return None
    return StackWindow(
        server=server,
        transport=kind,
        packets=round(statistics.median(ev["initial_window_packets"] for _, ev in found)),
        bytes=round(statistics.median(ev["initial_window_bytes"] for _, ev in found)),
        reached=all(ev.get("initial_window_reached") for _, ev in found),
        trials=tuple(t for t, _ in found),
        flights=round(statistics.median(len(ev.get("rounds") or [1]) for _, ev in found)),
        response_bytes=round(
            statistics.median(sum(r["bytes"] for r in ev.get("rounds") or []) for _, ev in found)
        ),
    )


def windows_table(windows: list[StackWindow]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "stack": w.label,
                "initial window": w.size(),
                "response": f"{w.response_bytes / 1000:.1f} KB in {w.flights} flight(s)",
                "measured in": ", ".join(w.trials),
                "congestion control": "kernel's, set per condition (cubic unless swept)"
                if w.transport == "TCP"
                else "not measured (the capture and qlog name none)",
            }
            for w in windows
        ]
    )


def explain_gain_shrinks(windows: list[StackWindow]) -> str:
    """Why "the gain shrinks" did not hold, from the flights the captured responses took, or
    that they do not explain it. A response that needs a second flight over TCP (its initial
    window held only part of it) but one over QUIC costs TCP an extra round trip after the
    first byte: QUIC's gain then grows again from TTFB to download instead of shrinking."""
    tcp = [w for w in windows if w.transport == "TCP"]
    quic = [w for w in windows if w.transport == "QUIC"]
    if not tcp or not quic:
        return (
            "No captured trial measured both transports' flights, so no evidence explains this "
            "(run with `--capture pcap,keys`)."
        )
    tcp_flights = round(statistics.median(w.flights for w in tcp))
    fewer = [w for w in quic if w.flights < tcp_flights]
    tcp_part = (
        f"TCP's initial window of {_median_size(tcp)} held part of a "
        f"{statistics.median(w.response_bytes for w in tcp) / 1000:.1f} KB response, which took "
        f"{tcp_flights} flights"
    )
    if not fewer:
        return (
            f"The measured flights do not explain it: {tcp_part}, and no server's QUIC took fewer "
            f"({', '.join(f'{w.label}: {w.flights}' for w in quic)})."
        )
    quic_part = "; ".join(f"{w.label} ({w.size()}) took {w.flights}" for w in fewer)
    return (
        f"Explained by the measured flights: {tcp_part}; {quic_part}. The extra round trip "
        "comes after TCP's first byte, so QUIC's gain grows again from TTFB to download instead "
        "of shrinking."
    )


def _median_size(windows: list[StackWindow]) -> str:
    packets = round(statistics.median(w.packets for w in windows))
    return f"{packets} packets ({statistics.median(w.bytes for w in windows) / 1000:.1f} KB)"
