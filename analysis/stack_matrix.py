"""The client x server matrix: one cell per profile, client and server, judged by the physics
every stack pair must obey (analysis/physics.py), so that a stack upgrade is a regression check.

- handshake: the connection time net of the client's CPU, in calibrated RTTs, against the
  protocol's count (QUIC 1, TLS 1.3 2, TLS 1.2 3) within max(+3 %, +1.5 ms): the rows' rule;
- goodput (downloads of 1 MB or more): the TCP model's time for the transfer (setup RTTs,
  request, slow start, the payload at line rate) over the measured one, at least
  GOODPUT_OF_MODEL. QUIC is held to the same arithmetic: a stack that cannot fill the link
  where TCP does is what the matrix is for.

A cell passes when every check it has passes on the median; the figure colours it so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .model import parse_size
from .physics import GOODPUT_OF_MODEL, HANDSHAKE_RTTS, net_connection_rtts, row_upper_rtts, tcp_download_s
from .stats import Estimate, median_ci

PASS, FAIL, NO_DATA = "pass", "fail", "n/a"
MIN_GOODPUT_BYTES = 1 << 20  # smaller downloads are mostly handshake and slow start
KEYS = ["profile", "client", "server"]  # profile: the condition's label (profile and swept values)


@dataclass(frozen=True)
class Cell:
    profile: str
    client: str
    server: str
    protocol: str
    n: int
    handshake: Estimate | None  # connection ÷ RTT, net of the client's CPU
    handshake_rtts: int | None  # what the protocol takes
    handshake_upper: float | None  # the most the rows' rule allows, in RTTs
    goodput: Estimate | None  # model time ÷ measured time

    @property
    def checks(self) -> dict[str, str]:
        out = {}
        if self.handshake and self.handshake.n and self.handshake_rtts and self.handshake_upper:
            low = self.handshake_rtts * 0.99
            out["handshake"] = PASS if low <= self.handshake.value <= self.handshake_upper else FAIL
        if self.goodput and self.goodput.n:
            out["goodput"] = PASS if self.goodput.value >= GOODPUT_OF_MODEL else FAIL
        return out

    @property
    def verdict(self) -> str:
        checks = self.checks.values()
        return NO_DATA if not checks else FAIL if FAIL in checks else PASS


def _handshake(rows: pd.DataFrame, protocol: str) -> tuple[Estimate | None, int | None, float | None]:
    rtts = HANDSHAKE_RTTS.get(protocol)
    usable = rows[rows["connection_time_ms"].notna() & (rows["calib_rtt_ms"] > 0)]
    if rtts is None or usable.empty:
        return None, rtts, None
    ratios = [
        net_connection_rtts(float(r.connection_time_ms), _num(r.get("client_cpu_ms")), float(r.calib_rtt_ms))
        for _, r in usable.iterrows()
    ]
    rtt = float(usable["calib_rtt_ms"].median())
    return median_ci(np.array(ratios)), rtts, row_upper_rtts(rtts, rtt)


def _goodput(rows: pd.DataFrame, protocol: str) -> Estimate | None:
    rtts = HANDSHAKE_RTTS.get(protocol)
    if rtts is None or "download_time_ms" not in rows or "rate_down_mbit" not in rows:
        return None
    if "loss_pct" in rows and (pd.to_numeric(rows["loss_pct"], errors="coerce").fillna(0) > 0).any():
        return None  # the model is of a lossless link; loss is the congestion section's
    ratios = []
    for _, r in rows.iterrows():
        size = parse_size(r.get("object"))
        took, rate, rtt = (
            _num(r.get("download_time_ms")),
            _num(r.get("rate_down_mbit")),
            _num(r.get("calib_rtt_ms")),
        )
        if size >= MIN_GOODPUT_BYTES and took and rate and rtt:
            ratios.append(tcp_download_s(size, rate, rtt, rtts) * 1000 / took)
    return median_ci(np.array(ratios)) if ratios else None


def _num(value: object) -> float | None:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return out if np.isfinite(out) else None


def cells(ok: pd.DataFrame) -> list[Cell]:
    """The matrix of a run's error-free rows that time a connection (the perf tools and the
    other stacks' clients), per profile, client and server."""
    if ok.empty or not set(KEYS) <= set(ok.columns) or "connection_time_ms" not in ok:
        return []
    rows = ok[ok["connection_time_ms"].notna()]
    if "condition_label" in rows:  # a sweep keeps its profile's name: one cell per point
        rows = rows.assign(profile=rows["condition_label"].fillna(rows["profile"]))
    if "page_load_time_ms" in rows:  # a browser's connection holds its CPU-bound start
        rows = rows[rows["page_load_time_ms"].isna()]
    out = []
    for (profile, client, server), group in rows.groupby(KEYS, sort=False):
        protocol = str(group["protocol"].iloc[0])
        hs, rtts, upper = _handshake(group, protocol)
        out.append(
            Cell(
                str(profile),
                str(client),
                str(server),
                protocol,
                len(group),
                hs,
                rtts,
                upper,
                _goodput(group, protocol),
            )
        )
    return out


def is_matrix(found: list[Cell]) -> bool:
    """Worth a matrix: several clients against several servers."""
    return len({c.client for c in found}) > 1 and len({c.server for c in found}) > 1


def cell_text(cell: Cell) -> str:
    parts = []
    if cell.handshake and cell.handshake.n:
        e = cell.handshake
        parts.append(f"{e.value:.2f} RTT [{e.lo:.2f}, {e.hi:.2f}]")
    if cell.goodput and cell.goodput.n:
        e = cell.goodput
        parts.append(f"{e.value:.2f} of model [{e.lo:.2f}, {e.hi:.2f}]")
    return "\n".join(parts) or NO_DATA


def matrix_table(found: list[Cell]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "profile": c.profile,
                "client": c.client,
                "server": c.server,
                "n": str(c.n),
                "connection (RTTs, net of client CPU)": cell_text(c).split("\n")[0] if c.handshake else "–",
                "expected": f"{c.handshake_rtts}..{c.handshake_upper:.3f}" if c.handshake_upper else "–",
                "goodput (model time ÷ measured)": next(
                    (t for t in cell_text(c).split("\n") if "model" in t), "–"
                ),
                "verdict": c.verdict,
            }
            for c in found
        ]
    )
