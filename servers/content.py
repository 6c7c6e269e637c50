"""Deterministic content for the three workloads, generated into a cache directory.

Layout under root (served as /srv/content, so URL path = relative path):
  web/index.html, web/sample.{css,js,png,json,pdf,svg}   one object per type
  web/pages/<site>/index.html + its css/js/img/json/pdf   landing pages, ~40 KB at the median
  cloud/1KB ... cloud/2GB                                 incompressible, made on demand only
  video/dash/manifest.mpd + segments                      144p-720p ladder, 2 s segments
  video/progressive/{1,10,50,100}MB.mp4                   progressive-download MP4s
  manifest.json                                           size + sha256 of every file

Bytes come from SHAKE-128 keyed by the file's name, so every file is reproducible anywhere
(no PRNG implementation drift) and cloud files are incompressible. Video goes through ffmpeg
and is reproducible only for the same ffmpeg build; the manifest records what was made.
A second call is fast: files listed in manifest.json with the right size are not redone.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import struct
import subprocess
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from quicbed.dockercli import PULL_NEVER, docker, image_present
from quicbed.paths import CACHE, REPO, read_versions
from quicbed.topology.hosts import LABEL
from quicbed.topology.marker import scope

WORKLOADS = ("web", "cloud", "video")
MANIFEST = "manifest.json"
KiB, MiB, GiB = 1024, 1024**2, 1024**3
# Binary units: "1MB" is 1 MiB. Throughput is computed from the manifest's exact sizes.
CLOUD_SIZES = {
    "1KB": KiB,
    "2KB": 2 * KiB,
    "5KB": 5 * KiB,
    "1MB": MiB,
    "2MB": 2 * MiB,
    "5MB": 5 * MiB,
    "10MB": 10 * MiB,
    "20MB": 20 * MiB,
    "50MB": 50 * MiB,
    "100MB": 100 * MiB,
    "200MB": 200 * MiB,
    "500MB": 500 * MiB,
    "1GB": GiB,
    "2GB": 2 * GiB,
}
# Made by ensure_content(..., {"cloud"}); the rest only when asked for by name.
CLOUD_DEFAULT = ("1KB", "2KB", "5KB", "1MB", "2MB", "5MB", "10MB", "20MB")
SEED = b"quicbed-content-v1"
CHUNK = 4 * MiB


class ContentError(RuntimeError):
    pass


# ---------------------------------------------------------------- deterministic bytes


def stream(name: str, size: int) -> Iterator[bytes]:
    """size incompressible bytes for this name: SHAKE-128(seed, name, block index)."""
    for index, offset in enumerate(range(0, size, CHUNK)):
        block = hashlib.shake_128(SEED + name.encode() + struct.pack(">Q", index))
        yield block.digest(min(CHUNK, size - offset))


def _rng_bytes(name: str, size: int) -> bytes:
    return b"".join(stream(name, size))


class _Words:
    """Deterministic pseudo-text: realistic (compressible) like real HTML/CSS/JS."""

    VOCAB = (
        "the quick network protocol stream packet latency handshake server client "
        "page image style script cloud video segment bandwidth delay loss window "
        "congestion secure transport layer record browser cache request response "
        "header payload frame connection session router queue buffer rate"
    ).split()

    def __init__(self, name: str):
        self.data = _rng_bytes("words:" + name, 1 << 16)
        self.pos = 0

    def byte(self) -> int:
        b = self.data[self.pos % len(self.data)]
        self.pos += 1
        return b

    def word(self) -> str:
        return self.VOCAB[self.byte() % len(self.VOCAB)]

    def sentence(self, n: int = 12) -> str:
        return " ".join(self.word() for _ in range(n)).capitalize() + "."


def _fill(target: int, make: Callable[[int], str], head: str = "", tail: str = "") -> bytes:
    """head + repeated make(i) + tail, cut to exactly target bytes (ASCII only)."""
    parts, size, i = [head], len(head) + len(tail), 0
    while size < target:
        piece = make(i)
        parts.append(piece)
        size += len(piece)
        i += 1
    body = "".join(parts)[: max(0, target - len(tail))]
    return (body + tail).encode()


# ---------------------------------------------------------------- web object types


def make_css(name: str, size: int) -> bytes:
    w = _Words(name)
    return _fill(
        size,
        lambda i: (
            f".{w.word()}-{i} {{ margin: {w.byte() % 32}px; padding: {w.byte() % 16}px; "
            f"color: #{w.byte():02x}{w.byte():02x}{w.byte():02x}; "
            f"font-size: {10 + w.byte() % 12}px; }}\n"
        ),
        head=f"/* {name} (quicbed synthetic stylesheet) */\n",
    )


def make_js(name: str, size: int) -> bytes:
    w = _Words(name)
    return _fill(
        size,
        lambda i: (
            f"function {w.word()}_{i}(a, b) {{\n  const {w.word()} = a * {w.byte()} + b;\n"
            f"  return '{w.sentence(6)}'.length + {w.word()};\n}}\n"
        ),
        head=f"// {name} (quicbed synthetic script)\n'use strict';\n",
    )


def make_json(name: str, size: int) -> bytes:
    w = _Words(name)
    return _fill(
        size,
        lambda i: (
            ("" if i == 0 else ",\n")
            + json.dumps({"id": i, "title": w.sentence(4), "tags": [w.word(), w.word()], "score": w.byte()})
        ),
        head='{"items": [\n',
        tail="\n]}\n",
    )


def make_svg(name: str, size: int) -> bytes:
    w = _Words(name)
    return _fill(
        size,
        lambda i: (
            f'<circle cx="{w.byte()}" cy="{w.byte()}" r="{1 + w.byte() % 20}" '
            f'fill="#{w.byte():02x}{w.byte():02x}{w.byte():02x}"/>\n'
        ),
        head='<svg xmlns="http://www.w3.org/2000/svg" width="256" height="256">\n',
        tail="</svg>\n",
    )


def make_png(name: str, size: int) -> bytes:
    """A valid RGB PNG of about size bytes; noisy pixels, stored (level 0) deflate, like a photo."""
    width = 128
    row = 1 + 3 * width
    height = max(1, (size - 100) // row)
    raw = _rng_bytes("png:" + name, row * height)
    # Filter byte 0 at the start of every row.
    pixels = b"".join(b"\x00" + raw[r * row + 1 : (r + 1) * row] for r in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(pixels, 0))
        + chunk(b"IEND", b"")
    )


def make_pdf(name: str, size: int) -> bytes:
    """A valid one-page PDF with a text stream, padded to about size bytes."""
    w = _Words(name)
    lines: list[str] = []
    text_size = max(200, size - 700)
    while sum(len(x) for x in lines) < text_size:
        lines.append(f"({w.sentence(10)}) Tj T*\n")
    content = ("BT /F1 10 Tf 12 TL 50 780 Td\n" + "".join(lines) + "ET\n").encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"endstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _fill_paragraphs(target: int, head: str, tail: str, text: Callable[[int], str]) -> bytes:
    """head + <p>text</p> paragraphs + tail, exactly target bytes (ASCII only). Whole
    paragraphs while they fit; the last one's text is shortened (never a tag cut in two)."""
    room = target - len(head) - len(tail)
    if room < 0:
        raise ValueError(f"{target} bytes cannot hold the page's {len(head) + len(tail)} bytes of tags")
    parts, size, i = [head], 0, 0
    while True:
        piece = f"<p>{text(i)}</p>\n"
        if size + len(piece) > room:
            break
        parts.append(piece)
        size += len(piece)
        i += 1
    rest = room - size
    empty = len("<p></p>\n")
    # piece did not fit, so its text is longer than rest - empty: a prefix of it fills exactly.
    parts.append(f"<p>{piece[3:3 + rest - empty]}</p>\n" if rest > empty else "\n" * rest)
    parts.append(tail)
    return "".join(parts).encode()


def make_html(name: str, size: int, refs: Iterable[str] = ()) -> bytes:
    """An HTML page that makes a browser fetch every ref: stylesheets in <head> (render-
    blocking), data (json, pdf) preloaded from <head> and linked in the body, images inline,
    scripts at the end of <body>. Text paragraphs fill it to exactly size bytes."""
    w = _Words(name)
    refs = list(refs)
    data = [r for r in refs if r.endswith((".pdf", ".json"))]
    # use-credentials: the same connection as the page's other requests (an anonymous CORS
    # request would go on a connection of its own).
    head = "".join(f'<link rel="stylesheet" href="{r}">\n' for r in refs if r.endswith(".css")) + "".join(
        f'<link rel="preload" href="{r}" as="fetch" crossorigin="use-credentials">\n' for r in data
    )
    body = "".join(
        f'<img src="{r}" alt="{w.word()}" width="128">\n' for r in refs if r.endswith((".png", ".svg"))
    ) + "".join(f'<a href="{r}">{w.word()}</a>\n' for r in data)
    scripts = "".join(f'<script src="{r}"></script>\n' for r in refs if r.endswith(".js"))
    start = (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{name}</title>\n{head}</head>\n<body>\n<h1>{w.sentence(5)}</h1>\n{body}"
    )
    end = f"{scripts}</body>\n</html>\n"
    return _fill_paragraphs(size, start, end, lambda i: w.sentence(14))


# Per-type objects at web/ (sizes near the HTTP Archive's medians per type, rounded).
WEB_OBJECTS = {
    "web/sample.css": (make_css, 20 * KiB),
    "web/sample.js": (make_js, 30 * KiB),
    "web/sample.png": (make_png, 15 * KiB),
    "web/sample.svg": (make_svg, 4 * KiB),
    "web/sample.json": (make_json, 5 * KiB),
    "web/sample.pdf": (make_pdf, 50 * KiB),
}
# Landing pages: (html KiB, [(kind, KiB), ...]). Totals 18/30/40/56/90 KiB: median 40 KiB.
LANDING_PAGES = {
    "news": (8, [("css", 4), ("js", 3), ("png", 3)]),
    "shop": (10, [("css", 6), ("js", 8), ("png", 4), ("json", 2)]),
    "blog": (12, [("css", 6), ("js", 10), ("png", 6), ("svg", 2), ("json", 4)]),
    "portal": (14, [("css", 8), ("js", 16), ("png", 8), ("png", 6), ("json", 4)]),
    "media": (16, [("css", 10), ("js", 24), ("png", 12), ("png", 10), ("svg", 4), ("pdf", 14)]),
}
_MAKERS = {
    "css": make_css,
    "js": make_js,
    "png": make_png,
    "svg": make_svg,
    "json": make_json,
    "pdf": make_pdf,
}


def web_files() -> dict[str, bytes]:
    files = {rel: make(rel, size) for rel, (make, size) in WEB_OBJECTS.items()}
    files["web/index.html"] = make_html(
        "web/index.html",
        12 * KiB,
        ["sample.css", "sample.png", "sample.svg", "sample.json", "sample.pdf", "sample.js"],
    )
    for site, (html_kib, assets) in LANDING_PAGES.items():
        refs = []
        for i, (kind, kib) in enumerate(assets):
            rel = f"asset{i}.{kind}"
            files[f"web/pages/{site}/{rel}"] = _MAKERS[kind](f"{site}/{rel}", kib * KiB)
            refs.append(rel)
        files[f"web/pages/{site}/index.html"] = make_html(site, html_kib * KiB, refs)
    return files


# ---------------------------------------------------------------- manifest and locking


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


def _hash_file(path: Path) -> dict:
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
        if not (root / rel).exists() or _hash_file(root / rel) != entry
    ]


# ---------------------------------------------------------------- workloads


def _ensure_web(root: Path, manifest: dict) -> None:
    # The web files are made in memory anyway: their digests also catch a cache made by an
    # older generator (same sizes, other bytes, e.g. a landing page whose tag was cut).
    for rel, data in web_files().items():
        if (
            not is_current(root, manifest, rel)
            or manifest["files"][rel].get("sha256") != hashlib.sha256(data).hexdigest()
        ):
            manifest["files"][rel] = write_atomic(root, rel, [data])


def ensure_files(root: Path, names: Iterable[str]) -> list[Path]:
    """Cloud-storage files by name (1KB ... 2GB), made only if missing. Returns their paths."""
    root = Path(root)
    names = list(names)
    unknown = [n for n in names if n not in CLOUD_SIZES]
    if unknown:
        raise ContentError(f"unknown cloud file(s) {unknown}; valid: {', '.join(CLOUD_SIZES)}")
    with locked(root) as manifest:
        for name in names:
            rel = f"cloud/{name}"
            if not is_current(root, manifest, rel):
                free = shutil.disk_usage(root).free
                if free < CLOUD_SIZES[name] + GiB:
                    raise ContentError(f"{rel} needs {CLOUD_SIZES[name]} bytes; {free} free")
                manifest["files"][rel] = write_atomic(root, rel, stream(rel, CLOUD_SIZES[name]))
    return [root / "cloud" / n for n in names]


def ensure_content(root: Path, workloads: set[str], video_seconds: int | None = None) -> Path:
    """Make the content of these workloads under root (idempotent; fast when already there).
    The video is VIDEO_SECONDS long unless asked otherwise: one length for every caller, since
    a cache remade at another length costs every later caller an encode (80 s here)."""
    root = Path(root)
    bad = set(workloads) - set(WORKLOADS)
    if bad:
        raise ContentError(f"unknown workload(s) {sorted(bad)}; valid: {', '.join(WORKLOADS)}")
    if "web" in workloads:
        with locked(root) as manifest:
            _ensure_web(root, manifest)
    if "cloud" in workloads:
        ensure_files(root, CLOUD_DEFAULT)
    if "video" in workloads:
        ensure_video(root, video_seconds or VIDEO_SECONDS)
    return root


# ---------------------------------------------------------------- video (ffmpeg)

# (name, width, height, video kbit/s). Heights are the usual ladder; setdar=16/9 makes every
# rendition the same display aspect, which the DASH muxer requires ("Conflicting aspect
# ratios") when widths like 426 and 854 are not exactly 16:9.
LADDER = [
    ("144p", 256, 144, 150),
    ("240p", 426, 240, 300),
    ("360p", 640, 360, 700),
    ("480p", 854, 480, 1200),
    ("720p", 1280, 720, 2500),
]
AUDIO_KBPS = 128
VIDEO_SECONDS = 180  # the paper streamed for 3 minutes; experiments play up to this much
FPS = 30
SEGMENT_SECONDS = 2
PROGRESSIVE_MB = (1, 10, 50, 100)
PROGRESSIVE_KBPS = 4000  # 720p; the files are cut to length from a looped clip
TOOLS_IMAGE = "quicbed/tools:dev"


def ffmpeg_runner(root: Path) -> tuple[list[str], str]:
    """argv prefix running ffmpeg with root visible, and root's path as ffmpeg sees it.

    ffmpeg on the host if installed, else the quicbed/tools image (images/build.sh tools).
    """
    if shutil.which("ffmpeg"):
        return ["ffmpeg"], str(root)
    if not image_present(TOOLS_IMAGE):
        raise ContentError(
            f"video needs ffmpeg: install it on the host or build {TOOLS_IMAGE} "
            f"({REPO}/images/build.sh tools)"
        )
    return [
        "docker",
        "run",
        "--rm",
        *PULL_NEVER,
        "--label",
        LABEL,  # `quicbed clean` finds one left by a killed run
        *(["--label", f"{LABEL}.scope={owner}"] if (owner := scope()) else []),
        "--network",
        "none",
        "-v",
        f"{root.resolve()}:/work",
        "-w",
        "/work",
        TOOLS_IMAGE,
        "ffmpeg",
    ], "/work"


def _ffmpeg(prefix: list[str], args: list[str], timeout: float) -> None:
    """Run ffmpeg; a container of it is removed when the call ends early (a timeout, Ctrl-C):
    stopping the docker client alone leaves it encoding, and its CPU skews the next path."""
    container = None
    if prefix[0] == "docker":
        container = f"quicbed-ffmpeg-{os.getpid()}-{secrets.token_hex(4)}"
        prefix = [*prefix[:2], "--name", container, *prefix[2:]]
    cmd = [*prefix, "-hide_banner", "-loglevel", "error", "-y", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except BaseException:
        if container:
            docker("rm", "-f", container)
        raise
    if proc.returncode != 0:
        raise ContentError(f"ffmpeg failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")


def _source_args(seconds: int) -> list[str]:
    # Noise keeps x264 at its target rate (testsrc2 alone compresses to almost nothing).
    return [
        "-f",
        "lavfi",
        "-i",
        f"testsrc2=size=1280x720:rate={FPS}:duration={seconds}",
        "-f",
        "lavfi",
        "-i",
        f"sine=frequency=440:sample_rate=48000:duration={seconds}",
    ]


def _x264_args(kbps: int) -> list[str]:
    gop = FPS * SEGMENT_SECONDS
    return [
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-profile:v",
        "main",
        "-pix_fmt",
        "yuv420p",
        "-b:v",
        f"{kbps}k",
        "-maxrate",
        f"{kbps}k",
        "-bufsize",
        f"{2 * kbps}k",
        "-g",
        str(gop),
        "-keyint_min",
        str(gop),
        "-sc_threshold",
        "0",
        "-x264-params",
        "nal-hrd=cbr",
        "-threads",
        "2",
    ]


def _dash_args(seconds: int, out: str) -> list[str]:
    n = len(LADDER)
    split = f"[0:v]noise=alls=12:allf=t,split={n}" + "".join(f"[s{i}]" for i in range(n))
    scales = ";".join(f"[s{i}]scale={w}:{h},setdar=16/9[v{i}]" for i, (_, w, h, _) in enumerate(LADDER))
    args = ["-filter_complex", f"{split};{scales}"]
    for i in range(n):
        args += ["-map", f"[v{i}]"]
    args += ["-map", "1:a"]
    # Per-stream rates (the x264 options apply to all video streams).
    codec = _x264_args(LADDER[0][3])
    args += codec
    for i, (_, _, _, kbps) in enumerate(LADDER):
        args += [f"-b:v:{i}", f"{kbps}k", f"-maxrate:v:{i}", f"{kbps}k", f"-bufsize:v:{i}", f"{2 * kbps}k"]
    args += [
        "-c:a",
        "aac",
        "-b:a",
        f"{AUDIO_KBPS}k",
        "-ac",
        "2",
        "-fflags",
        "+bitexact",
        "-flags:v",
        "+bitexact",
        "-flags:a",
        "+bitexact",
        "-f",
        "dash",
        "-seg_duration",
        str(SEGMENT_SECONDS),
        "-use_template",
        "1",
        "-use_timeline",
        "0",
        "-adaptation_sets",
        "id=0,streams=v id=1,streams=a",
        out,
    ]
    return args


def ensure_video(root: Path, seconds: int = VIDEO_SECONDS) -> None:
    """DASH ladder (video/dash) and progressive MP4s (video/progressive), remade only when
    the parameters (length, ladder, rates) change; manifest.json lists every file."""
    root = Path(root)
    params = {
        "seconds": seconds,
        "ladder": LADDER,
        "audio_kbps": AUDIO_KBPS,
        "fps": FPS,
        "segment_seconds": SEGMENT_SECONDS,
        "progressive_mb": PROGRESSIVE_MB,
        "progressive_kbps": PROGRESSIVE_KBPS,
    }
    params = json.loads(json.dumps(params))  # tuples -> lists, to compare with the stored JSON
    with locked(root) as manifest:
        video = {rel: e for rel, e in manifest["files"].items() if rel.startswith("video/")}
        if (
            manifest["params"].get("video") == params
            and video
            and all(is_current(root, manifest, rel) for rel in video)
        ):
            return
        for rel in video:
            manifest["files"].pop(rel)
        shutil.rmtree(root / "video", ignore_errors=True)
        (root / "video/dash").mkdir(parents=True)
        (root / "video/progressive").mkdir(parents=True)
        prefix, seen_root = ffmpeg_runner(root)
        _ffmpeg(
            prefix,
            [*_source_args(seconds), *_dash_args(seconds, f"{seen_root}/video/dash/manifest.mpd")],
            timeout=60 * seconds,
        )
        _make_progressive(prefix, root, seen_root)
        for path in sorted((root / "video").rglob("*")):
            if path.is_file():
                os.chmod(path, 0o644)
                manifest["files"][str(path.relative_to(root))] = _hash_file(path)
        manifest["params"]["video"] = params
        manifest["params"]["video_tool"] = " ".join(prefix[-2:])


def _make_progressive(prefix: list[str], root: Path, seen: str) -> None:
    """One 20 s 720p clip, then each size by looping it with -c copy (fast), cut by duration."""
    clip_seconds = 20
    clip = f"{seen}/video/progressive/.clip.mp4"
    _ffmpeg(
        prefix,
        [
            *_source_args(clip_seconds),
            "-vf",
            "noise=alls=12:allf=t",
            *_x264_args(PROGRESSIVE_KBPS),
            "-c:a",
            "aac",
            "-b:a",
            f"{AUDIO_KBPS}k",
            "-fflags",
            "+bitexact",
            "-movflags",
            "+faststart",
            clip,
        ],
        timeout=600,
    )
    # The clip's real rate (CBR filler and container overhead included) sets each cut.
    bytes_per_s = (root / "video/progressive/.clip.mp4").stat().st_size / clip_seconds
    for mb in PROGRESSIVE_MB:
        duration = mb * MiB / bytes_per_s
        loops = int(duration // clip_seconds) + 1
        _ffmpeg(
            prefix,
            [
                "-stream_loop",
                str(loops),
                "-i",
                clip,
                "-t",
                f"{duration:.3f}",
                "-c",
                "copy",
                "-fflags",
                "+bitexact",
                "-movflags",
                "+faststart",
                f"{seen}/video/progressive/{mb}MB.mp4",
            ],
            timeout=300,
        )
    (root / "video/progressive/.clip.mp4").unlink()


def default_root() -> Path:
    """The shared content cache, keyed by nothing but the content version."""
    return CACHE / "content" / read_versions().get("CONTENT_VERSION", "v1")


def main(argv: list[str] | None = None) -> None:
    """python -m quicbed.servers.content [ROOT] [--workloads web,cloud,video] [--files 1GB,...]"""
    import argparse

    ap = argparse.ArgumentParser(description="Generate (or check) the testbed's content.")
    ap.add_argument(
        "root",
        nargs="?",
        type=Path,
        default=None,
        help="default: the shared cache, " + str(CACHE / "content"),
    )
    ap.add_argument("--workloads", default="web,cloud,video")
    ap.add_argument("--files", default="", help="extra cloud files, e.g. 200MB,1GB")
    ap.add_argument("--video-seconds", type=int, default=VIDEO_SECONDS)
    ap.add_argument("--verify", action="store_true", help="re-hash every file against the manifest")
    args = ap.parse_args(argv)
    root = args.root or default_root()
    ensure_content(root, {w for w in args.workloads.split(",") if w}, args.video_seconds)
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
