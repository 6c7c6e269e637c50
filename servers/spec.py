"""What a server is, once its descriptor (servers/<name>/server.yaml) is read: ServerSpec.

Also the container contract every server shares (mounts, health path, errors). The descriptor
format and its validation are in descriptors.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONTENT_MOUNT = "/srv/content"
PKI_MOUNT = "/etc/quicbed/pki"
LOG_MOUNT = "/var/log/quicbed"
ACCESS_LOG = "access.log"
HEALTH_PATH = "/.quicbed-health"
# The port every server listens on (TCP for h1/h2, UDP for h3): the clients connect there.
SERVER_PORT = 443
# Where the launcher shell inside the container leaves the server's pid and exit code.
RUN_DIR = "/run/quicbed"
# quic-go asks for 7 MiB UDP buffers and warns below; nginx is configured to ask the same.
UDP_BUFFER = 7 * 1024 * 1024
KEEP_ALIVE = ["sleep", "infinity"]
# What a server serves from CONTENT_MOUNT (its descriptor's `serves:`): the content store's
# files (workloads/store.py), or one recorded page laid out by workloads/replay.py (replay.json,
# bodies/), each origin under its own name with its own certificate (PKI_MOUNT/origins/).
SERVES = ("content", "replay")


class UnknownServer(KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ServerError(RuntimeError):
    """A server failed to start or stop; the message carries its exit code and log tail."""


@dataclass(frozen=True)
class Health:
    """start_server's check: each protocol must answer `status` at `path` on SERVER_PORT."""

    path: str = HEALTH_PATH
    status: int = 204
    protocols: list[str] = field(default_factory=lambda: ["h2", "h3"])


@dataclass(frozen=True)
class ServerSpec:
    name: str
    image: str
    version: str
    command: list[str]  # runs in the foreground inside the container
    config: str  # the baked-in config file inside the image
    version_command: list[str]
    # Facts about the QUIC stack that no sysctl shows (from the implementations' sources).
    quic: dict[str, str] = field(default_factory=dict)
    # How version_command's output becomes the version: a parser of versionparse.PARSERS
    # and its options (regex: pattern; go-build-info: module, fallback).
    version_parser: str = "text"
    version_options: dict[str, Any] = field(default_factory=dict)
    tls_versions: list[str] = field(default_factory=lambda: ["TLSv1.2", "TLSv1.3"])
    http_versions: list[str] = field(default_factory=lambda: ["HTTP/1.1", "HTTP/2.0", "HTTP/3.0"])
    health: Health = field(default_factory=Health)
    access_log: str = "caddy-json"  # a format of accesslog.FORMATS
    serves: str = "content"  # one of SERVES
    # Extra QUIC facts read from the binary's Go build info: command, and fact -> module.
    build_info_command: list[str] = field(default_factory=list)
    build_info_facts: dict[str, str] = field(default_factory=dict)
    # qlog (experiment capture: qlog): the environment variable that makes the stack write one
    # file per connection into qlog_dir (under LOG_MOUNT); or no_qlog, why it writes none.
    qlog_env: str = ""
    qlog_dir: str = ""
    no_qlog: str = ""
    compose_port: int | None = None  # published on 127.0.0.1 by docker-compose.yml
    dockerfile: str | None = None  # relative to the repository; None: a prebuilt image
    on_demand: bool = False  # built when first needed, not by make images (quicbed/fields.py)
    version_key: str | None = None  # the versions.env key `version` comes from
    order: int = 100  # position in listings (SERVERS, error messages, manifests)
    description: str = ""
    file: str = ""  # the descriptor it was read from

    @property
    def server_log(self) -> str:
        """The server's own stdout/stderr inside the container."""
        return f"{LOG_MOUNT}/{self.name}.log"
