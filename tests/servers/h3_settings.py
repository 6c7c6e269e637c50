"""One HTTP/3 connection that prints the server's SETTINGS as JSON ({identifier: value}), once
they arrive. Run in the aioquic client image: h3_settings.py ADDRESS NAME CAFILE."""

from __future__ import annotations

import asyncio
import json
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.settings: asyncio.Future[dict[int, int]] = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event: QuicEvent) -> None:
        self.h3.handle_event(event)
        received = self.h3.received_settings
        if received is not None and not self.settings.done():
            self.settings.set_result(received)


async def main(address: str, name: str, cafile: str) -> None:
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=name)
    config.load_verify_locations(cafile)
    async with connect(address, 443, configuration=config, create_protocol=Client) as client:
        assert isinstance(client, Client)
        settings = await asyncio.wait_for(client.settings, 10)
        print(json.dumps({str(int(key)): value for key, value in settings.items()}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
