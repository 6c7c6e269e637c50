"""Load a run's rows with pandas and draw one figure: connection time by protocol, per
condition. For students who analyse their own runs; it works the same line by line in a
Jupyter notebook (`%run labs/plot_run.py RUN_ID` or paste the body of main).

    python labs/plot_run.py RUN_ID_OR_DIR [--out figure.png]

RUN is an id under results/ or a run directory (`quicbed run` prints it). Try it without a
testbed on a synthetic run: `python -m quicbed.experiments.synthetic
experiments/ci/handshake.yaml --quick` writes one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, no display (a notebook draws inline anyway)
import matplotlib.pyplot as plt
import pandas as pd

from quicbed.analysis import load_runs


def connection_times(run: str) -> pd.DataFrame:
    """Median connection time (ms) per condition and protocol, from the run's good rows."""
    rows, _manifests = load_runs([run])
    good = rows[rows["error"].isna() | (rows["error"] == "")]
    return good.pivot_table(
        index="condition_label", columns="protocol", values="connection_time_ms", aggfunc="median"
    )


def draw(table: pd.DataFrame, out: Path) -> Path:
    ax = table.plot.bar(rot=0, figsize=(7, 4))
    ax.set_xlabel("condition")
    ax.set_ylabel("median connection time (ms)")
    ax.set_title("Fresh connections by protocol")
    plt.tight_layout()
    plt.savefig(out, dpi=120)
    plt.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--out", default="connection_time.png")
    args = ap.parse_args(argv)
    table = connection_times(args.run)
    print(table.round(1).to_string())
    print(f"wrote {draw(table, Path(args.out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
