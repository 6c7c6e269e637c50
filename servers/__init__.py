"""HTTP servers under test (Caddy/quic-go, nginx): registry, lifecycle, settings, access logs.

A server is data: servers/<name>/server.yaml (its image, version key, command, config, health
check, version parser, access-log format, QUIC facts; see servers/README.md), plus an image and
a config. Descriptors in the directories of $QUICBED_SERVER_DIRS join the shipped ones.

    descriptors.py   reading and checking descriptors; the registry (SERVERS, get_server,
                     servers_serving)
    lifecycle.py     container_options, docker_run_args, start_server, stop_server, rewarm
    probe.py         server_version, server_settings
    accesslog.py     access-log formats, read_access_log, access_log_since
    versionparse.py  the version parsers a descriptor names
    spec.py          ServerSpec and the container contract (mounts, health path, errors)
    testbed.py       served_testbed: the emulated path with the servers behind it

The container contract (mounts, start, health check) is lifecycle.py's docstring.
"""

from __future__ import annotations

from .accesslog import access_log_since, read_access_log
from .descriptors import SERVERS, get_server, servers_serving
from .lifecycle import docker_run_args, rewarm, start_server, stop_server
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
    "ACCESS_LOG",
    "CONTENT_MOUNT",
    "HEALTH_PATH",
    "KEEP_ALIVE",
    "LOG_MOUNT",
    "PKI_MOUNT",
    "RUN_DIR",
    "SERVERS",
    "UDP_BUFFER",
    "ServerError",
    "ServerSpec",
    "UnknownServer",
    "access_log_since",
    "docker_run_args",
    "get_server",
    "read_access_log",
    "server_settings",
    "server_version",
    "servers_serving",
    "rewarm",
    "start_server",
    "stop_server",
]
