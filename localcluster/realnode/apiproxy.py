"""The API server for pods: forwards TCP from the node's bridge address to the apiserver on loopback
(which listens on 127.0.0.1 only). With the node's DNAT of the `kubernetes` Service address to here,
an in-cluster client (the operator's Deployment) reaches the API as on any cluster; no kube-proxy.

Usage: python -m localcluster.realnode.apiproxy LISTEN_HOST:PORT TARGET_HOST:PORT
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError):
        writer.close()


async def serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, *listen)
    async with server:
        await server.serve_forever()


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main(argv: list[str]) -> int:
    asyncio.run(serve(_addr(argv[0]), _addr(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
