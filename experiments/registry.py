"""What an experiment may name: servers, client tools, workloads, link parameters, metrics.

One module gathers them; a server or a client is a descriptor file (no Python), a workload
object a one-line change.
"""

from __future__ import annotations

from quicbed import rowschema, servers, workloads
from quicbed.analysis import physics
from quicbed.clients import tools

# Servers: one descriptor each, servers/<name>/server.yaml.
SERVERS: tuple[str, ...] = tuple(servers.SERVERS)


# Client tools: one descriptor each, clients/<name>/client.yaml (the contract: clients/tools.py).
TOOLS = tools.TOOLS

PROTOCOLS = rowschema.PROTOCOLS
# First-connection handshake cost in RTTs (TCP + TLS, or QUIC): the dry-run estimate and the
# synthetic executor use the analysis's own figures (analysis/physics.py).
HANDSHAKE_RTTS = physics.HANDSHAKE_RTTS

# Workload kinds: one module each, in workloads/ (its registry).
WORKLOADS = workloads.WORKLOADS

# Sweep axes besides the link parameters (experiments/links.py), each with what consumes it;
# an axis nothing reads is refused, never silently ignored.
PARAM_AXES: dict[str, str] = {
    "server.tcp_cc": "the servers' TCP congestion control (net.ipv4.tcp_congestion_control in "
    "each server container; TLS over TCP only, QUIC stacks choose their own)",
}

# Expectation metrics -> row column: the row schema's. The expectation language (its
# statistics and group names) is analysis/expectations.py.
METRICS = rowschema.METRICS
