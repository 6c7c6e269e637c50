"""The replay server's own time (stacks/quicgo, quicgo_replay): per protocol, a request's time
on one kept connection over loopback less its recorded think time, for an entry with none and
one of 60 ms. The replay must answer within the origin's think time and add no delay of its
own (issue 50): the figure is the server's, plus loopback's round trip.

    .venv/bin/python bench/replay_bench.py [--requests N]
"""

from __future__ import annotations

import argparse
import re
import sys

from quicbed.gotool import run_go
from quicbed.paths import REPO

ROW = re.compile(
    r"^BenchmarkThinkTime/(\S+?)/wait=(\S+?)ms-\d+\s+(\d+)\s+\S+ ns/op"
    r"\s+(\S+) ms-over-wait-p50\s+(\S+) ms-over-wait-p95"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="per protocol and entry")
    args = parser.parse_args(argv)
    proc = run_go(
        ["test", "-count=1", "-run", "^$", "-bench", "ThinkTime", "-benchtime", f"{args.requests}x", "."],
        REPO / "stacks" / "quicgo",
    )
    rows = [m.groups() for line in proc.stdout.splitlines() if (m := ROW.match(line))]
    if proc.returncode != 0 or not rows:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        return 1
    print(f"{'protocol':<9} {'think time':>10} {'requests':>9} {'over it, p50':>13} {'p95':>8}")
    for proto, wait, n, p50, p95 in rows:
        print(f"{proto:<9} {wait + ' ms':>10} {n:>9} {float(p50):>10.3f} ms {float(p95):>5.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
