"""The Firefox driver's pure parts (clients/browser/firefox_driver.py: the profile's prefs, the
error pages' categories, what it refuses) and its WebDriver BiDi client (bidi_client.py)
against a real WebSocket peer on a local socket. Loaded by path, as browser_perf is: the
driver runs in the client image."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import struct
import sys
import threading

import pytest
from browser_module import browser_argv, load_browser_perf

from quicbed.paths import REPO

bp = load_browser_perf()
bidi_client = sys.modules["bidi_client"]
ff = sys.modules["firefox_driver"]
URL = "https://server.quicbed/web/pages/news/index.html"


def _argv(ca: str, *extra: str) -> list[str]:
    return browser_argv(URL, ca, *extra)


def _prefs(ca: str, protocol: str) -> dict:
    return ff.firefox_prefs(bp.parse_args(_argv(ca, "--browser", "firefox", "--protocol", protocol)))


def test_quic_is_forced_for_the_origin_and_tcp_pins_its_tls_version(ca: str) -> None:
    quic = _prefs(ca, "quic")
    assert quic["network.http.http3.enable"] is True
    assert quic["network.http.http3.alt-svc-mapping-for-testing"] == "server.quicbed;h3=:443"
    assert quic["network.http.http3.disable_when_third_party_roots_found"] is False
    for protocol, version in (("tls1.3", 4), ("tls1.2", 3)):
        tcp = _prefs(ca, protocol)
        assert tcp["network.http.http3.enable"] is False
        assert "network.http.http3.alt-svc-mapping-for-testing" not in tcp
        assert tcp["security.tls.version.min"] == tcp["security.tls.version.max"] == version


def test_names_resolve_only_to_the_resolve_address_and_nothing_phones_home(ca: str) -> None:
    prefs = _prefs(ca, "quic")
    assert prefs["network.dns.forceResolve"] == "10.0.2.10"
    assert prefs["network.trr.mode"] == 5
    off = (
        "toolkit.telemetry.enabled",
        "datareporting.policy.dataSubmissionEnabled",
        "app.update.auto",
        "browser.safebrowsing.malware.enabled",
        "browser.safebrowsing.phishing.enabled",
        "network.captive-portal-service.enabled",
        "network.connectivity-service.enabled",
        "dom.push.enabled",
        "app.normandy.enabled",
        "network.predictor.enabled",
        "browser.chrome.guess_favicon",
    )
    assert [k for k in off if prefs[k] is not False] == []
    assert prefs["security.OCSP.enabled"] == 0


def test_user_js_is_one_pref_per_line_in_firefox_syntax(ca: str) -> None:
    text = ff.user_js(_prefs(ca, "tls1.2"))
    lines = text.splitlines()
    assert lines and all(re.fullmatch(r'user_pref\("[^"]+", .+\);', line) for line in lines)
    assert 'user_pref("security.tls.version.max", 3);' in lines
    assert 'user_pref("network.http.http3.enable", false);' in lines


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("unknown error: Reached error page: about:neterror?e=connectionFailure&u=https%3A//x/", "connect"),
        ("unknown error: Reached error page: about:neterror?e=netTimeout&u=https%3A//x/", "timeout"),
        ("unknown error: Reached error page: about:neterror?e=nssFailure2&u=https%3A//x/", "tls"),
        ("unknown error: Reached error page: about:certerror?e=nssBadCert&u=https%3A//x/", "tls"),
        ("unknown error: Error: NS_ERROR_CONNECTION_REFUSED", "connect"),
        ("unknown error: Error: NS_ERROR_NET_TIMEOUT", "timeout"),
        (
            "unknown error: Error: NS_ERROR_GENERATE_FAILURE(NS_ERROR_MODULE_SECURITY, "
            "SEC_ERROR_UNKNOWN_ISSUER)",
            "tls",
        ),
        ("unknown error: Error: NS_ERROR_NET_HTTP3_PROTOCOL_ERROR", "connect"),
        ("unknown error: something else", "browser"),
    ],
)
def test_firefox_error_pages_map_to_the_row_categories(message: str, category: str) -> None:
    error = ff.categorize_firefox(message)
    assert error.split(":", 1)[0] == category and "\n" not in error
    assert error.split(":", 1)[0] in bp.ERROR_CATEGORIES


def test_firefox_refuses_a_playback_and_two_addresses(ca: str, capsys) -> None:
    argv = _argv(ca, "--browser", "firefox")
    assert bp.main(argv + ["--duration", "5"]) == bp.EXIT_UNSUPPORTED
    assert "page loads only" in capsys.readouterr().err
    # Two addresses: each name must resolve to its own through the hosts file, and this
    # host's file names neither.
    two = argv + ["--resolve", "cdn.page.example:443:10.0.2.11"]
    assert bp.main(two) == bp.EXIT_UNSUPPORTED
    assert "several --resolve addresses need each name in the hosts file" in capsys.readouterr().err


def test_a_replayed_page_resolves_its_origins_from_the_hosts_file(ca: str, monkeypatch) -> None:
    """Several origins at several addresses: no forceResolve (one address for every name), the
    container's hosts file instead, checked against --resolve; QUIC forced for each origin."""
    names = {"server.quicbed": "10.0.2.10", "cdn.page.example": "10.0.2.51"}
    monkeypatch.setattr(ff, "_hosts_file_address", lambda name: names.get(name, ""))
    argv = _argv(ca, "--browser", "firefox", "--resolve", "cdn.page.example:443:10.0.2.51")
    args = bp.parse_args(argv)
    prefs = ff.firefox_prefs(args)
    assert "network.dns.forceResolve" not in prefs
    assert prefs["network.http.http3.alt-svc-mapping-for-testing"] == (
        "server.quicbed;h3=:443,cdn.page.example;h3=:443"
    )
    names["cdn.page.example"] = "10.0.2.52"  # the hosts file disagrees: refused, not guessed
    with pytest.raises(bp.Unsupported, match="cdn.page.example resolves to 10.0.2.52, not 10.0.2.51"):
        bp.parse_args(argv)


def test_the_firefox_descriptor_calls_browser_perf_with_firefox() -> None:
    text = (REPO / "clients" / "firefox" / "client.yaml").read_text()
    assert "command: [browser_perf, --browser, firefox]" in text
    assert "firefox" in bp.DRIVERS and bp.DRIVERS["firefox"] is ff


# ------------------------------------------------------------------------------ BiDi client


def _serve_one(server: socket.socket, script: list[str]) -> None:
    """A WebSocket peer: accept, answer the upgrade, then for each received command: an event
    and the command's result (or, at "close", a close frame)."""
    conn, _ = server.accept()
    request = b""
    while b"\r\n\r\n" not in request:
        request += conn.recv(4096)
    key = re.search(rb"Sec-WebSocket-Key: (\S+)", request).group(1)
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
    conn.sendall(b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    for step in script:
        b0, b1 = conn.recv(2)
        assert b1 & 0x80, "a client frame must be masked"
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", conn.recv(2))[0]
        mask = conn.recv(4)
        data = b""
        while len(data) < n:
            data += conn.recv(n - len(data))
        command = json.loads(bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
        if step == "close":
            conn.sendall(bytes([0x88, 0]))
            break
        event = json.dumps({"type": "event", "method": "network.beforeRequestSent", "params": {"n": 1}})
        answer = json.dumps({"type": "success", "id": command["id"], "result": {"echo": command["method"]}})
        big = answer.encode()
        conn.sendall(bytes([0x81, len(event)]) + event.encode())
        conn.sendall(bytes([0x81, 126]) + struct.pack("!H", len(big)) + big)  # 16-bit length
    conn.close()


def test_bidi_session_gets_results_events_and_a_closed_socket() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    peer = threading.Thread(target=_serve_one, args=(server, ["session.new", "close"]), daemon=True)
    peer.start()
    session = bidi_client.BidiSession(f"ws://127.0.0.1:{port}/session")
    events: list[dict] = []
    session.on("network.beforeRequestSent", events.append)
    assert session.send("session.new", {"capabilities": {}}, timeout=5) == {"echo": "session.new"}
    assert events == [{"n": 1}]
    with pytest.raises(bidi_client.BidiClosed):
        session.send("browsingContext.navigate", {}, timeout=5)
    session.close()
    server.close()


def test_an_unconnected_udp_socket_counts_only_when_asked() -> None:
    """Firefox's QUIC socket is at times bound but not connect()ed (its remote end reads
    0.0.0.0:0 in /proc/net/udp): the QUIC row finds it by asking for unconnected UDP sockets,
    and a TCP row never takes one."""
    proc_watch = sys.modules["proc_watch"]
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    connected = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    loose = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with server, connected, loose:
        server.bind(("127.0.0.1", 0))
        connected.connect(server.getsockname())
        loose.bind(("127.0.0.1", 0))
        ip, port = server.getsockname()
        me = [os.getpid()]
        strict = proc_watch.local_endpoints(me, ip, port)
        assert strict == [connected.getsockname()], strict
        found = proc_watch.local_endpoints(me, ip, port, unconnected_udp=True)
        assert {connected.getsockname(), loose.getsockname()} <= set(found), found
