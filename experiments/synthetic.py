"""A network-free Executor returning physically plausible rows (handshake RTTs, rate-bound
transfers). For tests of the run/resume/check logic and for trying the CLI without Docker; it
measures nothing. `python -m quicbed.experiments.synthetic FILE [--resume ID] [--delay S]`.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from quicbed.workloads import object_bytes

from .matrix import Condition, Trial
from .registry import HANDSHAKE_RTTS
from .runner import TrialError

VIDEO_BIT_RATE = 2.628e6  # the ladder's top rendition and its audio (workloads/video.py)


class SyntheticExecutor:
    backend = "synthetic"  # what its calibration records as the link backend

    def __init__(self, delay_s: float = 0.0, seed: int = 0, fail: set[str] | None = None):
        self.delay_s, self.seed = delay_s, seed
        self.fail = fail or set()  # trial ids that raise TrialError
        self.servers: set[str] = set()

    @contextmanager
    def condition(self, cond: Condition) -> Iterator[dict[str, Any]]:
        self.servers.clear()
        # The executor's summary, the whole record one level down (quicbed/runmanifest.py).
        record = {"profile": cond.profile, "backend": self.backend, "checks": [], "passed": True}
        yield {"rtt_ms": cond.link.rtt_ms, "passed": True, "forced": False, "calibration": record}
        self.servers.clear()

    def ensure_server(self, name: str) -> None:
        self.servers.add(name)

    def run_trial(self, trial: Trial) -> dict[str, Any]:
        time.sleep(self.delay_s)
        if trial.trial_id in self.fail:
            raise TrialError("synthetic failure")
        rng = random.Random(f"{self.seed}/{trial.trial_id}")
        link = trial.condition.link
        rtt = link.rtt_ms * rng.uniform(1.0, 1.02)  # the path, plus the server's own time
        client_cpu = rng.uniform(0.5, 3.0)  # the client's own time, which it reports
        connect = HANDSHAKE_RTTS.get(trial.client.protocol, 2) * rtt + client_cpu
        ttfb = connect + rtt
        size = object_bytes(trial.workload.kind, trial.object)
        download = ttfb + size * 8 / (link.down.rate_mbit * 1e3)
        if trial.workload.duration_s:  # a stream, paced by its playout: its length
            size = int(trial.workload.duration_s * VIDEO_BIT_RATE / 8)
            download = ttfb + trial.workload.duration_s * 1e3
        return {
            "tool": trial.client.tool,
            "connection_time_ms": round(connect, 3),
            "client_cpu_ms": round(client_cpu, 3),
            "ttfb_ms": round(ttfb, 3),
            "download_time_ms": round(download, 3),
            "throughput_mbps": round(size * 8 / (download * 1e3), 3) if download else None,
            "bytes": size,
            "http_status": 200,
        }

    def manifest_info(self) -> dict[str, Any]:
        return {"backend": "synthetic", "delay_s": self.delay_s}


def _factory(delay_s: float):  # a plain closure: Ray ships it to workers
    return lambda exp, run_dir: SyntheticExecutor(delay_s)


def main(argv: list[str] | None = None) -> int:
    from .commands import cmd_run
    from .options import RunOptions

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("file")
    ap.add_argument("--resume", metavar="RUN_ID")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--ray", metavar="ADDRESS", help="each condition on a Ray cluster's worker")
    ap.add_argument("--ray-retries", type=int, default=1)
    args = ap.parse_args(argv)
    opts = RunOptions(
        resume=args.resume,
        quick=args.quick,
        check_after=args.check,
        progress=not args.no_progress,
        ray=args.ray,
        ray_retries=args.ray_retries,
    )
    return cmd_run(args.file, _factory(args.delay), opts)


if __name__ == "__main__":
    sys.exit(main())
