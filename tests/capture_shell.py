"""How the docker and path tests judge a tool's row against a capture of its connection: the
shell lines are the product's (clients/capture_shell.py, which the browser bench runs too);
the rules for wirecheck.py's deltas are here."""

from __future__ import annotations

from quicbed.clients.capture_shell import captured, wirecheck

__all__ = ["ARRIVING", "ARRIVING_TLS12", "attempt_line", "captured", "tool_earlier_than_wire", "wirecheck"]


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
