"""The DASH player the video workload is played in, served at content root `player/`:
dash.js's release file from the npm registry (version and integrity pinned in versions.env,
fetched once into the cache, never at run time) and the testbed's page (workloads/player/
index.html, qoe.js), which plays `/video/dash/manifest.mpd` and records the QoE metrics in
window.quicbedQoE. Also the player settings an experiment may give (`workload: {player:}`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

from quicbed.paths import CACHE, read_versions

from .base import Setting
from .store import ContentError, locked, up_to_date, write_atomic

PLAYER_DIR = "player"  # beside video/, which ensure_video remakes whole
SOURCES = Path(__file__).parent / "player"
DASHJS_FILE = "package/dist/modern/umd/dash.mediaplayer.min.js"  # in the npm tarball
REGISTRY = "https://registry.npmjs.org"


class PlayerError(ContentError):
    pass


_BUFFER, _ABR = ("buffer",), ("abr",)
# dash.js 5's rule names (its Settings.streaming.abr.rules); the defaults have the first five
# active except droppedFramesRule.
ABR_RULES = (
    "throughputRule",
    "bolaRule",
    "insufficientBufferRule",
    "switchHistoryRule",
    "droppedFramesRule",
    "abandonRequestsRule",
    "l2ARule",
    "loLPRule",
)
# The buffer and ABR settings a run may change, in the experiment's words (snake case, unit in
# the name). dash.js's defaults hold for whatever is not set, and every row records the
# settings in force (qoe.js reads them back from the player: `player_settings`).
SETTINGS: dict[str, Setting] = {
    "buffer_time_default_s": Setting((*_BUFFER, "bufferTimeDefault"), "number", 1, 120),
    "buffer_time_at_top_quality_s": Setting((*_BUFFER, "bufferTimeAtTopQuality"), "number", 1, 300),
    "buffer_to_keep_s": Setting((*_BUFFER, "bufferToKeep"), "number", 1, 300),
    "initial_buffer_level_s": Setting((*_BUFFER, "initialBufferLevel"), "number", 0, 120),
    "stall_threshold_s": Setting((*_BUFFER, "stallThreshold"), "number", 0.05, 5),
    "abr_rules": Setting((*_ABR, "rules"), "rules", choices=ABR_RULES, what="ABR rule"),
    "auto_switch_bitrate": Setting((*_ABR, "autoSwitchBitrate", "video"), "bool"),
    "initial_bitrate_kbps": Setting((*_ABR, "initialBitrate", "video"), "number", 1, 1e6),
    "min_bitrate_kbps": Setting((*_ABR, "minBitrate", "video"), "number", 1, 1e6),
    "max_bitrate_kbps": Setting((*_ABR, "maxBitrate", "video"), "number", 1, 1e6),
}


def dashjs_settings(chosen: dict[str, Any]) -> dict[str, Any]:
    """The experiment's validated settings as the object dash.js's updateSettings takes."""
    out: dict[str, Any] = {}
    for name, value in chosen.items():
        setting = SETTINGS[name]
        if setting.kind == "rules":
            value = {rule: {"active": rule in value} for rule in ABR_RULES}
        node = out.setdefault("streaming", {})
        for key in setting.path[:-1]:
            node = node.setdefault(key, {})
        node[setting.path[-1]] = value
    return out


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
            raise PlayerError(f"cannot fetch dash.js {version} from the npm registry: {exc}") from None
    algorithm, _, expected = integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise PlayerError(
            f"dash.js {version}: integrity {algorithm}-{actual[:16]}... is not "
            f"the pinned {integrity[:24]}... (versions.env DASHJS_INTEGRITY)"
        )
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
    params = {
        "dashjs": version,
        "page": hashlib.sha256(
            b"".join((SOURCES / n).read_bytes() for n in ("index.html", "qoe.js"))
        ).hexdigest(),
    }
    with locked(root) as manifest:
        if up_to_date(root, manifest, f"{PLAYER_DIR}/", params):
            return
        for rel, data in player_files().items():
            manifest["files"][rel] = write_atomic(root, rel, [data])
        manifest["params"]["player"] = params
