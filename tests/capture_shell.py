"""Shell lines that capture a tool's traffic inside a client container (its tcpdump,
tshark and wirecheck.py); used by the docker and path tests."""

from __future__ import annotations


def captured(command: str, iface: str, stem: str) -> str:
    """Run `command` while tcpdump writes port 443 on `iface` to STEM.pcap. tcpdump can take
    most of a second to set up its ring buffer: the command waits for "listening on"."""
    return (
        f"rm -f {stem}.pcap {stem}.keys {stem}.err && "
        f"(tcpdump --immediate-mode -B 131072 -Z root -i {iface} -w {stem}.pcap 'port 443' "
        f"2>{stem}.err & echo $! > {stem}.pid) && i=0 && "
        f"while ! grep -q listening {stem}.err && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); "
        f"done; {command}; sleep 0.3; kill $(cat {stem}.pid); sleep 0.3"
    )


def wirecheck(tool: str, iface: str, stem: str, *, false_start: bool = False) -> str:
    """The tool's row checked against a capture of its connection, decrypted by its key log
    (wirecheck.py --json prints the verdict as the last line). false_start: the tool is a
    browser that ends a TLS 1.2 handshake when its own Finished leaves (wirecheck.py)."""
    return (
        captured(f"{tool} --keylog {stem}.keys > {stem}.json", iface, stem)
        + f"; wirecheck.py --pcap {stem}.pcap --row {stem}.json --keylog {stem}.keys --json"
        + (" --false-start" if false_start else "")
    )


# wirecheck.py's deltas are wire time minus tool time (ms). A packet that arrives at the
# client is on the wire (captured as it arrives) before any program can have read it, so for
# such an event the tool never reports an earlier instant than the wire: delta <= slack (the
# clocks' and the tools' resolution). A busy host only makes the tool later (a more negative
# delta): that is why the tight bound is held on the best of a few attempts, while this sign
# holds for every attempt. Arriving in every protocol: the response's first byte; TLS 1.2's
# handshake ends with the server's ChangeCipherSpec+Finished arriving (the tools: OpenSSL, no
# False Start). TLS 1.3 and QUIC end theirs with the client's own Finished leaving, which a
# library may time just before sending it (ngtcp2's handshake_completed): no sign there.
ARRIVING = ("first_byte",)
ARRIVING_TLS12 = ("handshake", "first_byte")


def attempt_line(attempt: int, result: dict) -> str:
    """One attempt's deltas, as every test with attempts reports them."""
    deltas = ", ".join(
        f"{k} {d:+.3f} ms" if (d := result["events"][k]["delta_ms"]) is not None else f"{k} -"
        for k in ("handshake", "first_byte")
    )
    return f"attempt {attempt}: {deltas} (wire minus tool)"


def tool_earlier_than_wire(result: dict, events: tuple[str, ...], slack_ms: float) -> list[str]:
    """The events of `events` the tool put earlier than their packet's arrival, beyond
    `slack_ms`."""
    early = []
    for k in events:
        delta = result["events"][k]["delta_ms"]
        if delta is None:
            early.append(f"{k}: no wire or tool instant")
        elif delta > slack_ms:
            early.append(f"{k}: the tool is {delta:.3f} ms before the wire")
    return early
