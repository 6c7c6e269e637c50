"""What a running server reports: server_version() and server_settings() (for the run manifest).

The version command and its parser, the QUIC facts and the build-info facts come from the
server's descriptor; the kernel side (TCP congestion control, initcwnd, buffers, offloads) is
read from the container.
"""

from __future__ import annotations

import shlex

from .descriptors import get_server
from .lifecycle import exec_in, read_in
from .spec import ServerError, ServerSpec
from .versionparse import build_info, parse_version


def server_version(container: str, name: str) -> str:
    """The version the binary reports (caddy: 'v2.11.9', nginx: '1.26.3')."""
    spec = get_server(name)
    proc = exec_in(container, *spec.version_command)
    out = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or not out:
        raise ServerError(f"{shlex.join(spec.version_command)} failed in {container}: {out}")
    return parse_version(
        out, spec.version_parser, spec.version_options, lambda argv: exec_in(container, *argv)
    )


def server_settings(container: str, name: str) -> dict:
    """What shapes the TCP-vs-QUIC comparison on the server side, for the run manifest."""
    spec = get_server(name)

    def sysctl(key: str) -> str | None:
        value = read_in(container, "/proc/sys/" + key.replace(".", "/"))
        return " ".join(value.split()) if value is not None else None

    routes = exec_in(container, "ip", "-o", "route", "show", "table", "all").stdout.splitlines()
    links = exec_in(container, "ip", "-o", "link", "show").stdout.splitlines()
    ifaces = [ln.split(":")[1].strip().split("@")[0] for ln in links if ln.count(":") >= 2]
    initcwnd = sorted({r.split("initcwnd ")[1].split()[0] for r in routes if "initcwnd " in r})
    return {
        "server": spec.name,
        "image": spec.image,
        "version": server_version(container, name),
        "config": spec.config,
        "config_sha256": next(iter(exec_in(container, "sha256sum", spec.config).stdout.split()), None),
        "tls_versions": list(spec.tls_versions),
        "http_versions": list(spec.http_versions),
        "tcp_cc": sysctl("net.ipv4.tcp_congestion_control"),
        # Linux's default initial window is 10 segments unless a route sets initcwnd.
        "initcwnd": initcwnd or ["10 (kernel default, no route initcwnd)"],
        "initrwnd_routes": [r for r in routes if "initrwnd " in r],
        "routes": routes,
        "tcp_slow_start_after_idle": sysctl("net.ipv4.tcp_slow_start_after_idle"),
        "tcp_ecn": sysctl("net.ipv4.tcp_ecn"),
        "tcp_rmem": sysctl("net.ipv4.tcp_rmem"),
        "tcp_wmem": sysctl("net.ipv4.tcp_wmem"),
        "rmem_max": sysctl("net.core.rmem_max"),
        "wmem_max": sysctl("net.core.wmem_max"),
        "rmem_default": sysctl("net.core.rmem_default"),
        "wmem_default": sysctl("net.core.wmem_default"),
        # GSO/GRO change what QUIC and TCP cost in CPU at high rates.
        "links": links,
        "offloads": {i: _offloads(container, i) for i in ifaces if i != "lo"},
        "qdiscs": exec_in(container, "tc", "qdisc", "show").stdout.splitlines(),
        "quic": _quic_facts(container, spec),
    }


_OFFLOADS = (
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
    "generic-receive-offload",
    "tx-udp-segmentation",
    "rx-udp-gro-forwarding",
    "tx-checksumming",
    "rx-checksumming",
)


def _offloads(container: str, iface: str) -> dict[str, str]:
    out = exec_in(container, "ethtool", "-k", iface).stdout
    features = dict(line.strip().split(": ", 1) for line in out.splitlines() if ": " in line)
    return {k: features[k].split()[0] for k in _OFFLOADS if k in features}


def _quic_facts(container: str, spec: ServerSpec) -> dict[str, str]:
    """The descriptor's quic: facts, plus those of its build_info_facts (the exact quic-go and Go
    versions inside Caddy's binary)."""
    facts = dict(spec.quic)
    if spec.build_info_facts:
        mods = build_info(exec_in(container, *spec.build_info_command).stdout)
        for fact, module in spec.build_info_facts.items():
            facts[fact] = mods.get(module, "unknown")
    return facts
