"""Prepare the directory docker-compose.yml mounts: content, a fresh PKI, log dirs.

    python -m quicbed.servers.prepare_compose [DIR] [--workloads web,cloud,video]

DIR defaults to $QUICBED_STATE/compose (/var/lib/quicbed/compose), which is also the
compose file's default; pass another DIR and export QUICBED_COMPOSE_DIR=DIR to match.
Content stays in the shared cache; DIR/content is a symlink to it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quicbed.paths import STATE
from quicbed.servers import SERVERS, pki
from quicbed.workloads import WORKLOADS, ensure_content
from quicbed.workloads.cloud import ensure_files
from quicbed.workloads.store import default_root

# Server -> the port docker-compose.yml publishes it on: its descriptor's compose_port.
PORTS = {name: spec.compose_port for name, spec in SERVERS.items() if spec.compose_port}


def prepare(out: Path, workloads: set[str], cloud: list[str]) -> pki.Pki:
    out.mkdir(parents=True, exist_ok=True)
    root = ensure_content(default_root(), workloads)
    if cloud:
        ensure_files(root, cloud)
    link = out / "content"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(root.resolve(), target_is_directory=True)
    for name in PORTS:
        (out / "logs" / name).mkdir(parents=True, exist_ok=True)
    # Published on 127.0.0.1 only, so the certificate's IP SAN is loopback.
    return pki.generate_pki(out / "pki", "127.0.0.1")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", type=Path, default=STATE / "compose")
    ap.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"comma-separated subset of {','.join(WORKLOADS)}"
    )
    ap.add_argument("--cloud", default="", help="extra cloud files, e.g. 100MB,1GB")
    args = ap.parse_args(argv)
    workloads = {w for w in args.workloads.split(",") if w}
    cloud = [c for c in args.cloud.split(",") if c]
    p = prepare(args.dir, workloads, cloud)
    print(f"compose dir: {args.dir} (content -> {(args.dir / 'content').resolve()})")
    print(f"CA: {p.ca}   Chromium SPKI: {p.spki_sha256}")
    for name, port in PORTS.items():
        print(f"{name}: curl --http3-only --cacert {p.ca} https://127.0.0.1:{port}/web/index.html")


if __name__ == "__main__":
    main()
