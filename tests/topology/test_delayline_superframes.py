"""GSO super-frames through the delay line (topology/delayline): whole where only delay applies,
cut into the wire packets the kernel's GSO would send where a decision is per packet.

The senders' segmentation offloads are on behind the delay line at 1 Gbit/s (net.py), so TCP and UDP
(UDP_SEGMENT, as quic-go sends) hand it super-frames. What is judged is what a wrong cut
breaks: every byte of a TCP stream arrives in order (sequence numbers, lengths), every UDP
datagram arrives whole and as sent (lengths, boundaries), and loss is drawn per wire packet.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scipy.stats import binomtest
from test_path import TOPOLOGY_IMAGE

from quicbed.topology.hosts import NsHost
from quicbed.topology.net import ADDRESSES, HostSpec, Testbed, TestbedConfig
from quicbed.topology.profiles import apply_overrides, load_profile

pytestmark = [pytest.mark.path, pytest.mark.usefixtures("clean_slate")]

STREAM_BYTES = 6_000_000
# The stream is a run of 4-byte counters: a segment cut at the wrong offset, or sent with the
# wrong sequence number, changes what the receiver reads.
TCP_SENDER = f"""
import socket, struct
data = b"".join(struct.pack(">I", i) for i in range({STREAM_BYTES} // 4))
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 5302)); srv.listen(1); print("ready", flush=True)
conn, _ = srv.accept(); conn.sendall(data); conn.close()
"""
TCP_RECEIVER = f"""
import socket, struct, json
want = b"".join(struct.pack(">I", i) for i in range({STREAM_BYTES} // 4))
s = socket.create_connection(("{ADDRESSES['server']}", 5302), timeout=60)
got = bytearray()
while chunk := s.recv(1 << 20):
    got += chunk
print(json.dumps({{"length": len(got), "same": bytes(got) == want}}))
"""

SEGMENT, PER_SEND, SENDS = 1200, 10, 1000
# Each datagram: its 4-byte number, then that number mod 251 repeated; sent PER_SEND at a time
# as one UDP_SEGMENT super-frame.
UDP_RECEIVER = f"""
import socket, struct, json
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 5301))
s.settimeout(10); print("ready", flush=True)
seen, bad = set(), 0
try:
    while True:
        d = s.recv(65536); s.settimeout(1.5)
        n = struct.unpack(">I", d[:4])[0]
        if len(d) != {SEGMENT} or d[4:] != bytes([n % 251]) * ({SEGMENT} - 4):
            bad += 1
        else:
            seen.add(n)
except socket.timeout:
    pass
print(json.dumps({{"received": len(seen), "bad": bad}}))
"""
UDP_SENDER = f"""
import socket, struct, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(17, 103, {SEGMENT})  # SOL_UDP, UDP_SEGMENT
def datagram(n):
    return struct.pack(">I", n) + bytes([n % 251]) * ({SEGMENT} - 4)
for k in range({SENDS}):
    s.sendto(b"".join(datagram(k * {PER_SEND} + j) for j in range({PER_SEND})),
             ("{ADDRESSES['client']}", 5301))
    time.sleep(0.002)
"""


def _config(loss_pct: float) -> TestbedConfig:
    # Super-frames cross the delay line from SUPER_FRAMES_FROM_MBIT both ways (net.py).
    profile = apply_overrides(load_profile("germany"), {"rate_mbit": "1000", "loss_pct": str(loss_pct)})
    return TestbedConfig(
        profile=profile,
        backend="delayline",
        client=HostSpec(TOPOLOGY_IMAGE),
        servers=(HostSpec(TOPOLOGY_IMAGE),),
    )


def _pair(listener: NsHost, listens: str, connector: NsHost, connects: str) -> tuple[str, str]:
    """The first script on `listener` until it prints "ready", then the second on `connector`
    (host Python in their network namespaces): what each printed after."""
    proc = subprocess.Popen(
        listener.popen_argv([sys.executable, "-c", listens]), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    connected = connector.run([sys.executable, "-c", connects], timeout=120)
    listened, _ = proc.communicate(timeout=120)
    return listened, connected.stdout


def _counters(tb: Testbed) -> dict[str, int]:
    """The down delay line's counters, as of now (a re-apply makes it write them)."""
    assert tb.backend and tb.current
    tb.apply_link(*tb.current)
    return tb.backend.applied("down")  # type: ignore[attr-defined]


@pytest.mark.parametrize("loss_pct", [0.0, 1.0])
def test_tcp_stream_arrives_whole_through_super_frames(loss_pct: float) -> None:
    """Without loss the super-frames pass whole and none is lost; with 1 % loss they are cut,
    and the loss falls on wire packets at the configured rate (binomial, 99.9 %)."""
    with Testbed(_config(loss_pct)) as tb:
        before = _counters(tb)
        result = json.loads(_pair(tb.server, TCP_SENDER, tb.client, TCP_RECEIVER)[1])
        after = _counters(tb)
    assert result == {"length": STREAM_BYTES, "same": True}, result
    delta = {key: after[key] - before.get(key, 0) for key in after}
    if loss_pct == 0:
        assert delta["super_frames"] > 0 and delta["segmented"] == 0, delta
        assert delta["lost"] == 0 and delta["over_limit"] == 0, delta
    else:
        assert delta["segmented"] > 0 and delta["super_frames"] == 0, delta
        ci = binomtest(delta["lost"], delta["rx_a"]).proportion_ci(0.999, method="exact")
        assert ci.low <= loss_pct / 100 <= ci.high, delta


@pytest.mark.parametrize("loss_pct", [0.0, 10.0])
def test_udp_segment_datagrams_arrive_as_sent(loss_pct: float) -> None:
    """quic-go's UDP_SEGMENT super-frames: every datagram that arrives is one that was sent,
    whole; without loss all arrive, with 10 % loss that share is missing (binomial, 99.9 %)."""
    with Testbed(_config(loss_pct)) as tb:
        before = _counters(tb)
        result = json.loads(_pair(tb.client, UDP_RECEIVER, tb.server, UDP_SENDER)[0])
        after = _counters(tb)
    sent = SENDS * PER_SEND
    assert result["bad"] == 0, result
    delta = {key: after[key] - before.get(key, 0) for key in after}
    if loss_pct == 0:
        assert result["received"] == sent, (result, delta)
        assert delta["super_frames"] >= SENDS, delta
    else:
        assert delta["segmented"] >= SENDS, delta
        ci = binomtest(sent - result["received"], sent).proportion_ci(0.999, method="exact")
        assert ci.low <= loss_pct / 100 <= ci.high, (result, delta)
