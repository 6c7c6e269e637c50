"""HTTP servers under test (Caddy/quic-go, nginx): registry, lifecycle, settings, access logs.

A server is data: servers/<name>/server.yaml (its image, version key, command, config, health
check, version parser, access-log format, QUIC facts; see servers/README.md), plus an image and
a config. Descriptors in the directories of $QUICBED_SERVER_DIRS join the shipped ones.

    descriptors.py   reading and checking descriptors; the registry (SERVERS, get_server)
    lifecycle.py     docker_run_args, start_server, stop_server
    probe.py         server_version, server_settings
    accesslog.py     access-log formats, read_access_log
    versionparse.py  the version parsers a descriptor names
    spec.py          ServerSpec and the container contract (mounts, health path, errors)

Container contract: the topology creates the server container itself (docker run -d
--network none + docker_run_args(...)), attaches the emulated interface, then calls
start_server(). Content is mounted read-only at /srv/content, the per-run PKI at
/etc/quicbed/pki, logs at /var/log/quicbed (bind-mounted from the run dir so they survive).
"""

from __future__ import annotations

from .accesslog import read_access_log
from .descriptors import SERVERS, get_server
from .lifecycle import docker_run_args, start_server, stop_server
from .probe import server_settings, server_version
from .spec import (
    ACCESS_LOG,
    CONTENT_MOUNT,
    HEALTH_PATH,
    KEEP_ALIVE,
    LOG_MOUNT,
    PKI_MOUNT,
    RUN_DIR,
    UDP_BUFFER,
    ServerError,
    ServerSpec,
    UnknownServer,
)

__all__ = [
    "ACCESS_LOG", "CONTENT_MOUNT", "HEALTH_PATH", "KEEP_ALIVE", "LOG_MOUNT", "PKI_MOUNT",
    "RUN_DIR", "SERVERS", "UDP_BUFFER", "ServerError", "ServerSpec", "UnknownServer",
    "docker_run_args", "get_server", "read_access_log", "server_settings", "server_version",
    "start_server", "stop_server",
]
