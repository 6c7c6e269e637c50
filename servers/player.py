"""The DASH player the servers serve (content root `player/`): dash.js's release file from the
npm registry (version and integrity pinned in versions.env, fetched once into the cache, never
at run time) and the testbed's page (servers/player/index.html, qoe.js), which plays
`/video/dash/manifest.mpd` and records the QoE metrics in window.quicbedQoE.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import urllib.request
from pathlib import Path

from quicbed.paths import CACHE, read_versions

from . import content

PLAYER_DIR = "player"  # beside video/, which ensure_video remakes whole
PAGE = f"{PLAYER_DIR}/index.html"
SOURCES = Path(__file__).parent / "player"
DASHJS_FILE = "package/dist/modern/umd/dash.mediaplayer.min.js"  # in the npm tarball
REGISTRY = "https://registry.npmjs.org"


class PlayerError(content.ContentError):
    pass


def dashjs_release() -> tuple[str, str]:
    versions = read_versions()
    return versions["DASHJS_VERSION"], versions["DASHJS_INTEGRITY"]


def dashjs_tarball(cache: Path = CACHE / "npm") -> bytes:
    """The pinned dash.js tarball, from the cache or fetched once; its npm integrity checked."""
    version, integrity = dashjs_release()
    path = cache / f"dashjs-{version}.tgz"
    if path.is_file():
        data = path.read_bytes()
    else:
        url = f"{REGISTRY}/dashjs/-/dashjs-{version}.tgz"
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                data = response.read()
        except OSError as exc:
            raise PlayerError(f"cannot fetch dash.js {version} from the npm registry: {exc}"
                              ) from None
    algorithm, _, expected = integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise PlayerError(f"dash.js {version}: integrity {algorithm}-{actual[:16]}... is not "
                          f"the pinned {integrity[:24]}... (versions.env DASHJS_INTEGRITY)")
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return data


def player_files() -> dict[str, bytes]:
    """content-root path -> bytes: the page, its script and dash.js."""
    with tarfile.open(fileobj=io.BytesIO(dashjs_tarball())) as tar:
        member = tar.extractfile(DASHJS_FILE)
        if member is None:
            raise PlayerError(f"the dash.js tarball has no {DASHJS_FILE}")
        files = {f"{PLAYER_DIR}/dash.mediaplayer.min.js": member.read()}
    for name in ("index.html", "qoe.js"):
        files[f"{PLAYER_DIR}/{name}"] = (SOURCES / name).read_bytes()
    return files


def ensure_player(root: Path) -> None:
    """Write the player under root (idempotent: a file is rewritten only when it changed)."""
    root = Path(root)
    version, _ = dashjs_release()
    params = {"dashjs": version, "page": hashlib.sha256(
        b"".join((SOURCES / n).read_bytes() for n in ("index.html", "qoe.js"))).hexdigest()}
    with content.locked(root) as manifest:
        listed = [rel for rel in manifest["files"] if rel.startswith(f"{PLAYER_DIR}/")]
        if (manifest["params"].get("player") == params and listed
                and all(content.is_current(root, manifest, rel) for rel in listed)):
            return
        for rel, data in player_files().items():
            manifest["files"][rel] = content.write_atomic(root, rel, [data])
        manifest["params"]["player"] = params
