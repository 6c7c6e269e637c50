"""A WebDriver BiDi session over a plain WebSocket, standard library only: enough RFC 6455 for
one local client (masked text frames out, text/close/ping frames in, fragments joined) and the
BiDi framing (commands with ids, their results, events). Firefox's remote agent speaks BiDi
natively, so no geckodriver, Selenium or websocket package stands between us and the browser.

One reader thread takes every frame: results wake the command that waits for them, events go
to the handlers subscribed by name. A closed socket (the browser died) fails every waiting
command with BidiClosed.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

_OP_TEXT, _OP_CONT, _OP_CLOSE, _OP_PING, _OP_PONG = 0x1, 0x0, 0x8, 0x9, 0xA


class BidiError(Exception):
    """A command the browser answered with an error: `error: message`."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(f"{error}: {message}")
        self.error = error
        self.message = message


class BidiClosed(Exception):
    """The socket closed (the browser exited or was killed) before the answer came."""


def _frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame (clients must mask, RFC 6455 5.3)."""
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class BidiSession:
    """A connection to ws://HOST:PORT/session; send() waits for the command's result."""

    def __init__(self, ws_url: str, timeout: float = 10.0) -> None:
        url = urlsplit(ws_url)
        self._sock = socket.create_connection((url.hostname, url.port or 80), timeout=timeout)
        self._handshake(url.netloc, url.path or "/session")
        self._sock.settimeout(None)  # the reader blocks; commands time out on their events
        self._send_lock = threading.Lock()
        self._next_id = 0
        self._waiting: dict[int, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self._handlers: dict[str, list[Callable[[dict[str, Any]], None]]] = {}
        self.closed = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def _handshake(self, host: str, path: str) -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self._sock.sendall(request.encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = self._sock.recv(4096)
            if not chunk:
                raise BidiClosed("the browser closed the socket during the WebSocket handshake")
            reply += chunk
        status = reply.split(b"\r\n", 1)[0].decode(errors="replace")
        if " 101 " not in status + " ":
            raise BidiClosed(f"WebSocket handshake refused: {status}")
        self._buffer = reply.split(b"\r\n\r\n", 1)[1]

    def _recv_exact(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise BidiClosed("the browser closed the socket")
            self._buffer += chunk
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def _read_frame(self) -> tuple[bool, int, bytes]:
        b0, b1 = self._recv_exact(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._recv_exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._recv_exact(8))[0]
        mask = self._recv_exact(4) if b1 & 0x80 else b""
        payload = self._recv_exact(n)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bool(b0 & 0x80), b0 & 0x0F, payload

    def _read_loop(self) -> None:
        message = b""
        try:
            while True:
                final, opcode, payload = self._read_frame()
                if opcode == _OP_CLOSE:
                    break
                if opcode == _OP_PING:
                    self._send_raw(_frame(_OP_PONG, payload))
                    continue
                if opcode not in (_OP_TEXT, _OP_CONT):
                    continue
                message += payload
                if final:
                    self._dispatch(json.loads(message))
                    message = b""
        except (OSError, BidiClosed, ValueError):
            pass
        finally:
            self.closed.set()
            for event, _ in list(self._waiting.values()):
                event.set()  # no answer will come: send() raises BidiClosed

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message and message.get("id") in self._waiting:
            event, box = self._waiting[message["id"]]
            box.append(message)
            event.set()
        elif message.get("type") == "event":
            for handler in self._handlers.get(message.get("method", ""), []):
                handler(message.get("params") or {})

    def _send_raw(self, frame: bytes) -> None:
        with self._send_lock:
            self._sock.sendall(frame)

    def on(self, method: str, handler: Callable[[dict[str, Any]], None]) -> None:
        self._handlers.setdefault(method, []).append(handler)

    def send(self, method: str, params: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """The command's result; BidiError when the browser answered an error, TimeoutError
        when it did not answer within `timeout`, BidiClosed when the socket went away."""
        with self._send_lock:
            self._next_id += 1
            ident = self._next_id
        event: threading.Event = threading.Event()
        box: list[dict[str, Any]] = []
        self._waiting[ident] = (event, box)
        try:
            if self.closed.is_set():
                raise BidiClosed("the browser closed the socket")
            try:
                self._send_raw(
                    _frame(_OP_TEXT, json.dumps({"id": ident, "method": method, "params": params}).encode())
                )
            except OSError as e:
                raise BidiClosed(f"the browser closed the socket: {e}") from None
            if not event.wait(timeout):
                raise TimeoutError(f"{method}: no answer within {timeout:g} s")
            if not box:
                raise BidiClosed(f"the browser closed the socket during {method}")
            answer = box[0]
        finally:
            self._waiting.pop(ident, None)
        if answer.get("type") == "error":
            raise BidiError(answer.get("error", "error"), answer.get("message", ""))
        return answer.get("result") or {}

    def close(self) -> None:
        try:
            self._send_raw(_frame(_OP_CLOSE, b""))
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass
