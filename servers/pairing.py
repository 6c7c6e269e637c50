"""Which servers speak which client variants: the one place that pairs them.

A server says what it speaks in its descriptor (`protocols: {tls: [...], http: [...]}`,
servers/README.md); a client variant needs a TLS version and an HTTP version its protocol
implies: `quic` needs TLS 1.3 and HTTP/3.0; `tls1.2`/`tls1.3` need that TLS version and the
variant's `http` option (HTTP/1.1 or 2.0), or either of them when the variant has no such
option (a browser negotiates it by ALPN). An experiment's trials run only for the pairs
spoken (experiments/matrix.py); a variant that no server of the experiment speaks is refused
at validation (experiments/schema.py); the report's stack matrix marks the rest "not spoken".
What a server serves pairs too: a replay server (`serves: replay`) only recorded pages, a
content server only the testbed's content (content_refusal).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from .descriptors import get_server, servers_serving

TCP_HTTP = ("HTTP/1.1", "HTTP/2.0")
QUIC_HTTP = ("HTTP/3.0",)
_HTTP_OPTION = {"1.1": "HTTP/1.1", "2": "HTTP/2.0", "3": "HTTP/3.0"}


class Variant(Protocol):
    """What pairing reads of a client variant (experiments.schema.ClientVariant)."""

    @property
    def label(self) -> str: ...

    @property
    def protocol(self) -> str: ...

    @property
    def options(self) -> dict[str, str]: ...


V = TypeVar("V", bound=Variant)


@dataclass(frozen=True)
class Spoken:
    """A variant as a report knows it (its rows' label, protocol and the tool's options)."""

    label: str
    protocol: str
    options: dict[str, str] = field(default_factory=dict)


def needs(variant: Variant) -> tuple[str, tuple[str, ...]]:
    """The TLS version and the HTTP versions (any one of them) a variant needs of a server."""
    if variant.protocol == "quic":
        return "TLSv1.3", QUIC_HTTP
    tls = "TLSv" + variant.protocol.removeprefix("tls")
    http = variant.options.get("http")
    return tls, ((_HTTP_OPTION.get(http, f"HTTP/{http}"),) if http else TCP_HTTP)


def speaks(server: str, variant: Variant) -> bool:
    """Whether the server's descriptor says it speaks what the variant needs (a server no
    longer described raises UnknownServer)."""
    spec = get_server(server)
    tls, http = needs(variant)
    return tls in spec.tls_versions and any(h in spec.http_versions for h in http)


def spoken_clients(server: str, variants: Iterable[V]) -> list[V]:
    return [v for v in variants if speaks(server, v)]


def spoken_pairs(servers: Sequence[str], variants: Sequence[V]) -> list[tuple[str, V]]:
    """(server, variant) in servers x variants order, only those the server speaks."""
    return [(s, v) for s in servers for v in variants if speaks(s, v)]


def unspoken_pairs(servers: Sequence[str], variants: Sequence[V]) -> list[tuple[str, V]]:
    return [(s, v) for s in servers for v in variants if not speaks(s, v)]


def need_text(variant: Variant) -> str:
    tls, http = needs(variant)
    return f"{tls} with {' or '.join(http)}"


def speaks_text(server: str) -> str:
    spec = get_server(server)
    return f"{server} speaks {'/'.join(spec.tls_versions)} with {', '.join(spec.http_versions)}"


def unserved_message(variant: Variant, servers: Sequence[str]) -> str:
    """Why a variant cannot run in an experiment with these servers (none speaks it)."""
    return (
        f"client variant '{variant.label}' needs {need_text(variant)}, which no server of "
        f"this experiment speaks ({'; '.join(speaks_text(s) for s in servers)})"
    )


def content_refusal(server: str, replays_pages: bool) -> str | None:
    """Why `server` cannot serve a workload that replays recorded pages (or, without pages,
    the testbed's content); None when it can. Nothing is accepted that cannot run: a replay
    server serves a recorded page and none of the testbed's content, and the content servers
    serve no recorded page."""
    replays = get_server(server).serves == "replay"
    if replays and not replays_pages:
        return (
            f"{server} serves a recorded page (serves: replay), not the testbed's content: give "
            "the workload one (workload: {kind: web, pages: [{har: FILE}]})"
        )
    if replays_pages and not replays:
        replayers = ", ".join(servers_serving("replay"))
        return (
            f"{server} serves the testbed's content, not a recorded page; the workload's pages "
            f"are replayed by: {replayers}"
        )
    return None
