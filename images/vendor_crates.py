"""Vendor a Cargo.lock's crates for an offline `cargo build` inside `docker build`.

    python3 images/vendor_crates.py CARGO_LOCK DEST CACHE

Cargo inside `docker build` cannot verify TLS here (an egress proxy that only the host
trusts), as pip cannot; so the host fetches every crates.io package the lock file names from
static.crates.io into CACHE (once; each checked against the lock's sha256) and unpacks them
into DEST as a cargo directory source, which the image's .cargo/config.toml points crates-io
at. Only the standard library: it runs before any venv has what a build needs.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
import tomllib
import urllib.request
from pathlib import Path

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
DOWNLOAD = "https://static.crates.io/crates/{name}/{name}-{version}.crate"


class VendorError(Exception):
    """One line for the build's log."""


def registry_packages(lock: Path) -> list[tuple[str, str, str]]:
    """(name, version, sha256) of every crates.io package of the lock file."""
    try:
        data = tomllib.loads(lock.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise VendorError(f"{lock}: {exc}") from exc
    found = []
    for package in data.get("package", []):
        source = package.get("source")
        if source is None:
            continue  # the workspace's own crates
        if source != CRATES_IO or "checksum" not in package:
            raise VendorError(f"{lock}: {package.get('name')}: only crates.io packages can be vendored")
        found.append((package["name"], package["version"], package["checksum"]))
    return found


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch(name: str, version: str, checksum: str, cache: Path) -> Path:
    """The .crate file, from CACHE when it is there and whole, else downloaded and checked."""
    path = cache / f"{name}-{version}.crate"
    if path.is_file() and _sha256(path.read_bytes()) == checksum:
        return path
    url = DOWNLOAD.format(name=name, version=version)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except OSError as exc:
        raise VendorError(f"{url}: {exc}") from exc
    if _sha256(data) != checksum:
        raise VendorError(f"{url}: sha256 {_sha256(data)}, Cargo.lock says {checksum}")
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def unpack(crate: Path, checksum: str, dest: Path) -> None:
    """The crate's sources as DEST/<name>-<version>/ with the checksum file cargo wants of a
    directory source (the package's sha256; no per-file sums: the .crate's was checked)."""
    root = dest / crate.name.removesuffix(".crate")
    with tarfile.open(crate, "r:gz") as tar:
        members = tar.getmembers()
        for member in members:
            # Debian 12's Python 3.11.2 has no extraction filter: refuse what would escape.
            inside = (dest / member.name).resolve().is_relative_to(root.resolve())
            if not inside or not (member.isfile() or member.isdir()):
                raise VendorError(f"{crate.name}: unexpected member {member.name!r}")
        tar.extractall(dest, members=members)
    (root / ".cargo-checksum.json").write_text(json.dumps({"files": {}, "package": checksum}))


def vendor(lock: Path, dest: Path, cache: Path) -> int:
    packages = registry_packages(lock)
    cache.mkdir(parents=True, exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    for name, version, checksum in packages:
        unpack(fetch(name, version, checksum, cache), checksum, dest)
    return len(packages)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: vendor_crates.py CARGO_LOCK DEST CACHE", file=sys.stderr)
        return 2
    lock, dest, cache = (Path(a) for a in argv)
    try:
        count = vendor(lock, dest, cache)
    except VendorError as exc:
        print(f"images: vendoring crates: {exc}", file=sys.stderr)
        return 1
    print(f"images: {count} crates of {lock.name} vendored into {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
