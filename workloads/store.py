"""The content store every workload kind writes its content into, and the servers serve.

Layout under a root (served as /srv/content, so URL path = relative path): one folder per
kind (web/, cloud/, video/, player/, ...) and manifest.json, the size and sha256 of every file
and the parameters each kind made its files with. Bytes come from SHAKE-128 keyed by the
file's name (`stream`), so every file is reproducible anywhere (no PRNG implementation drift).
Two runs may share a root: `locked` holds it while a kind updates the manifest.

The one module the kinds share for content (they own what they make, this owns how it is
written and found again), so a kind's module never repeats the locking or the manifest.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from quicbed.paths import CACHE, read_versions

MANIFEST = "manifest.json"
KiB, MiB, GiB = 1024, 1024**2, 1024**3
SEED = b"quicbed-content-v1"
CHUNK = 4 * MiB


class ContentError(RuntimeError):
    pass


def stream(name: str, size: int) -> Iterator[bytes]:
    """size incompressible bytes for this name: SHAKE-128(seed, name, block index)."""
    for index, offset in enumerate(range(0, size, CHUNK)):
        block = hashlib.shake_128(SEED + name.encode() + struct.pack(">Q", index))
        yield block.digest(min(CHUNK, size - offset))


def rng_bytes(name: str, size: int) -> bytes:
    return b"".join(stream(name, size))


@contextmanager
def locked(root: Path) -> Iterator[dict]:
    """Exclusive lock on root (two runs may share the cache) and the manifest to update."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = load_manifest(root)
        yield manifest
        manifest["files"] = dict(sorted(manifest["files"].items()))
        tmp = root / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
        tmp.replace(root / MANIFEST)


def load_manifest(root: Path) -> dict:
    try:
        manifest = json.loads((Path(root) / MANIFEST).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        manifest = {}
    manifest.setdefault("version", 1)
    manifest.setdefault("files", {})
    manifest.setdefault("params", {})
    return manifest


def is_current(root: Path, manifest: dict, rel: str) -> bool:
    """Listed and the right size: cheap enough to check on every run (no re-hash)."""
    entry = manifest["files"].get(rel)
    try:
        return entry is not None and (root / rel).stat().st_size == entry["size"]
    except FileNotFoundError:
        return False


def up_to_date(root: Path, manifest: dict, prefix: str, params: dict) -> bool:
    """Whether a kind's files under `prefix` were made with these parameters and are all there
    (a kind whose files are costly to make, or fetched, remakes them only when this is false)."""
    listed = [rel for rel in manifest["files"] if rel.startswith(prefix)]
    return (
        manifest["params"].get(prefix.rstrip("/")) == params
        and bool(listed)
        and all(is_current(root, manifest, rel) for rel in listed)
    )


def write_atomic(root: Path, rel: str, chunks: Iterable[bytes]) -> dict:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    digest, size = hashlib.sha256(), 0
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
            digest.update(chunk)
            size += len(chunk)
    tmp.replace(path)
    os.chmod(path, 0o644)  # nginx workers read as www-data
    return {"size": size, "sha256": digest.hexdigest()}


def hash_file(path: Path) -> dict:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def verify_content(root: Path) -> list[str]:
    """Files whose bytes no longer match manifest.json (slow: re-hashes everything)."""
    root = Path(root)
    return [
        rel
        for rel, entry in load_manifest(root)["files"].items()
        if not (root / rel).exists() or hash_file(root / rel) != entry
    ]


def default_root() -> Path:
    """The shared content cache, keyed by nothing but the content version."""
    return CACHE / "content" / read_versions().get("CONTENT_VERSION", "v1")
