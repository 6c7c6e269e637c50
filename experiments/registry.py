"""What an experiment may name: servers, client tools, workloads, link parameters, metrics.

One module so that adding a server, a tool option or a workload object is a one-line change.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from quicbed.analysis import physics
from quicbed.servers import content

SERVERS: tuple[str, ...] = ("caddy", "nginx", "caddy-debian")


@dataclass(frozen=True)
class Tool:
    """A client tool: its options (name -> allowed values) and how a variant is labelled."""

    options: dict[str, tuple[str, ...]]
    defaults: dict[str, str]
    # label/protocol take the variant's resolved options.
    label: str  # str.format template, e.g. "tls{tls}-h{http}"
    protocol: str  # str.format template, e.g. "tls{tls}"
    workloads: tuple[str, ...] = ("web", "cloud")
    # Compact HTTP spelling in labels: "1.1" -> "1", so "tls1.2-h1".
    short: dict[str, dict[str, str]] = field(default_factory=dict)


# `kex`: the key-exchange groups the perf tools offer (--groups). Classical X25519 for every
# stack by default; the post-quantum hybrid is what OpenSSL 3.5 offers when left alone.
KEX_GROUPS: dict[str, str] = {
    "x25519": "X25519:secp256r1",
    "x25519mlkem768": "X25519MLKEM768:X25519:secp256r1",
}
_KEX_SHORT = {"x25519": "", "x25519mlkem768": "-pq"}

TOOLS: dict[str, Tool] = {
    "tls_perf": Tool(
        options={"tls": ("1.2", "1.3"), "http": ("1.1", "2"), "kex": tuple(KEX_GROUPS)},
        defaults={"tls": "1.3", "http": "2", "kex": "x25519"},
        label="tls{tls}-h{http}{kex}",
        protocol="tls{tls}",
        short={"http": {"1.1": "1"}, "kex": _KEX_SHORT},
    ),
    # backend: libcurl's HTTP/3, or ngtcp2 timed in library callbacks like the paper's tool.
    "quic_perf": Tool(
        options={"http": ("3",), "backend": ("libcurl", "ngtcp2"), "kex": tuple(KEX_GROUPS)},
        defaults={"http": "3", "backend": "libcurl", "kex": "x25519"},
        label="quic-h{http}{backend}{kex}",
        protocol="quic",
        short={"backend": {"libcurl": "", "ngtcp2": "-ngtcp2"}, "kex": _KEX_SHORT},
    ),
    "chromium": Tool(
        options={"protocol": ("quic", "tls1.2", "tls1.3")},
        defaults={"protocol": "quic"},
        label="chromium-{protocol}",
        protocol="{protocol}",
        workloads=("web", "video"),
    ),
}

PROTOCOLS: tuple[str, ...] = ("quic", "tls1.2", "tls1.3")
# First-connection handshake cost in RTTs (TCP + TLS, or QUIC): the dry-run estimate and the
# synthetic executor use the analysis's own figures (analysis/physics.py).
HANDSHAKE_RTTS = physics.HANDSHAKE_RTTS

# What the servers serve comes from servers/content.py; only the names are needed here.
# Web objects: web/index.html (which references the samples), the per-type samples, and whole
# landing pages (`pages/<site>`: its index.html plus assets).
WEB_OBJECTS: tuple[str, ...] = (
    "index.html",
    *(rel.removeprefix("web/") for rel in content.WEB_OBJECTS),
    *(f"pages/{site}" for site in content.LANDING_PAGES),
)
CLOUD_FILES: tuple[str, ...] = tuple(content.CLOUD_SIZES)
VIDEO_MODES: tuple[str, ...] = ("progressive", "segments")


@functools.cache
def _web_sizes() -> dict[str, int]:
    return {rel.removeprefix("web/"): len(data) for rel, data in content.web_files().items()}


def object_bytes(kind: str, name: str) -> int:
    """Bytes of one trial's object (a page counts all its files); 0 for video."""
    if kind == "cloud":
        return content.CLOUD_SIZES[name]
    if kind == "web":
        sizes = _web_sizes()
        return sizes.get(name) or sum(v for k, v in sizes.items() if k.startswith(f"{name}/"))
    return 0


# Sweep axes with these prefixes are handed to the executor untouched (e.g. server.tcp_cc).
PASSTHROUGH_PREFIXES: tuple[str, ...] = ("server.", "client.")

# Expectation metrics -> row column.
METRICS: dict[str, str] = {
    "connection_time": "connection_time_ms",
    "ttfb": "ttfb_ms",
    "download_time": "download_time_ms",
    "throughput": "throughput_mbps",
}
STATISTICS: tuple[str, ...] = (
    "median",
    "mean",
    "p25",
    "p75",
    "p90",
    "p95",
    "min",
    "max",
    "count",
)


def client_labels() -> list[str]:
    """Every label a client variant can have (for expectation group names)."""
    import itertools

    labels = []
    for tool in TOOLS.values():
        names = list(tool.options)
        for values in itertools.product(*(tool.options[n] for n in names)):
            labels.append(variant_label(tool, dict(zip(names, values, strict=True))))
    return labels


def variant_label(tool: Tool, options: dict[str, str]) -> str:
    short = {k: tool.short.get(k, {}).get(v, v) for k, v in options.items()}
    return tool.label.format(**short)


def variant_protocol(tool: Tool, options: dict[str, str]) -> str:
    return tool.protocol.format(**options)
