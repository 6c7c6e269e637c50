"""Server descriptors: servers/<name>/server.yaml, read and checked into ServerSpecs; the registry.

A server is a directory holding a server.yaml (the format: servers/README.md). The shipped ones
are servers/*/server.yaml; QUICBED_SERVER_DIRS (colon-separated) adds a user's own: each entry is
a server's directory (holding server.yaml) or a directory of them (*/server.yaml). The
directory's name is the server's name. Every problem is one line naming the file and field;
nothing is dropped silently.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any

from quicbed.errors import InputError
from quicbed.paths import REPO, read_versions
from quicbed.yamlio import LocatedError, PathKey, Source, load_source

from .accesslog import FORMATS
from .spec import LOG_MOUNT, Health, ServerSpec, UnknownServer
from .versionparse import PARSERS

ENV_DIRS = "QUICBED_SERVER_DIRS"
DESCRIPTOR = "server.yaml"
SHIPPED_DIR = Path(__file__).resolve().parent

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*\Z")
_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@-]*\Z")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_ENV_KEY = re.compile(r"[A-Z][A-Z0-9_]*\Z")
# images/build.sh reads these top-level fields with sed, one `key: value` line each.
_PLAIN_LINE = ("image", "version_key", "version", "dockerfile")

_REQUIRED = ("image", "command", "config", "protocols", "health", "version_probe", "access_log")
_OPTIONAL = (
    "version_key",
    "version",
    "dockerfile",
    "order",
    "description",
    "quic",
    "build_info_facts",
    "compose_port",
    "qlog",
)
_TLS = ("TLSv1.0", "TLSv1.1", "TLSv1.2", "TLSv1.3")
_HTTP = ("HTTP/1.1", "HTTP/2.0", "HTTP/3.0")
_HEALTH_PROTOCOLS = ("h1", "h2", "h3")
_PARSER_OPTIONS = tuple(dict.fromkeys(k for p in PARSERS.values() for k in (*p.required, *p.optional)))


# ---------------------------------------------------------------- field checks


def _kind(value: Any) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "empty",
    }.get(type(value), "a value")


def _mapping(
    src: Source, path: PathKey, value: Any, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise src.error(path, f"must be a mapping of fields, not {_kind(value)}")
    known = (*required, *optional)
    for key in value:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known)}"
            raise src.error((*path, key), f"unknown field; {hint}")
    for key in required:
        if key not in value:
            raise src.error((*path, key), "missing (required)")
    return value


def _string(
    src: Source, path: PathKey, value: Any, pattern: re.Pattern[str] | None = None, what: str = ""
) -> str:
    if not isinstance(value, str):
        hint = "; quote it" if isinstance(value, int | float) and not isinstance(value, bool) else ""
        raise src.error(path, f"must be a string, not {_kind(value)} ({value!r}){hint}")
    if not value.strip() or not value.isprintable():
        raise src.error(path, "must be a non-empty one-line string")
    if pattern and not pattern.match(value):
        raise src.error(path, f"{value!r} is not {what}")
    return value


def _strings(src: Source, path: PathKey, value: Any, choices: tuple[str, ...] = ()) -> list[str]:
    if not isinstance(value, list) or not value:
        raise src.error(path, f"must be a non-empty list, not {_kind(value)}")
    out = [_string(src, (*path, i), v) for i, v in enumerate(value)]
    for i, v in enumerate(out):
        if choices and v not in choices:
            raise src.error((*path, i), f"{v!r} is not one of {', '.join(choices)}")
        if v in out[:i]:
            raise src.error((*path, i), f"{v!r} is listed twice")
    return out


def _int(src: Source, path: PathKey, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise src.error(path, f"must be a whole number from {low} to {high}, not {value!r}")
    return value


def _str_map(src: Source, path: PathKey, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise src.error(path, f"must be a mapping of name: text, not {_kind(value)}")
    for key, v in value.items():
        _string(src, (*path, key), v)
    return dict(value)


def _plain_line(src: Source, key: str, value: str) -> None:
    """`key: value` alone on its line at the top level, as images/build.sh reads it."""
    number = src.line((key,))
    lines = src.text.splitlines()
    raw = lines[number - 1] if 0 < number <= len(lines) else ""
    m = re.match(rf"{key}:[ \t]*([\"']?)([^\s\"'#]+)\1[ \t]*(#.*)?\Z", raw)
    if not m or m.group(2) != value:
        raise src.error(
            (key,),
            f"write it on one line as `{key}: value` " "(images/build.sh reads it without a YAML parser)",
        )


# ---------------------------------------------------------------- one descriptor


def load_descriptor(
    path: Path | str, versions: dict[str, str] | None = None, name: str | None = None
) -> ServerSpec:
    """The ServerSpec of one server.yaml; `name` defaults to its directory's name."""
    versions = read_versions() if versions is None else versions
    file = str(path)
    # As images/build.sh sees it: the directory's own name, symlinks not followed.
    name = Path(os.path.abspath(path)).parent.name if name is None else name
    if not _NAME.match(name):
        raise LocatedError(
            file,
            1,
            "name",
            f"the directory's name {name!r} is the server's name: "
            "use lowercase letters, digits and single '-'",
        )
    src = load_source(path)
    if src.data is None:
        raise LocatedError(file, 1, "server", "the file is empty")
    if not isinstance(src.data, dict):
        raise LocatedError(file, 1, "server", f"must be a mapping of fields, not {_kind(src.data)}")
    d = _mapping(src, (), src.data, _REQUIRED, _OPTIONAL)

    for key in _PLAIN_LINE:
        if key in d:
            _string(src, (key,), d[key])
            _plain_line(src, key, d[key])
    image = _string(src, ("image",), d["image"], _IMAGE, "an image name (lowercase)")
    version_key = d.get("version_key")
    if ("version_key" in d) == ("version" in d):
        raise src.error(
            ("version_key",),
            "give version_key (a versions.env key, where the "
            "shipped servers' versions are pinned) or version (a literal), not "
            f"{'both' if 'version' in d else 'neither'}",
        )
    if version_key is not None:
        _string(src, ("version_key",), version_key, _ENV_KEY, "a versions.env key")
        if version_key not in versions:
            raise src.error(
                ("version_key",),
                f"{version_key} is not in versions.env (pin it "
                f"there as {version_key}=..., or give a literal version:)",
            )
        version = versions[version_key]
        where = f"versions.env's {version_key}={version!r}"
    else:
        version = _string(src, ("version",), d["version"])
        where = f"version {version!r}"
    tagged = any(c in image.rsplit("/", 1)[-1] for c in ":@")
    if not tagged and not _TAG.match(version):
        raise src.error(
            ("version_key",) if version_key else ("version",),
            f"{where} cannot be an image tag (letters, digits, '_', '.', '-')",
        )

    dockerfile = d.get("dockerfile")
    if dockerfile is not None:
        rel = Path(dockerfile)
        if rel.is_absolute() or ".." in rel.parts or not (REPO / rel).is_file():
            raise src.error(
                ("dockerfile",),
                f"{dockerfile!r} is not a file in the repository "
                "(give a path like images/<name>/Dockerfile, or leave dockerfile out "
                "for a prebuilt image)",
            )

    command = _strings(src, ("command",), d["command"])
    config = _string(src, ("config",), d["config"])
    if not config.startswith("/"):
        raise src.error(("config",), f"{config!r} must be an absolute path inside the image")

    protocols = _mapping(src, ("protocols",), d["protocols"], ("tls", "http"))
    tls = _strings(src, ("protocols", "tls"), protocols["tls"], _TLS)
    http = _strings(src, ("protocols", "http"), protocols["http"], _HTTP)

    h = _mapping(src, ("health",), d["health"], ("path", "status", "protocols"))
    health = Health(
        path=_string(src, ("health", "path"), h["path"], re.compile(r"/\S*\Z"), "a path from /"),
        status=_int(src, ("health", "status"), h["status"], 100, 599),
        protocols=_strings(src, ("health", "protocols"), h["protocols"], _HEALTH_PROTOCOLS),
    )

    probe = _mapping(src, ("version_probe",), d["version_probe"], ("command", "parser"), _PARSER_OPTIONS)
    parser_name = _string(src, ("version_probe", "parser"), probe["parser"])
    if parser_name not in PARSERS:
        raise src.error(
            ("version_probe", "parser"), f"unknown parser {parser_name!r}; known: {', '.join(PARSERS)}"
        )
    parser = PARSERS[parser_name]  # again, with this parser's own options
    _mapping(src, ("version_probe",), probe, ("command", "parser", *parser.required), parser.optional)
    version_command = _strings(src, ("version_probe", "command"), probe["command"])
    options: dict[str, Any] = {}
    for key in (*parser.required, *parser.optional):
        if key not in probe:
            continue
        if key == "fallback":
            options[key] = _strings(src, ("version_probe", key), probe[key])
            continue
        options[key] = _string(src, ("version_probe", key), probe[key])
        if key == "pattern":
            try:
                re.compile(probe[key])
            except re.error as exc:
                raise src.error(("version_probe", key), f"not a regular expression: {exc}") from None

    access_log = _string(src, ("access_log",), d["access_log"])
    if access_log not in FORMATS:
        raise src.error(("access_log",), f"unknown format {access_log!r}; known: {', '.join(FORMATS)}")

    quic = _str_map(src, ("quic",), d.get("quic", {}))
    bi_command: list[str] = []
    bi_facts: dict[str, str] = {}
    if "build_info_facts" in d:
        bi = _mapping(src, ("build_info_facts",), d["build_info_facts"], ("command", "facts"))
        bi_command = _strings(src, ("build_info_facts", "command"), bi["command"])
        bi_facts = _str_map(src, ("build_info_facts", "facts"), bi["facts"])
        for key in bi_facts:
            if key in quic:
                raise src.error(("build_info_facts", "facts", key), "is also a quic: fact")

    qlog_env, qlog_dir, no_qlog = _qlog(src, d.get("qlog"), name)
    compose_port = d.get("compose_port")
    if compose_port is not None:
        _int(src, ("compose_port",), compose_port, 1, 65535)
    description = d.get("description", "")
    if "description" in d:
        _string(src, ("description",), description)

    return ServerSpec(
        name=name,
        image=image if tagged else f"{image}:{version}",
        version=version,
        command=command,
        config=config,
        version_command=version_command,
        quic=quic,
        version_parser=parser_name,
        version_options=options,
        tls_versions=tls,
        http_versions=http,
        health=health,
        access_log=access_log,
        build_info_command=bi_command,
        build_info_facts=bi_facts,
        compose_port=compose_port,
        qlog_env=qlog_env,
        qlog_dir=qlog_dir,
        no_qlog=no_qlog,
        dockerfile=dockerfile,
        version_key=version_key,
        order=_int(src, ("order",), d.get("order", 100), 0, 10_000),
        description=description,
        file=file,
    )


def _qlog(src: Source, value: Any, name: str) -> tuple[str, str, str]:
    """`qlog: {env: QLOGDIR, dir: /var/log/quicbed/qlog}` (the variable that makes the stack
    write one file per connection into dir, under the log mount so the host sees it), or
    `qlog: {cannot: why}`. Absent: it writes none, for want of a descriptor that says how."""
    if value is None:
        return "", "", f"{name}: its descriptor says of no qlog"
    q = _mapping(src, ("qlog",), value, (), ("env", "dir", "cannot"))
    if "cannot" in q:
        if set(q) != {"cannot"}:
            raise src.error(("qlog",), "give env and dir, or cannot, not both")
        return "", "", _string(src, ("qlog", "cannot"), q["cannot"])
    if set(q) != {"env", "dir"}:
        raise src.error(("qlog",), "give env and dir (how the stack writes qlog), or cannot: why")
    env = _string(src, ("qlog", "env"), q["env"], _ENV_KEY, "an environment variable")
    qdir = _string(src, ("qlog", "dir"), q["dir"])
    if not qdir.startswith(f"{LOG_MOUNT}/") or ".." in qdir.split("/"):
        raise src.error(("qlog", "dir"), f"{qdir!r} must be under {LOG_MOUNT}/ (the host reads it there)")
    return env, qdir, ""


# ---------------------------------------------------------------- discovery, registry


def descriptor_files(dirs: str | None = None) -> list[Path]:
    """servers/*/server.yaml, then those of `dirs` (default: $QUICBED_SERVER_DIRS)."""
    files = sorted(SHIPPED_DIR.glob(f"*/{DESCRIPTOR}"))
    dirs = os.environ.get(ENV_DIRS, "") if dirs is None else dirs
    for entry in dirs.split(":"):
        if not entry:
            continue
        d = Path(entry)
        if not d.is_dir():
            raise InputError(f"{ENV_DIRS}: {entry}: no such directory")
        if (d / DESCRIPTOR).is_file():
            files.append(d / DESCRIPTOR)
            continue
        found = sorted(d.glob(f"*/{DESCRIPTOR}"))
        if not found:
            raise InputError(
                f"{ENV_DIRS}: {entry}: holds no {DESCRIPTOR} (neither "
                f"{entry}/{DESCRIPTOR} nor {entry}/*/{DESCRIPTOR})"
            )
        files += found
    return files


def load_servers(dirs: str | None = None, versions: dict[str, str] | None = None) -> dict[str, ServerSpec]:
    """Every described server, by name, in `order` (then discovery order)."""
    versions = read_versions() if versions is None else versions
    specs: dict[str, ServerSpec] = {}
    for file in descriptor_files(dirs):
        spec = load_descriptor(file, versions)
        if spec.name in specs:
            raise LocatedError(
                str(file), 1, "name", f"server {spec.name!r} is also described " f"by {specs[spec.name].file}"
            )
        specs[spec.name] = spec
    return {s.name: s for s in sorted(specs.values(), key=lambda s: s.order)}


SERVERS: dict[str, ServerSpec] = load_servers()


def get_server(name: str) -> ServerSpec:
    try:
        return SERVERS[name]
    except KeyError:
        raise UnknownServer(f"unknown server {name!r}; valid servers: {', '.join(sorted(SERVERS))}") from None
