"""Benchmark of the bottleneck queue (`aqm`) on a backend whose kernel has the qdiscs (not a
test: it prints figures). For each queue, one calibration of the profile: the flows' RTT under
load (median of their per-second sRTTs, the figure calibration judges for an AQM) against base
+ the full queue (drop-tail) or base + target (an AQM), the ping beside them, the queue's drops
and the goodput ÷ rate.

    .venv/bin/python bench/aqm_bench.py [--profile india] [--backend vm] [--queues droptail fq_codel ...]
"""

from __future__ import annotations

import argparse
import sys

from quicbed.topology.calibrate import Calibration, calibrate
from quicbed.topology.net import HostSpec, Testbed, TestbedConfig
from quicbed.topology.profiles import apply_overrides, load_profile

QUEUES = ("droptail", "fq_codel", "codel", "cake", "pie", "fq")


def bench_queue(profile_name: str, queue: str, backend: str, image: str) -> tuple[Calibration, str]:
    profile = apply_overrides(load_profile(profile_name), {"aqm": queue})
    cfg = TestbedConfig(profile=profile, backend=backend, client=HostSpec(image), servers=(HostSpec(image),))
    with Testbed(cfg) as tb:
        cal = calibrate(tb, rtt_samples=20, udp_packets=2000, goodput_seconds=5.0)
        return cal, tb.backend.name if tb.backend else "?"


def _check(cal: Calibration, metric: str, direction: str) -> tuple[float, str, str]:
    for c in cal.checks:
        if c.metric == metric and c.direction == direction:
            return float(c.measured), c.tolerance, c.detail
    return float("nan"), "", ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="india")
    parser.add_argument("--backend", default="vm", help="a backend whose kernel has the qdiscs: vm or netem")
    parser.add_argument("--queues", nargs="+", default=list(QUEUES))
    parser.add_argument("--image", default="debian:trixie-slim")
    args = parser.parse_args()
    rows = []
    for queue in args.queues:
        cal, backend = bench_queue(args.profile, queue, args.backend, args.image)
        loaded, band, detail = _check(cal, "rtt_loaded_ms", "up")
        goodput = _check(cal, "goodput_mbit", "up")[0]
        rate = load_profile(args.profile).up.rate_mbit
        leaf = _check(cal, "queue_discipline", "up")[2].split("; ")
        rows.append(
            (queue, backend, loaded, band, detail.split("; ")[-1], goodput / rate, leaf[-1], cal.passed)
        )
    print(f"\nbottleneck queues on {args.profile} (the up direction's flows under load)")
    print(
        f"{'queue':<10}{'backend':<9}{'flows RTT':>10}  {'expected':<24}{'goodput÷rate':>13}  "
        f"{'calibration':<12}ping; drops"
    )
    for queue, backend, loaded, band, ping, ratio, drops, passed in rows:
        print(
            f"{queue:<10}{backend:<9}{loaded:>10.1f}  {band:<24}{ratio:>13.3f}  "
            f"{'pass' if passed else 'FAIL':<12}{ping}; {drops}"
        )
    print(
        "(flows RTT: median of the saturating flows' per-second sRTTs; expected: base + the full"
        " queue for drop-tail (reported), base + target for an AQM (judged); the goodput of an AQM"
        " link is proven under drop-tail first, then 4 flows load the AQM)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
