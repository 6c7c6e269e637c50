"""`python -m quicbed.analysis RUN_ID... [--out DIR]`: the report without the CLI."""

from __future__ import annotations

import argparse
import sys

from .report import main_report


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m quicbed.analysis", description="Write the report of one or more runs."
    )
    parser.add_argument("runs", nargs="+", help="run ids (under the results root) or paths")
    parser.add_argument("--out", help="output directory (default: <run>/report)")
    args = parser.parse_args()
    return main_report(args.runs, args.out)


if __name__ == "__main__":
    sys.exit(main())
