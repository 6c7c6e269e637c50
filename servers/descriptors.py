"""Server descriptors: servers/<name>/server.yaml, read and checked into ServerSpecs; the registry.

A server is a directory holding a server.yaml (the format: servers/README.md). The shipped ones
are servers/*/server.yaml and stacks/*/server.yaml (a QUIC stack's folder, its client beside
it: stacks/README.md); QUICBED_SERVER_DIRS (colon-separated) adds a user's own: each entry is
a server's directory (holding server.yaml) or a directory of them (*/server.yaml). The
directory's name is the server's name. Every problem is one line naming the file and field;
nothing is dropped silently.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from quicbed.fields import (
    ENV_KEY,
    IMAGE_FIELDS,
    check_fields,
    check_text,
    check_text_map,
    check_texts,
    check_unique,
    check_whole,
    image_fields,
    load_descriptor_source,
)
from quicbed.fields import (
    descriptor_files as _descriptor_files,
)
from quicbed.paths import STACKS_DIR, read_versions
from quicbed.yamlio import Source

from .accesslog import FORMATS
from .spec import LOG_MOUNT, SERVES, Health, ServerSpec, UnknownServer
from .versionparse import PARSERS

ENV_DIRS = "QUICBED_SERVER_DIRS"
DESCRIPTOR = "server.yaml"
SHIPPED_DIR = Path(__file__).resolve().parent

_REQUIRED = ("image", "command", "config", "protocols", "health", "version_probe", "access_log")
_OPTIONAL = (
    *IMAGE_FIELDS[1:],
    "order",
    "description",
    "quic",
    "build_info_facts",
    "compose_port",
    "qlog",
    "serves",
)
_TLS = ("TLSv1.0", "TLSv1.1", "TLSv1.2", "TLSv1.3")
_HTTP = ("HTTP/1.1", "HTTP/2.0", "HTTP/3.0")
_HEALTH_PROTOCOLS = ("h1", "h2", "h3")
_PARSER_OPTIONS = tuple(dict.fromkeys(k for p in PARSERS.values() for k in (*p.required, *p.optional)))


# ---------------------------------------------------------------- one descriptor


def load_descriptor(
    path: Path | str, versions: dict[str, str] | None = None, name: str | None = None
) -> ServerSpec:
    """The ServerSpec of one server.yaml; `name` defaults to its directory's name."""
    versions = read_versions() if versions is None else versions
    src, name = load_descriptor_source(path, "server", name)
    file = str(path)
    d = check_fields(src, (), src.data, _REQUIRED, _OPTIONAL)
    built = image_fields(src, d, versions)

    command = check_texts(src, ("command",), d["command"])
    config = check_text(src, ("config",), d["config"])
    if not config.startswith("/"):
        raise src.error(("config",), f"{config!r} must be an absolute path inside the image")

    protocols = check_fields(src, ("protocols",), d["protocols"], ("tls", "http"))
    tls = check_texts(src, ("protocols", "tls"), protocols["tls"], _TLS)
    http = check_texts(src, ("protocols", "http"), protocols["http"], _HTTP)

    h = check_fields(src, ("health",), d["health"], ("path", "status", "protocols"))
    health = Health(
        path=check_text(src, ("health", "path"), h["path"], re.compile(r"/\S*\Z"), "a path from /"),
        status=check_whole(src, ("health", "status"), h["status"], 100, 599),
        protocols=check_texts(src, ("health", "protocols"), h["protocols"], _HEALTH_PROTOCOLS),
    )

    probe = check_fields(src, ("version_probe",), d["version_probe"], ("command", "parser"), _PARSER_OPTIONS)
    parser_name = check_text(src, ("version_probe", "parser"), probe["parser"])
    if parser_name not in PARSERS:
        raise src.error(
            ("version_probe", "parser"), f"unknown parser {parser_name!r}; known: {', '.join(PARSERS)}"
        )
    parser = PARSERS[parser_name]  # again, with this parser's own options
    check_fields(src, ("version_probe",), probe, ("command", "parser", *parser.required), parser.optional)
    version_command = check_texts(src, ("version_probe", "command"), probe["command"])
    options: dict[str, Any] = {}
    for key in (*parser.required, *parser.optional):
        if key not in probe:
            continue
        if key == "fallback":
            options[key] = check_texts(src, ("version_probe", key), probe[key])
            continue
        options[key] = check_text(src, ("version_probe", key), probe[key])
        if key == "pattern":
            try:
                re.compile(probe[key])
            except re.error as exc:
                raise src.error(("version_probe", key), f"not a regular expression: {exc}") from None

    access_log = check_text(src, ("access_log",), d["access_log"])
    if access_log not in FORMATS:
        raise src.error(("access_log",), f"unknown format {access_log!r}; known: {', '.join(FORMATS)}")

    serves = check_text(src, ("serves",), d.get("serves", "content"))
    if serves not in SERVES:
        raise src.error(("serves",), f"{serves!r} is not one of {', '.join(SERVES)}")

    quic = check_text_map(src, ("quic",), d.get("quic", {}))
    bi_command: list[str] = []
    bi_facts: dict[str, str] = {}
    if "build_info_facts" in d:
        bi = check_fields(src, ("build_info_facts",), d["build_info_facts"], ("command", "facts"))
        bi_command = check_texts(src, ("build_info_facts", "command"), bi["command"])
        bi_facts = check_text_map(src, ("build_info_facts", "facts"), bi["facts"])
        for key in bi_facts:
            if key in quic:
                raise src.error(("build_info_facts", "facts", key), "is also a quic: fact")

    qlog_env, qlog_dir, no_qlog = _qlog(src, d.get("qlog"), name)
    compose_port = d.get("compose_port")
    if compose_port is not None:
        check_whole(src, ("compose_port",), compose_port, 1, 65535)
    description = d.get("description", "")
    if "description" in d:
        check_text(src, ("description",), description)

    return ServerSpec(
        name=name,
        image=built.image,
        version=built.version,
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
        serves=serves,
        build_info_command=bi_command,
        build_info_facts=bi_facts,
        compose_port=compose_port,
        qlog_env=qlog_env,
        qlog_dir=qlog_dir,
        no_qlog=no_qlog,
        dockerfile=built.dockerfile,
        on_demand=built.on_demand,
        version_key=built.version_key,
        order=check_whole(src, ("order",), d.get("order", 100), 0, 10_000),
        description=description,
        file=file,
    )


def _qlog(src: Source, value: Any, name: str) -> tuple[str, str, str]:
    """`qlog: {env: QLOGDIR, dir: /var/log/quicbed/qlog}` (the variable that makes the stack
    write one file per connection into dir, under the log mount so the host sees it), or
    `qlog: {cannot: why}`. Absent: it writes none, for want of a descriptor that says how."""
    if value is None:
        return "", "", f"{name}: its descriptor says of no qlog"
    q = check_fields(src, ("qlog",), value, (), ("env", "dir", "cannot"))
    if "cannot" in q:
        if set(q) != {"cannot"}:
            raise src.error(("qlog",), "give env and dir, or cannot, not both")
        return "", "", check_text(src, ("qlog", "cannot"), q["cannot"])
    if set(q) != {"env", "dir"}:
        raise src.error(("qlog",), "give env and dir (how the stack writes qlog), or cannot: why")
    env = check_text(src, ("qlog", "env"), q["env"], ENV_KEY, "an environment variable")
    qdir = check_text(src, ("qlog", "dir"), q["dir"])
    if not qdir.startswith(f"{LOG_MOUNT}/") or ".." in qdir.split("/"):
        raise src.error(("qlog", "dir"), f"{qdir!r} must be under {LOG_MOUNT}/ (the host reads it there)")
    return env, qdir, ""


# ---------------------------------------------------------------- discovery, registry


def descriptor_files(dirs: str | None = None) -> list[Path]:
    """servers/*/server.yaml, stacks/*/server.yaml, then those of `dirs` (default:
    $QUICBED_SERVER_DIRS)."""
    return _descriptor_files((SHIPPED_DIR, STACKS_DIR), DESCRIPTOR, ENV_DIRS, dirs)


def load_servers(dirs: str | None = None, versions: dict[str, str] | None = None) -> dict[str, ServerSpec]:
    """Every described server, by name, in `order` (then discovery order)."""
    versions = read_versions() if versions is None else versions
    found = [load_descriptor(file, versions) for file in descriptor_files(dirs)]
    check_unique(((Path(s.file), s.name) for s in found), "server")
    specs = {s.name: s for s in found}
    return {s.name: s for s in sorted(specs.values(), key=lambda s: s.order)}


SERVERS: dict[str, ServerSpec] = load_servers()


def servers_serving(serves: str) -> dict[str, ServerSpec]:
    """The registry's servers whose descriptors say `serves: <serves>` (spec.SERVES), in order."""
    return {name: spec for name, spec in SERVERS.items() if spec.serves == serves}


def get_server(name: str) -> ServerSpec:
    try:
        return SERVERS[name]
    except KeyError:
        raise UnknownServer(f"unknown server {name!r}; valid servers: {', '.join(sorted(SERVERS))}") from None
