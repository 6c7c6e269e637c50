"""What a fresh calibration costs, per path (issue 65; prints figures, asserts nothing).

For each path: bring it up, calibrate it as a run does (calibrate()'s defaults), and print
the calibration's wall time, whether it passed, and what each sized check used: the loss
probe's datagrams per direction and whether they decided, the goodput's ramp and intervals.
The host's steal over each calibration is printed beside it (read it before the times).

    .venv/bin/python bench/calibration_bench.py [--paths india germany dsl india:loss_pct=10]
        [--backend auto] [--reps 1]
"""

from __future__ import annotations

import argparse
import re

from quicbed import hostload
from quicbed.topology.calibrate import Calibration, calibrate
from quicbed.topology.net import Testbed, TestbedConfig
from quicbed.topology.profiles import Profile, load_profile

PATHS = ("india", "germany", "dsl", "india:loss_pct=10")


def _profile(path: str) -> Profile:
    name, _, override = path.partition(":")
    key, _, value = override.partition("=")
    return load_profile(name, {key: value} if key else None)


def _sized(cal: Calibration) -> str:
    parts = []
    for check in cal.checks:
        if check.metric == "loss_pct":
            sent = re.search(r"of (\d+) datagrams", check.detail)
            state = "decided" if "; decided" in check.detail else "cap"
            parts.append(f"loss {check.direction} {sent.group(1) if sent else '?'} ({state})")
        if check.metric == "goodput_mbit":
            ramp = re.search(r"after a ([0-9.]+) s ramp, median of (\d+)", check.detail)
            if ramp:
                parts.append(f"goodput {check.direction} ramp {ramp.group(1)} s, {ramp.group(2)} intervals")
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", nargs="+", default=list(PATHS))
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    print(f"{'path':<20} {'backend':<10} {'seconds':>8} {'passed':>7} {'steal':>6}  sized checks")
    for path in args.paths:
        for _ in range(args.reps):
            with Testbed(TestbedConfig(profile=_profile(path), backend=args.backend)) as tb:
                before = hostload.cpu_jiffies()
                cal = calibrate(tb)
                steal = hostload.steal_share(before, hostload.cpu_jiffies())
            shown = "n/a" if steal is None else f"{100 * steal:.1f}%"
            figures = f"{cal.duration_s:>8.1f} {cal.passed!s:>7} {shown:>6}"
            print(f"{path:<20} {cal.backend:<10} {figures}  {_sized(cal)}")


if __name__ == "__main__":
    main()
