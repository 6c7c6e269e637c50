"""Generate (or check) the content the servers serve: every workload kind's, in the shared
cache (`make content`). What each kind makes is its own module's (workloads/); the store,
its manifest and lock are workloads/store.py.

    python -m quicbed.servers.content [ROOT] [--workloads web,cloud,video] [--files 1GB,...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quicbed.paths import CACHE
from quicbed.workloads import WORKLOADS, ensure_content
from quicbed.workloads.cloud import ensure_files
from quicbed.workloads.store import default_root, load_manifest, verify_content


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Generate (or check) the testbed's content.")
    ap.add_argument(
        "root",
        nargs="?",
        type=Path,
        default=None,
        help="default: the shared cache, " + str(CACHE / "content"),
    )
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--files", default="", help="extra cloud files, e.g. 200MB,1GB")
    ap.add_argument("--verify", action="store_true", help="re-hash every file against the manifest")
    args = ap.parse_args(argv)
    root = args.root or default_root()
    ensure_content(root, {w for w in args.workloads.split(",") if w})
    if args.files:
        ensure_files(root, [f for f in args.files.split(",") if f])
    files = load_manifest(root)["files"]
    print(f"{root}: {len(files)} files, {sum(e['size'] for e in files.values())} bytes")
    if args.verify:
        bad = verify_content(root)
        print("verify:", "ok" if not bad else f"{len(bad)} mismatches: {bad[:10]}")
        raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
