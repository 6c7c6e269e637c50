"""One HTTP/3 GET whose request stream ends in a frame of its own, after the HEADERS frame
(RFC 9114 allows it; quic-go's client does it now and then): prints the response's status.
Run in the aioquic client image: split_fin_get.py ADDRESS NAME CAFILE PATH."""

from __future__ import annotations

import asyncio
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.status: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event: QuicEvent) -> None:
        for h3_event in self.h3.handle_event(event):
            if isinstance(h3_event, HeadersReceived) and not self.status.done():
                self.status.set_result(dict(h3_event.headers)[b":status"].decode())


async def main(address: str, name: str, cafile: str, path: str) -> None:
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=name)
    config.load_verify_locations(cafile)
    async with connect(address, 443, configuration=config, create_protocol=Client) as client:
        assert isinstance(client, Client)
        stream = client._quic.get_next_available_stream_id()
        headers = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", name.encode()),
            (b":path", path.encode()),
        ]
        client.h3.send_headers(stream, headers, end_stream=False)
        client.transmit()
        await asyncio.sleep(0.05)  # the HEADERS leave in a packet of their own
        if not client.status.done():  # a server may answer first, and end the stream (quinn)
            client._quic.send_stream_data(stream, b"", end_stream=True)  # a bare FIN, as quic-go's
            client.transmit()
        print(await asyncio.wait_for(client.status, 10))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
